"""The benchmark's GPU offload and flash-attention settings: what each loader gets."""
from __future__ import annotations

import pytest

from ngramspec.suite.llama_settings import LLAMA_DEFAULTS, LlamaSettings


def test_the_defaults_are_llama_cpp_pythons():
    assert LLAMA_DEFAULTS.llama_kwargs() == {"n_gpu_layers": 0, "flash_attn": False}
    assert LLAMA_DEFAULTS.llama_server_args() == ("-ngl", "0", "-fa", "off")
    assert LLAMA_DEFAULTS.serve_args() == ("--n_gpu_layers", "0", "--flash_attn", "false")


def test_every_loader_gets_the_same_offload_and_attention():
    gpu = LlamaSettings(n_gpu_layers=-1, flash_attn=True)
    assert gpu.llama_kwargs() == {"n_gpu_layers": -1, "flash_attn": True}
    assert gpu.serve_args() == ("--n_gpu_layers", "-1", "--flash_attn", "true")
    # llama-server spells "every layer" as "all" (its -1 means "auto"), and offloads a draft model with -ngld.
    assert gpu.llama_server_args() == ("-ngl", "all", "-fa", "on")
    assert gpu.llama_server_args(draft=True) == ("-ngl", "all", "-fa", "on", "-ngld", "all")
    assert LlamaSettings(n_gpu_layers=12).llama_server_args(draft=True)[-2:] == ("-ngld", "12")
    assert gpu.describe() == "n_gpu_layers=-1, flash_attn=True"
    assert LlamaSettings.from_dict({"n_gpu_layers": -1, "flash_attn": True}) == gpu
    assert LlamaSettings.from_dict(None) == LLAMA_DEFAULTS


@pytest.mark.parametrize("kwargs, error, needle", [
    ({"n_gpu_layers": -2}, ValueError, "n_gpu_layers must be >= -1"),
    ({"n_gpu_layers": 1.5}, TypeError, "n_gpu_layers must be an int"),
    ({"n_gpu_layers": True}, TypeError, "n_gpu_layers must be an int"),
    ({"flash_attn": 1}, TypeError, "flash_attn must be a bool"),
])
def test_bad_settings_are_refused(kwargs, error, needle):
    with pytest.raises(error, match=needle):
        LlamaSettings(**kwargs)
    with pytest.raises((error, TypeError)):
        LlamaSettings.from_dict({**kwargs})


def test_unknown_keys_are_refused():
    with pytest.raises(TypeError):
        LlamaSettings.from_dict({"n_gpu_layers": 0, "tensor_split": [1]})


def test_the_suites_llama_gets_the_settings(smollm2_path):
    from ngramspec.suite.loading import load

    llm = load(smollm2_path, "plain", 256, 1, LlamaSettings(n_gpu_layers=-1, flash_attn=True))
    try:
        assert llm.context_params.flash_attn_type == 1        # LLAMA_FLASH_ATTN_TYPE_ENABLED
        assert llm.model_params.n_gpu_layers == 0x7FFFFFFF    # llama-cpp-python's "every layer"
    finally:
        llm.close()
    plain = load(smollm2_path, "plain", 256, 1)
    try:
        assert plain.context_params.flash_attn_type == 0 and plain.model_params.n_gpu_layers == 0
    finally:
        plain.close()
