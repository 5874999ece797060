"""Worker addresses: every bad one is a one-line RpcAddressError (a ValueError)."""
import pytest

from ngramspec.rpc.address import Endpoint, parse_endpoint, parse_endpoints
from ngramspec.rpc.errors import RpcAddressError


def test_host_and_port():
    assert parse_endpoint("127.0.0.1:50052") == Endpoint("127.0.0.1", 50052)
    assert parse_endpoint(" worker-3.lan:1 ") == Endpoint("worker-3.lan", 1)
    assert str(Endpoint("10.0.0.2", 65535)) == "10.0.0.2:65535"


def test_a_comma_list_and_a_python_list_are_the_same():
    assert parse_endpoints("a:1,b:2") == parse_endpoints(["a:1", "b:2"]) == [Endpoint("a", 1), Endpoint("b", 2)]


@pytest.mark.parametrize("bad, says", [
    ("127.0.0.1", "not host:port"),
    (":50052", "not host:port"),
    ("host:", "not host:port"),
    ("host:port", "1..65535"),
    ("host:0", "1..65535"),
    ("host:65536", "1..65535"),
    ("host:-1", "1..65535"),
    ("[::1]:50052", "IPv4 only"),
    ("fe80::1:50052", "IPv4 only"),
    ("my host:50052", "space or comma"),
])
def test_bad_addresses(bad, says):
    with pytest.raises(RpcAddressError, match=says) as e:
        parse_endpoint(bad)
    assert isinstance(e.value, ValueError) and "\n" not in str(e.value)


@pytest.mark.parametrize("bad, says", [
    ("", "no RPC worker given"),
    ([], "no RPC worker given"),
    (" , ", "no RPC worker given"),
    ("a:1,,b:2", "not host:port"),
    ("a:1,a:1", "named twice"),
    ([1234], "must be a string"),
])
def test_bad_lists(bad, says):
    with pytest.raises(RpcAddressError, match=says):
        parse_endpoints(bad)
