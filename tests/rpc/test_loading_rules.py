"""What loading onto workers decides before and after llama.cpp loads: the
keyword arguments (every layer on the workers unless told; tensor_split checked)
and where the weights went, read from llama.cpp's own load log."""
import pytest

from ngramspec.rpc.address import Endpoint
from ngramspec.rpc.guard import WorkerGuard
from ngramspec.rpc.loading import _placement, with_rpc_defaults
from ngramspec.rpc.workers import RpcWorkers


def test_every_layer_goes_to_the_workers_unless_told():
    assert with_rpc_defaults({"n_ctx": 512}, 2)["n_gpu_layers"] == -1
    assert with_rpc_defaults({"n_gpu_layers": 10}, 2)["n_gpu_layers"] == 10


def test_one_thread_here_when_the_workers_compute_everything():
    assert with_rpc_defaults({}, 2) == {"n_gpu_layers": -1, "n_threads": 1, "n_threads_batch": 1}
    assert with_rpc_defaults({"n_threads": 4, "n_threads_batch": 4}, 2)["n_threads_batch"] == 4
    assert "n_threads" not in with_rpc_defaults({"n_gpu_layers": 10}, 2)   # layers here: llama-cpp-python's default


def test_tensor_split_is_passed_through_one_share_per_worker():
    assert with_rpc_defaults({"tensor_split": [1, 3]}, 2)["tensor_split"] == [1.0, 3.0]
    assert with_rpc_defaults({"tensor_split": (0.0, 2.5)}, 2)["tensor_split"] == [0.0, 2.5]


@pytest.mark.parametrize("split, says", [
    ([1, 2, 3], "3 shares for 2 RPC worker device"),
    ([], "0 shares for 2"),
    ([0, 0], "one above 0"),
    ([1, -1], "finite number >= 0"),
    ([1, float("nan")], "finite number >= 0"),
    ([1, "a"], "finite number >= 0"),
])
def test_a_bad_tensor_split_is_one_line(split, says):
    with pytest.raises(ValueError, match=says):
        with_rpc_defaults({"tensor_split": split}, 2)


LOG = """load_tensors: loading model tensors, this can take a while... (mmap = true)
load_tensors: offloading output layer to GPU
load_tensors: offloading 29 repeating layers to GPU
load_tensors: offloaded 31/31 layers to GPU
load_tensors: RPC0[127.0.0.1:{a}] model buffer size =    33.83 MiB
load_tensors: RPC1[127.0.0.1:{b}] model buffer size =    58.30 MiB
load_tensors:   CPU_Mapped model buffer size =    28.69 MiB
"""


def test_where_the_weights_went_is_read_from_llama_cpps_load_log():
    guards = [WorkerGuard(Endpoint("10.0.0.2", 50052)), WorkerGuard(Endpoint("10.0.0.3", 50052))]
    workers = RpcWorkers([g.worker for g in guards], guards, [])
    log = LOG.format(a=guards[0].endpoint.port, b=guards[1].endpoint.port)
    where = _placement(log.splitlines(keepends=True), workers)
    assert where.layers == (31, 31)
    assert where.weights_mib == {"10.0.0.2:50052": 33.83, "10.0.0.3:50052": 58.3, "this machine": 28.69}
    assert where.describe() == ("31/31 layers on the workers; weights: 10.0.0.2:50052 33.8 MiB, 10.0.0.3:50052 "
                                "58.3 MiB, this machine 28.7 MiB")
    assert _placement([], workers).describe() == "layers: unknown; weights: unknown"
