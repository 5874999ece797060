"""Worker addresses: ``host:port`` strings, checked before anything connects."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ngramspec.rpc.errors import RpcAddressError

__all__ = ["Endpoint", "parse_endpoint", "parse_endpoints"]


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_endpoint(text: str) -> Endpoint:
    """``host:port`` (an IPv4 address or a host name, a port in 1..65535).
    llama.cpp's RPC client connects over IPv4 only, so an IPv6 literal is refused."""
    if not isinstance(text, str):
        raise RpcAddressError(f"an RPC worker address must be a string 'host:port', got {type(text).__name__}")
    given = text.strip()
    host, sep, port_text = given.rpartition(":")
    if not sep or not host or not port_text:
        raise RpcAddressError(f"RPC worker address {text!r} is not host:port (e.g. 192.168.1.10:50052)")
    if ":" in host or host.startswith("["):
        raise RpcAddressError(f"RPC worker address {text!r}: llama.cpp's RPC client connects over IPv4 only; "
                              "give an IPv4 address or a host name")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise RpcAddressError(f"RPC worker address {text!r}: the port must be a number in 1..65535")
    if any(c.isspace() for c in host) or "," in host:
        raise RpcAddressError(f"RPC worker address {text!r}: the host name has a space or comma in it")
    return Endpoint(host, int(port_text))


def parse_endpoints(given: str | Iterable[str]) -> list[Endpoint]:
    """Workers from a list of ``host:port`` strings, or one string of them joined by
    commas (the command line's ``--rpc``). At least one; none twice."""
    items = given.split(",") if isinstance(given, str) else list(given)
    if not items or all(isinstance(i, str) and not i.strip() for i in items):
        raise RpcAddressError("no RPC worker given: name at least one host:port")
    endpoints = [parse_endpoint(i) for i in items]
    seen: set[Endpoint] = set()
    for e in endpoints:
        if e in seen:
            raise RpcAddressError(f"RPC worker {e} is named twice")
        seen.add(e)
    return endpoints
