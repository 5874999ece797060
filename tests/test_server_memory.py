"""`ngramspec serve --memory FILE`: checked before the model loads; a bad file is one line."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")

from ngramspec import server  # noqa: E402


def _options(tmp_path, *extra):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")   # resolve_model_path only needs an existing file here
    return server.settings_from_args(server.build_parser().parse_args(["--model", str(model), *extra]))


def test_memory_flag_reaches_the_options(tmp_path):
    _, _, options, _ = _options(tmp_path, "--memory", str(tmp_path / "mem.bin"))
    assert options.memory == str(tmp_path / "mem.bin")
    _, _, options, _ = _options(tmp_path)
    assert options.memory is None


@pytest.mark.parametrize("make", ["directory", "corrupt", "no parent"])
def test_bad_memory_files_are_user_errors(tmp_path, make):
    path = tmp_path / "mem.bin"
    if make == "directory":
        path.mkdir()
    elif make == "corrupt":
        path.write_bytes(b"not a memory file")
    else:
        path = tmp_path / "missing" / "mem.bin"
    with pytest.raises(server.UserError, match="--memory"):
        _options(tmp_path, "--memory", str(path))
