"""llama.cpp's RPC backend through ggml's backend registry, by ctypes on the ggml
library that the installed llama-cpp-python ships (``llama_cpp/lib``):
llama-cpp-python binds none of the ``ggml_backend_*`` functions. Every such call
is here.

What llama.cpp's own ``--rpc`` does (``common/arg.cpp``, ``add_rpc_devices``), and
``add_server`` repeats: find the registry entry named "RPC", ask it for
``ggml_backend_rpc_add_server``, call that with ``host:port`` (it connects, asks
the worker how many devices it has, hangs up) and register the entry it returns;
the worker's devices are then in ggml's device list, for any model loaded after.
``rpc-server`` (``tools/rpc/rpc-server.cpp``) serves the CPU device through
``ggml_backend_rpc_start_server``, which ``start_server`` calls the same way.
"""
from __future__ import annotations

import ctypes
import sys
from pathlib import Path
from typing import Any

__all__ = ["supports_rpc", "add_server", "device_description", "local_offload_devices",
           "registered_rpc_devices", "start_server"]

# enum ggml_backend_dev_type
_CPU, _GPU, _IGPU = 0, 1, 2

_lib: Any = None


def _ggml() -> Any:
    """The ggml library llama-cpp-python loaded (the same file, so the same registry)."""
    global _lib
    if _lib is not None:
        return _lib
    import llama_cpp  # loads libllama, and with it libggml

    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    names = {"win32": ["ggml.dll"], "darwin": ["libggml.dylib"]}.get(sys.platform, ["libggml.so"])
    path = next((lib_dir / n for n in names if (lib_dir / n).exists()), None)
    if path is None:
        raise OSError(f"llama-cpp-python's ggml library is not in {lib_dir}")
    lib = ctypes.CDLL(str(path))
    vp, cp = ctypes.c_void_p, ctypes.c_char_p
    for name, args, res in [
        ("ggml_backend_reg_by_name", [cp], vp),
        ("ggml_backend_reg_get_proc_address", [vp, cp], vp),
        ("ggml_backend_register", [vp], None),
        ("ggml_backend_reg_name", [vp], cp),
        ("ggml_backend_reg_dev_count", [vp], ctypes.c_size_t),
        ("ggml_backend_reg_dev_get", [vp, ctypes.c_size_t], vp),
        ("ggml_backend_dev_count", [], ctypes.c_size_t),
        ("ggml_backend_dev_get", [ctypes.c_size_t], vp),
        ("ggml_backend_dev_by_type", [ctypes.c_int], vp),
        ("ggml_backend_dev_type", [vp], ctypes.c_int),
        ("ggml_backend_dev_name", [vp], cp),
        ("ggml_backend_dev_description", [vp], cp),
        ("ggml_backend_dev_backend_reg", [vp], vp),
    ]:
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res
    _lib = lib
    return lib


def supports_rpc() -> bool:
    """Whether the installed llama.cpp was built with ``GGML_RPC=ON``."""
    import llama_cpp

    return bool(llama_cpp.llama_supports_rpc())


def _rpc_proc(name: str, prototype: Any) -> Any:
    lib = _ggml()
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        return None
    address = lib.ggml_backend_reg_get_proc_address(reg, name.encode())
    return prototype(address) if address else None


def add_server(endpoint: str) -> list[int]:
    """Registers the worker at ``endpoint`` ("host:port") as llama.cpp's ``--rpc``
    does, and returns its devices. Call it once per endpoint and process: a second
    registration would list the worker's devices twice. The endpoint must answer
    (llama.cpp ends the process when it cannot connect): the caller checks first."""
    add = _rpc_proc("ggml_backend_rpc_add_server", ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p))
    if add is None:
        raise OSError("this llama.cpp has no RPC backend")
    lib = _ggml()
    reg = add(endpoint.encode())
    if not reg:
        return []
    lib.ggml_backend_register(reg)
    return [int(lib.ggml_backend_reg_dev_get(reg, i)) for i in range(lib.ggml_backend_reg_dev_count(reg))]


def device_description(device: int) -> str:
    return str(_ggml().ggml_backend_dev_description(device).decode(errors="replace"))


def local_offload_devices() -> list[int]:
    """The devices other than RPC workers that llama.cpp offloads layers to by
    default: the GPUs, else the integrated GPUs (none on a CPU-only build)."""
    lib = _ggml()
    gpus, igpus = [], []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        kind = lib.ggml_backend_dev_type(dev)
        reg_name = lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(dev)) or b""
        if kind == _GPU and reg_name != b"RPC":
            gpus.append(int(dev))
        elif kind == _IGPU:
            igpus.append(int(dev))
    return gpus or igpus


def registered_rpc_devices() -> list[int]:
    """Every RPC worker device registered in this process, in registration order."""
    lib = _ggml()
    found = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        if (lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(dev)) or b"") == b"RPC":
            found.append(int(dev))
    return found


def start_server(endpoint: str, threads: int) -> None:
    """Serves this machine's CPU to RPC clients at ``endpoint`` ("ipv4:port") with
    ``threads`` threads, as llama.cpp's rpc-server does; returns only if the server
    cannot start (its reason is on stderr) or stops."""
    prototype = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                                 ctypes.POINTER(ctypes.c_void_p))
    serve = _rpc_proc("ggml_backend_rpc_start_server", prototype)
    if serve is None:
        raise OSError("this llama.cpp has no RPC backend")
    cpu = _ggml().ggml_backend_dev_by_type(_CPU)
    if not cpu:
        raise OSError("ggml has no CPU device")
    devices = (ctypes.c_void_p * 1)(cpu)
    serve(endpoint.encode(), None, threads, 1, devices)
