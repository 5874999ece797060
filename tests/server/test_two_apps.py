"""Each app made by create_app owns its model and state: two apps in one process
list and serve their own models, and llama-cpp-python's module is left as it was."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")


def _app(model_path: str, alias: str, *extra: str):
    from ngramspec.server.app import create_app
    from ngramspec.server.launch import build_parser, settings_from_args

    args = build_parser().parse_args(["--model", model_path, "--model_alias", alias, "--n_ctx", "512",
                                      "--n_threads", "1", "--n_threads_batch", "1", "--warmup", "false",
                                      "--max_draft", "4", *extra])
    server_settings, model_settings, options, names = settings_from_args(args)
    return create_app(server_settings, model_settings, options, names)


def test_two_apps_in_one_process_serve_their_own_models(smollm2_path, invariance_cache_dir):
    from fastapi.testclient import TestClient
    from llama_cpp.server import app as llama_app

    routes_before = list(llama_app.router.routes)
    first = _app(smollm2_path, "first")
    second = _app(smollm2_path, "second", "--api_key", "s3cret")
    assert first.state.ngramspec.proxy.wrapper.llm is not second.state.ngramspec.proxy.wrapper.llm
    # Nothing written into llama-cpp-python's module: its router and model global as they were.
    assert llama_app.router.routes == routes_before and llama_app._llama_proxy is None

    with TestClient(first) as a, TestClient(second) as b:
        key = {"Authorization": "Bearer s3cret"}
        assert [m["id"] for m in a.get("/v1/models").json()["data"]] == ["first"]
        assert [m["id"] for m in b.get("/v1/models", headers=key).json()["data"]] == ["second"]
        # Each app checks its own settings: the key is the second's alone.
        assert b.get("/v1/models").status_code == 401
        assert a.get("/v1/models").status_code == 200
        body = {"prompt": "1, 2, 3, 4, 5,", "max_tokens": 12, "temperature": 0}
        ra = a.post("/v1/completions", json=body)
        rb = b.post("/v1/completions", json=body, headers=key)
        assert ra.status_code == rb.status_code == 200, (ra.text, rb.text)
        assert ra.json()["model"] == "first" and rb.json()["model"] == "second"
        assert ra.json()["choices"][0]["text"] == rb.json()["choices"][0]["text"]   # one model file, greedy
        assert a.get("/health").json()["served"] == 1 and b.get("/health").json()["served"] == 1
        tokens = a.post("/extras/tokenize", json={"input": "hello world"}).json()["tokens"]
        assert b.post("/extras/detokenize", json={"tokens": tokens}, headers=key).json()["text"].strip() == \
            "hello world"
