"""JAX's default random numbers (threefry2x32), computed as straight-line code.

On CPU, JAX lowers each threefry hash as a loop of five iterations, so every random draw,
split and fold-in in a program is a small while loop of its own, compiled separately: in
an RL training program, with draws at every step of acting, sampling and exploring, they
are a large part of XLA's compile time. :data:`THREEFRY_STRAIGHT` is the same generator
as JAX's default key type (threefry2x32 with ``jax_threefry_partitionable``, JAX's
default) defined through JAX's public :func:`jax.extend.random.define_prng_impl`, with
the hash's twenty rounds written out as array arithmetic, which XLA fuses into the
operations that use the bits. Keys of it give bit for bit the numbers default keys give;
only the compiled program differs.

:func:`straight` re-types a default key as one; ``jaxrl.loop.train`` and
``jaxrl.loop.iterate`` apply it to the keys they are given, so the programs jaxrl
compiles draw the same numbers as before, and nothing changes outside them: no global
setting, and keys of any other implementation (``unsafe_rbg``, a user's own) pass
through unchanged.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import define_prng_impl

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def threefry2x32(k1: jax.Array, k2: jax.Array, x1: jax.Array, x2: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The Threefry-2x32 hash (20 rounds; Salmon et al., 2011) of the counter pairs
    ``(x1, x2)`` under the key ``(k1, k2)``, all uint32, elementwise."""
    keys = (k1, k2, k1 ^ k2 ^ _PARITY)
    x1, x2 = x1 + keys[0], x2 + keys[1]
    for block in range(5):  # four rounds, then a key injection
        for rotation in _ROTATIONS[block % 2]:
            x1 = x1 + x2
            x2 = x1 ^ ((x2 << np.uint32(rotation)) | (x2 >> np.uint32(32 - rotation)))
        x1 = x1 + keys[(block + 1) % 3]
        x2 = x2 + keys[(block + 2) % 3] + np.uint32(block + 1)
    return x1, x2


def _hash_counts(key: jax.Array, shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
    """The hash of the 64-bit counters 0, 1, ... laid out in ``shape`` (high and low
    words), as JAX's partitionable threefry draws them."""
    size = math.prod(shape)
    if size >= 2**32:
        raise NotImplementedError(f"a draw of {size} values (at most 2**32 - 1)")
    low = jax.lax.iota(np.uint32, size).reshape(shape)
    return threefry2x32(key[0], key[1], jnp.zeros(shape, np.uint32), low)


def _seed(seed: jax.Array) -> jax.Array:
    seed = jnp.asarray(seed)
    high = (seed >> 32).astype(np.uint32) if seed.dtype.itemsize == 8 else jnp.zeros((), np.uint32)
    return jnp.stack([high, (seed & 0xFFFFFFFF).astype(np.uint32)])


def _split(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return jnp.stack(_hash_counts(key, tuple(shape)), axis=-1)


def _fold_in(key: jax.Array, data) -> jax.Array:
    return jnp.stack(threefry2x32(key[0], key[1], jnp.zeros((), np.uint32), jnp.asarray(data, np.uint32)))


def _random_bits(key: jax.Array, bit_width: int, shape: tuple[int, ...]) -> jax.Array:
    high, low = _hash_counts(key, tuple(shape))
    if bit_width == 64:
        return (high.astype(np.uint64) << np.uint64(32)) | low.astype(np.uint64)
    return (high ^ low).astype({8: np.uint8, 16: np.uint16, 32: np.uint32}[bit_width])


THREEFRY_STRAIGHT = define_prng_impl(
    key_shape=(2,),
    seed=_seed,
    split=_split,
    random_bits=_random_bits,
    fold_in=_fold_in,
    name="threefry2x32_straight",
    tag="fst",
)


@functools.cache
def _straight_dtype():
    return jax.eval_shape(lambda: jax.random.wrap_key_data(jnp.zeros(2, jnp.uint32), impl=THREEFRY_STRAIGHT)).dtype


def straight(key: jax.Array) -> jax.Array:
    """``key`` as a :data:`THREEFRY_STRAIGHT` key where it is a default threefry2x32
    key (typed, or a raw uint32 ``[..., 2]`` one) and JAX draws partitionably (its
    default); any other key unchanged. Works under ``jit`` and ``vmap``."""
    if not jax.config.jax_threefry_partitionable:
        return key  # JAX's other threefry draws other numbers
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if str(jax.random.key_impl(key)) != "threefry2x32":
            return key
        key = jax.random.key_data(key)
    elif key.dtype != jnp.uint32 or key.shape[-1:] != (2,):
        return key  # not a key: JAX's own functions will say so
    return jax.random.wrap_key_data(key, impl=THREEFRY_STRAIGHT)


def rolled(key: jax.Array) -> jax.Array:
    """A :data:`THREEFRY_STRAIGHT` key as a default threefry2x32 one (the same numbers,
    drawn through JAX's own loop); any other key unchanged."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) and key.dtype == _straight_dtype():
        return jax.random.wrap_key_data(jax.random.key_data(key), impl="threefry2x32")
    return key
