"""``--rpc`` on the commands, before anything loads: serve's spellings and default
n_gpu_layers, bench's refusals (a worker serves one client at a time)."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")

from ngramspec.cli.main import main
from ngramspec.errors import UserError
from ngramspec.server.launch import build_parser, settings_from_args


def _serve(*args: str):
    return settings_from_args(build_parser().parse_args(["--model", "smollm2-135m", *args]))


def test_serve_puts_every_layer_on_the_workers_unless_told(monkeypatch):
    from ngramspec.server import launch

    monkeypatch.setattr(launch, "_model_path", lambda given: "/models/x.gguf")   # no fetch
    _, model, options, _ = _serve("--rpc", "10.0.0.2:50052,10.0.0.3:50052")
    assert options.rpc == "10.0.0.2:50052,10.0.0.3:50052" and model.n_gpu_layers == -1
    _, model, _, _ = _serve("--rpc", "10.0.0.2:50052", "--n_gpu_layers", "5")
    assert model.n_gpu_layers == 5
    _, model, options, _ = _serve()
    assert options.rpc is None and model.n_gpu_layers == 0          # llama-cpp-python's default without --rpc


def test_serve_takes_llama_cpp_pythons_spelling_too(monkeypatch):
    from ngramspec.server import launch

    monkeypatch.setattr(launch, "_model_path", lambda given: "/models/x.gguf")
    _, _, options, _ = _serve("--rpc_servers", "10.0.0.2:50052")
    assert options.rpc == "10.0.0.2:50052"
    with pytest.raises(UserError, match="name different workers"):
        _serve("--rpc", "10.0.0.2:50052", "--rpc_servers", "10.0.0.3:50052")
    with pytest.raises(UserError, match="--rpc: RPC worker address 'x' is not host:port"):
        _serve("--rpc", "x")


@pytest.mark.parametrize("other", [["--serve"], ["--other-build", "/usr/bin/python3"],
                                   ["--llama-server", "/bin/true"]])
def test_bench_refuses_what_runs_in_another_process(other, capsys):
    assert main(["bench", "--quick", "--rpc", "127.0.0.1:50052", *other]) == 2
    err = capsys.readouterr().err
    assert "--rpc cannot be combined with" in err and "serves one client at a time" in err, err
