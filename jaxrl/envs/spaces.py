"""Spaces gymnax lacks, in gymnax's style (jittable ``sample`` and ``contains``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments.spaces import Space

__all__ = ["MultiDiscrete"]


class MultiDiscrete(Space):
    """``k`` independent discrete choices: action ``i`` is an int32 in ``[0, nvec[i])``.

    Actions are int32 arrays of shape ``(k,)``. A Gymnasium ``MultiBinary(k)`` action
    space is ``MultiDiscrete([2] * k)``.
    """

    def __init__(self, nvec):
        nvec = np.asarray(nvec)
        if nvec.ndim != 1 or nvec.size == 0 or not np.issubdtype(nvec.dtype, np.integer) or np.any(nvec < 1):
            raise ValueError(f"nvec must be a non-empty 1-D array of integers >= 1, got {nvec!r}")
        self.nvec = nvec.astype(np.int32)
        self.shape = (int(nvec.size),)
        self.dtype = jnp.int32

    def __repr__(self) -> str:
        return f"MultiDiscrete({self.nvec.tolist()})"

    def sample(self, key: jax.Array) -> jax.Array:
        """Each choice uniformly at random: int32 ``[k]``."""
        return jax.random.randint(key, self.shape, 0, jnp.asarray(self.nvec), dtype=jnp.int32)

    def contains(self, x: jax.Array) -> jax.Array:
        """Whether every choice of ``x [k]`` is within its range."""
        x = jnp.asarray(x)
        return jnp.all((x >= 0) & (x < jnp.asarray(self.nvec)))
