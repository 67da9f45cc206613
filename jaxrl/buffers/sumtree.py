"""A sum-tree held in device arrays, for proportional sampling.

The tree is a tuple of levels, root first: ``levels[0]`` is ``[1]`` (the total),
``levels[d]`` is ``[B ** d]`` and the last level holds the leaves (``B ** depth >=``
the number of items; unused leaves stay zero). Node ``i`` of level ``d`` has children
``i * B .. i * B + B - 1`` on level ``d + 1``. A wide branching factor ``B`` keeps the
tree shallow, so an update touches ``depth`` small slices and sampling descends
``depth`` levels for the whole batch at once (each step a ``[batch, B]`` gather); one
array per level keeps every write small.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

BRANCHING = 8

SumTree = tuple  # of float32 arrays, root level first


def depth_for(count: int, branching: int = BRANCHING) -> int:
    depth = 1
    while branching ** depth < count:
        depth += 1
    return depth


def init(count: int, branching: int = BRANCHING) -> SumTree:
    """A tree of zeros with room for ``count`` leaves."""
    return tuple(jnp.zeros(branching ** d, jnp.float32) for d in range(depth_for(count, branching) + 1))


def nbytes(count: int, branching: int = BRANCHING) -> int:
    return 4 * sum(branching ** d for d in range(depth_for(count, branching) + 1))


def _branching(tree: SumTree) -> int:
    return tree[1].shape[0]


def total(tree: SumTree) -> jax.Array:
    return tree[0][0]


def leaves(tree: SumTree) -> jax.Array:
    return tree[-1]


def update(tree: SumTree, index: jax.Array, values: jax.Array) -> SumTree:
    """Set leaves ``index [K]`` to ``values [K]`` and refresh their ancestors.

    Where ``index`` repeats, one of its values is kept and the sums stay consistent
    (every parent is recomputed from its children)."""
    branching = _branching(tree)
    levels = list(tree)
    levels[-1] = levels[-1].at[index].set(values.astype(jnp.float32))
    node = index
    for d in range(len(levels) - 2, -1, -1):
        node = node // branching
        children = node[:, None] * branching + jnp.arange(branching)
        levels[d] = levels[d].at[node].set(levels[d + 1][children].sum(axis=-1))
    return tuple(levels)


def find(tree: SumTree, mass: jax.Array) -> jax.Array:
    """Leaf indices ``[N]`` where the cumulative sum of the leaves passes ``mass [N]``.

    Each step takes the child whose cumulative range holds the remaining mass, skipping
    zero children, and never one of total zero (also under float rounding), so a leaf
    of priority zero is never returned while the total is positive."""
    branching = _branching(tree)
    node = jnp.zeros(mass.shape, jnp.int32)
    for level in tree[1:]:
        children = level[node[:, None] * branching + jnp.arange(branching)]  # [N, B]
        # A product with a triangular matrix of ones: much faster than cumsum on CPU.
        cumulative = children @ jnp.triu(jnp.ones((branching, branching), jnp.float32))
        child = jnp.sum(cumulative <= mass[:, None], axis=-1)
        last_positive = branching - 1 - jnp.argmax((children > 0)[:, ::-1], axis=-1)
        child = jnp.minimum(child, last_positive)
        before = jnp.take_along_axis(cumulative - children, child[:, None], axis=-1)[:, 0]
        mass = mass - before
        node = node * branching + child.astype(jnp.int32)
    return node


def stratified_sample(tree: SumTree, key: jax.Array, batch_size: int) -> jax.Array:
    """``batch_size`` leaf indices, one drawn from each of ``batch_size`` equal slices of
    the total mass (lower variance than independent draws). Returns int32 ``[B]``."""
    offsets = jax.random.uniform(key, (batch_size,))
    mass = (jnp.arange(batch_size) + offsets) / batch_size * total(tree)
    return find(tree, mass)
