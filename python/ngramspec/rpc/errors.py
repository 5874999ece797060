"""What can go wrong with RPC workers, one class per thing a caller tells apart.
Every message is one line that names the worker and what to do."""
from __future__ import annotations

from ngramspec.errors import NgramspecError

__all__ = ["RpcError", "RpcAddressError", "RpcUnavailableError", "RpcWorkerError", "RpcProtocolMismatchError",
           "RpcWorkerLostError"]


class RpcError(NgramspecError):
    """Base of every RPC error."""


class RpcAddressError(RpcError, ValueError):
    """A worker address that is not ``host:port`` (or a list with one repeated)."""


class RpcUnavailableError(RpcError, RuntimeError):
    """This llama-cpp-python cannot use workers: built without ``GGML_RPC``, or a
    version whose RPC protocol ngramspec does not know."""


class RpcWorkerError(RpcError, ConnectionError):
    """A worker that cannot be used now: unreachable, refusing, silent, busy."""


class RpcProtocolMismatchError(RpcWorkerError):
    """A worker that answers in another RPC protocol version (another llama.cpp)."""


class RpcWorkerLostError(RpcError, ConnectionError):
    """A worker's connection broke while a model used it: the layers it held are
    gone, so the model must be loaded again once the worker is back."""
