"""JAX's persistent compilation cache for a test module and the processes it starts, so
that a killed or resumed process loads what the module's own runs compiled."""

from __future__ import annotations

import contextlib

import jax
import pytest
from jax.experimental.compilation_cache import compilation_cache

from jaxrl.workflow import program_cache


def use_cache(directory, programs: bool = False) -> None:
    """JAX's persistent cache in ``directory`` for every program however quickly it
    compiles; jaxrl's program cache off unless ``programs`` (then the caller's own)."""
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    if not programs:
        program_cache.directory = lambda: None
    compilation_cache.reset_cache()


@contextlib.contextmanager
def persistent_cache(directory, programs: bool = False, **environ):
    """:func:`use_cache` inside the block, with ``environ`` set, and everything put back
    after it (JAX keeps using a cache it has opened unless it is reset)."""
    previous = jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(program_cache, "directory", program_cache.directory)
        for name, value in environ.items():
            patch.setenv(name, value)
        use_cache(directory, programs)
        try:
            yield directory
        finally:
            jax.config.update("jax_compilation_cache_dir", previous[0])
            jax.config.update("jax_persistent_cache_min_compile_time_secs", previous[1])
            compilation_cache.reset_cache()
