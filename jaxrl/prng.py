"""JAX's default random numbers (threefry2x32), computed as straight-line code.

On CPU, JAX lowers each threefry hash as a loop of five iterations, so every random draw,
split and fold-in in a program is a small while loop of its own, compiled separately: in
an RL training program, with draws at every step of acting, sampling and exploring, they
are a large part of XLA's compile time. :data:`THREEFRY_STRAIGHT` is the same generator
as JAX's default key type (threefry2x32 with ``jax_threefry_partitionable``, JAX's
default) defined through JAX's public :func:`jax.extend.random.define_prng_impl`, with
the hash's twenty rounds written out as array arithmetic: on CPU one kernel per draw,
whose bits the operations that use them read. Keys of it give bit for bit the numbers
default keys give; only the compiled program differs.

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
from jax import lax
from jax.extend.core import Primitive
from jax.extend.random import define_prng_impl
from jax.interpreters import batching, mlir

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def threefry2x32(k1: jax.Array, k2: jax.Array, x1: jax.Array, x2: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The Threefry-2x32 hash (20 rounds; Salmon et al., 2011) of the counter pairs
    ``(x1, x2)`` under the key ``(k1, k2)``, all uint32, elementwise (``k1``, ``k2``
    scalars or of the counters' shape)."""
    # lax, not jnp operators: JAX traces this at every lowering of a draw, and jnp's
    # operators each cost a jit dispatch there.
    keys = (k1, k2, lax.bitwise_xor(lax.bitwise_xor(k1, k2), _PARITY))
    x1, x2 = lax.add(x1, keys[0]), lax.add(x2, keys[1])
    for block in range(5):  # four rounds, then a key injection
        for rotation in _ROTATIONS[block % 2]:
            x1 = lax.add(x1, x2)
            rotated = lax.bitwise_or(
                lax.shift_left(x2, np.uint32(rotation)), lax.shift_right_logical(x2, np.uint32(32 - rotation))
            )
            x2 = lax.bitwise_xor(x1, rotated)
        x1 = lax.add(x1, keys[(block + 1) % 3])
        x2 = lax.add(x2, lax.add(keys[(block + 2) % 3], np.uint32(block + 1)))
    return x1, x2


# The hash as one primitive: JAX traces a key type's functions at each lowering of a
# draw, under vmap where keys are batched; a primitive batches in one step, then lowers
# through the straight code unbatched.
_hash_p = Primitive("threefry2x32_straight")
_hash_p.multiple_results = True


def _hash_shape(*words) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(*(np.shape(w) for w in words)))


def _hash_of_broadcast_words(*words):
    shape = _hash_shape(*words)
    return threefry2x32(*(lax.broadcast_in_dim(w, shape, range(len(shape) - w.ndim, len(shape))) for w in words))


_hash_p.def_abstract_eval(lambda *words: [jax.core.ShapedArray(_hash_shape(*words), np.uint32)] * 2)
_hash_p.def_impl(jax.jit(_hash_of_broadcast_words))
mlir.register_lowering(_hash_p, mlir.lower_fun(_hash_of_broadcast_words, multiple_results=True))
batching.defbroadcasting(_hash_p)


def _words(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    return lax.index_in_dim(key, 0, keepdims=False), lax.index_in_dim(key, 1, keepdims=False)


def _hash_counts(key: jax.Array, shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
    """The hash of the 64-bit counters 0, 1, ... laid out in ``shape`` (high and low
    words), as JAX's partitionable threefry draws them."""
    size = math.prod(shape)
    if size >= 2**32:
        raise NotImplementedError(f"a draw of {size} values (at most 2**32 - 1)")
    low = lax.reshape(lax.iota(np.uint32, size), shape)
    return tuple(_hash_p.bind(*_words(key), lax.full(shape, 0, np.uint32), low))


def _computed_once(key: jax.Array, bits: jax.Array) -> jax.Array:
    """``bits`` unchanged, computed once however many operations read them. XLA:CPU
    would copy the hash into the kernel of each reader (every field of a reset env
    state, every use of a draw), compiling it many times over. It does not copy an
    integer division, so dividing by a number that is always 1 (the key's top bit, at
    least 1) puts the hash in a kernel of its own. On other platforms ``bits`` pass
    untouched: there JAX's own threefry is this straight code, fused into its readers."""

    def divided(key, bits):
        one = lax.max(lax.shift_right_logical(_words(key)[0], np.uint32(31)), np.uint32(1))
        return lax.div(bits, lax.convert_element_type(one, bits.dtype))

    return lax.platform_dependent(key, bits, cpu=divided, default=lambda key, bits: bits)


def _seed(seed: jax.Array) -> jax.Array:
    seed = jnp.asarray(seed)
    high = (seed >> 32).astype(np.uint32) if seed.dtype.itemsize == 8 else jnp.zeros((), np.uint32)
    return jnp.stack([high, (seed & 0xFFFFFFFF).astype(np.uint32)])


def _stacked(high: jax.Array, low: jax.Array) -> jax.Array:
    """Two words as a key array ``[..., 2]``."""
    return lax.concatenate([lax.expand_dims(high, (high.ndim,)), lax.expand_dims(low, (low.ndim,))], high.ndim)


def _split(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return _computed_once(key, _stacked(*_hash_counts(key, tuple(shape))))


def _fold_in(key: jax.Array, data) -> jax.Array:
    data = lax.convert_element_type(data, np.uint32)
    return _stacked(*_hash_p.bind(*_words(key), lax.full((), 0, np.uint32), data))


def _random_bits(key: jax.Array, bit_width: int, shape: tuple[int, ...]) -> jax.Array:
    high, low = _hash_counts(key, tuple(shape))
    if bit_width == 64:
        wide = functools.partial(lax.convert_element_type, new_dtype=np.uint64)
        return _computed_once(key, lax.bitwise_or(lax.shift_left(wide(high), np.uint64(32)), wide(low)))
    bits = _computed_once(key, lax.bitwise_xor(high, low))
    return lax.convert_element_type(bits, {8: np.uint8, 16: np.uint16, 32: np.uint32}[bit_width])


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
