"""Model names as local servers use them: ``/v1/models`` lists a short id (not a
path on disk), and ``--strict_model_names true`` answers other names with 404."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from ngramspec.server.served_model import short_model_id  # noqa: E402
from tests.support.live_server import serving  # noqa: E402

BODY = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 2, "temperature": 0}


@pytest.mark.parametrize("given, short", [
    ("smollm2-135m", "smollm2-135m"),                                   # a name from ngramspec.models
    ("/models/SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct.Q4_1"),
    ("relative/dir/model.GGUF", "model"),
    ("/models/no-extension", "no-extension"),
    ("/models/.gguf", ".gguf"),                                         # no stem: the name as it is
    ("weights.bin", "weights.bin"),
])
def test_short_model_id(given, short):
    assert short_model_id(given) == short


def test_a_path_is_listed_by_its_stem_and_strict_names_refuse_others(smollm2_path):
    stem = Path(smollm2_path).stem
    with serving("--model", smollm2_path, "--n_ctx", "512", "--verbose", "false", "--warmup", "false",
                 "--strict_model_names", "true") as server:
        assert [m.id for m in server.client().models.list().data] == [stem]   # it was the absolute path
        for name in (stem, smollm2_path, Path(smollm2_path).name):
            r = server.post("/v1/chat/completions", json.dumps({**BODY, "model": name}))
            assert r.status_code == 200, (name, r.text)
        r = server.post("/v1/chat/completions", json.dumps({**BODY, "model": "gpt-4o"}))
        assert r.status_code == 404, r.text
        err = r.json()["error"]
        assert err["code"] == "model_not_found" and err["param"] == "model" and stem in err["message"]
        # No model named: the one served, strict or not.
        assert server.post("/v1/chat/completions", json.dumps(BODY)).status_code == 200
