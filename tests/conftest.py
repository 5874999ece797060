import sys
from pathlib import Path

import pytest

# The reference predictor and helpers live beside the tests.
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def smollm2_path() -> str:
    from ngramspec import models

    return str(models.fetch("smollm2-135m"))


@pytest.fixture(scope="session")
def llm(smollm2_path):
    import llama_cpp

    model = llama_cpp.Llama(smollm2_path, n_ctx=2048, seed=0, verbose=False)
    yield model
    model.close()


@pytest.fixture(scope="session")
def invariance(llm):
    from ngramspec import check_batch_invariance

    return check_batch_invariance(llm, max_batch=17)


@pytest.fixture()
def engine(llm, invariance):
    from ngramspec import SpeculativeEngine

    llm.reset()
    return SpeculativeEngine(llm, invariance=invariance)


@pytest.fixture()
def eager_engine(llm, invariance):
    """Verifies every draft token offered, so tests can count on drafts."""
    from ngramspec import SpeculativeEngine

    llm.reset()
    return SpeculativeEngine(llm, invariance=invariance, adaptive=False)
