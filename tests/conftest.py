import jax
import pytest


def pytest_collection_modifyitems(items):
    """Run the slow learning tests first (stable order otherwise): with
    ``-n 2 --dist worksteal`` the two workers start on the long tests and the short ones
    fill the gaps, instead of one worker finishing alone on a learning test."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _restore_compilation_cache_dir():
    """``python -m jaxrl train`` sets JAX's persistent cache directory for its process;
    a test that calls the CLI in-process must not leave it set for the tests after it."""
    before = jax.config.jax_compilation_cache_dir
    yield
    jax.config.update("jax_compilation_cache_dir", before)
