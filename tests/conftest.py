import pytest

# Helpers shared by the tests live in the package tests/support (imported as tests.support.*).

# ---- test tiers (pyproject.toml [tool.pytest.ini_options] markers; docs/development.md)
#
# `pytest -m "not model"` is the unit tier; `pytest` runs everything. A test is marked
# `model` here when it uses one of these fixtures, directly or through another fixture
# (pytest's fixture closure), so test files need no marks of their own. A test that
# loads a model in a subprocess (the ngramspec command) asks for `smollm2_path`, which
# also fetches the model it runs on. A test may also say @pytest.mark.model itself.
MODEL_FIXTURES = frozenset({"smollm2_path", "smollm2_q4k_path", "llm", "invariance", "engine", "eager_engine"})


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("model") is None and MODEL_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.model)


@pytest.fixture(autouse=True)
def _unmarked_tests_load_no_model(request, monkeypatch):
    """Keeps the tiers honest: a test not marked `model` that constructs a
    llama_cpp.Llama in this process fails, naming the fix."""
    if request.node.get_closest_marker("model") is None:
        try:
            import llama_cpp
        except ImportError:        # no llama-cpp-python: nothing can load a model
            return

        def refuse(self, *args, **kwargs):
            pytest.fail(f"{request.node.nodeid} loads a GGUF model but is not in the model tier: use a model "
                        "fixture (tests/conftest.py) or mark it @pytest.mark.model", pytrace=False)

        monkeypatch.setattr(llama_cpp.Llama, "__init__", refuse)


@pytest.fixture(scope="session")
def smollm2_path() -> str:
    from ngramspec import models

    return str(models.fetch("smollm2-135m"))


@pytest.fixture(scope="session")
def smollm2_q4k_path(smollm2_path) -> str:
    """SmolLM2-135M requantized to Q4_K_M (tests.support.requantized): a K-quant model."""
    from tests.support.requantized import requantized_q4_k

    return requantized_q4_k(smollm2_path)


@pytest.fixture(scope="session")
def llm(smollm2_path):
    import llama_cpp

    from tests.support.cli import TEST_THREADS

    model = llama_cpp.Llama(smollm2_path, n_ctx=2048, seed=0, verbose=False, n_threads=TEST_THREADS,
                            n_threads_batch=TEST_THREADS)
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


@pytest.fixture()
def invariance_cache_dir(tmp_path, monkeypatch):
    """An empty per-test cache (NGRAMSPEC_CACHE_DIR under tmp_path) and no cost curve
    remembered in this process: the directory where invariance_cache stores its files
    (not created until something is stored)."""
    from ngramspec.calibration import invariance_cache

    monkeypatch.setenv("NGRAMSPEC_CACHE_DIR", str(tmp_path))
    invariance_cache.forget_priors()
    yield tmp_path / "invariance"
    invariance_cache.forget_priors()
