import pytest

from tests.support.libraries import wrap


@pytest.fixture()
def wrapped(llm, invariance):
    """The suite's Llama (tests/conftest.py), reset, and its wrapper."""
    llm.reset()
    spec = wrap(llm, invariance)
    yield spec
    llm.reset()

