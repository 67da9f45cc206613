import jax
import pytest
from jax.experimental.compilation_cache import compilation_cache


def pytest_collection_modifyitems(items):
    """Run the slow learning tests first (stable order otherwise): with
    ``-n 2 --dist worksteal`` the two workers start on the long tests and the short ones
    fill the gaps, instead of one worker finishing alone on a learning test."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session", autouse=True)
def _private_compilation_cache_dir(tmp_path_factory):
    """A CLI test without ``--no-cache`` caches into a directory of this worker's own,
    never the user's ``~/.cache/jaxrl`` shared with the other worker."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JAXRL_CACHE_DIR", str(tmp_path_factory.mktemp("xla-cache")))
        yield


@pytest.fixture(autouse=True)
def _restore_compilation_cache_dir():
    """``python -m jaxrl train`` turns JAX's persistent cache on for its process; a test
    that calls the CLI in-process must not leave it on for the tests after it. JAX keeps
    using a cache it has opened whatever the setting says later, so it is reset too."""
    before = jax.config.jax_compilation_cache_dir, jax.config.jax_compilation_cache_max_size
    yield
    if (jax.config.jax_compilation_cache_dir, jax.config.jax_compilation_cache_max_size) != before:
        jax.config.update("jax_compilation_cache_dir", before[0])
        jax.config.update("jax_compilation_cache_max_size", before[1])  # the CLI bounds it
        compilation_cache.reset_cache()
