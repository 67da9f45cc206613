"""A sum-tree held in device arrays, for proportional sampling.

The tree is a tuple of levels, root first: ``levels[0]`` is ``[1]`` (the total),
``levels[d]`` is ``[B ** d]`` and the last level holds the leaves (``B ** depth >=``
the number of items; unused leaves stay zero). Node ``i`` of level ``d`` has children
``i * B .. i * B + B - 1`` on level ``d + 1``. A wide branching factor ``B`` keeps the
tree shallow, so an update touches ``depth`` small slices and sampling descends
``depth`` levels for the whole batch at once (each step a ``[batch, B]`` gather of
sibling rows); one array per level keeps every write small. ``B = 8``: with 16 children
XLA emits a much slower fused step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

BRANCHING = 8

SumTree = tuple  # of float32 arrays, root level first


def depth_for(count: int, branching: int = BRANCHING) -> int:
    depth = 1
    while branching**depth < count:
        depth += 1
    return depth


def init(count: int, branching: int = BRANCHING) -> SumTree:
    """A tree of zeros with room for ``count`` leaves."""
    return tuple(jnp.zeros(branching**d, jnp.float32) for d in range(depth_for(count, branching) + 1))


def nbytes(count: int, branching: int = BRANCHING) -> int:
    return 4 * sum(branching**d for d in range(depth_for(count, branching) + 1))


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
        # One gather of whole sibling rows rather than B computed indices per node.
        children = levels[d + 1].reshape(-1, branching)[node]
        levels[d] = levels[d].at[node].set(children.sum(axis=-1))
    return tuple(levels)


def _choose_child(children: jax.Array, mass: jax.Array) -> tuple[jax.Array, jax.Array]:
    """For ``children [N, B]`` and ``mass [N]``: the child holding each mass and the mass
    before that child (the sum of its left siblings).

    The child is the last positive one whose left siblings sum to at most ``mass``, or the
    first positive one if there is none (``mass`` below zero by rounding): never one of
    value zero, whatever the rounding, while a child is positive. Unrolled running sums
    and selects, which XLA fuses into one elementwise loop (a cumsum, triangular matmul
    or argmax is a separate, slower op each on CPU)."""
    branching = children.shape[-1]
    running = jnp.zeros_like(mass)  # sum of the children left of k
    chosen = jnp.full(mass.shape, -1, jnp.int32)
    first = jnp.full(mass.shape, branching - 1, jnp.int32)
    before = jnp.zeros_like(mass)
    for k in range(branching):
        value = children[:, k]
        positive = value > 0
        fits = positive & (running <= mass)
        first = jnp.where(positive, jnp.minimum(first, k), first)
        chosen = jnp.where(fits, k, chosen)
        before = jnp.where(fits, running, before)
        running = running + value
    # With no fitting child the mass before the first positive one is 0 (all zeros).
    return jnp.where(chosen < 0, first, chosen), before


def find(tree: SumTree, mass: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Leaf indices ``[N]`` where the cumulative sum of the leaves passes ``mass [N]``,
    and those leaves' values ``[N]``.

    Each step takes the child whose cumulative range holds the remaining mass, skipping
    zero children, and never one of total zero (also under float rounding), so a leaf
    of priority zero is never returned while the total is positive.

    The descent is a ``lax.scan`` over the levels that picks the level's ``[N, B]``
    gather with ``lax.switch``: unrolled in Python, XLA fuses consecutive levels together
    and recomputes every earlier level inside each later gather (several times slower);
    a loop body is compiled on its own, so each level is a handful of small ops.

    The values come out of the descent rather than from a gather of the leaves after
    it: such a gather is a read that a later in-place :func:`update` of the leaves does
    not depend on, and XLA then copies the whole leaf level before the loop and again
    before the update (two copies of the largest array per sampled batch)."""
    branching = _branching(tree)
    gathers = [lambda node, level=level: level.reshape(-1, branching)[node] for level in tree[1:]]

    def step(carry, depth):
        node, mass, _ = carry
        children = jax.lax.switch(depth, gathers, node)
        child, before = _choose_child(children, mass)
        value = jnp.take_along_axis(children, child[:, None], axis=1)[:, 0]
        return (node * branching + child, mass - before, value), None

    start = (jnp.zeros(mass.shape, jnp.int32), mass.astype(jnp.float32), jnp.zeros(mass.shape, jnp.float32))
    (node, _, value), _ = jax.lax.scan(step, start, jnp.arange(len(tree) - 1))
    return node, value


def stratified_sample(tree: SumTree, key: jax.Array, batch_size: int) -> tuple[jax.Array, jax.Array]:
    """``batch_size`` leaf indices, one drawn from each of ``batch_size`` equal slices of
    the total mass (lower variance than independent draws), and their values. Returns
    int32 ``[B]`` and float32 ``[B]`` (see :func:`find`)."""
    offsets = jax.random.uniform(key, (batch_size,))
    mass = (jnp.arange(batch_size) + offsets) / batch_size * total(tree)
    return find(tree, mass)
