"""Uniform replay: a ring buffer of rows of ``N`` transitions, one row per env step.

Storage is ``[R, N, ...]`` per leaf: row ``r`` holds what ``N`` parallel envs produced at
one step, so each env lane is its own time-ordered stream. That is what lets n-step
targets follow one env's episode and stop where its stream ends, never mixing lanes. ::

    buffer = replay.init(example_transition, capacity=100_000, num_envs=8)
    buffer = replay.add(buffer, transitions)             # leaves [8, ...]
    batch, index = replay.sample(buffer, key, batch_size=128)

Every function is pure and works under ``jit`` and ``vmap``.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

PyTree = Any

# Fields n-step sampling needs in every transition (a dict).
N_STEP_FIELDS = ("reward", "terminated", "truncated", "next_obs")


@struct.dataclass
class ReplayState:
    data: PyTree  # leaves [R, N, ...]
    cursor: jax.Array  # int32: the row the next add writes
    size: jax.Array  # int32: rows filled so far (<= R)

    @property
    def num_rows(self) -> int:
        return jax.tree.leaves(self.data)[0].shape[0]

    @property
    def num_envs(self) -> int:
        return jax.tree.leaves(self.data)[0].shape[1]

    @property
    def capacity(self) -> int:
        """Transitions the buffer holds when full (``R * N``)."""
        return self.num_rows * self.num_envs


class Index(NamedTuple):
    """Where sampled transitions live: ``row`` and ``lane``, each int32 ``[B]``."""

    row: jax.Array
    lane: jax.Array


def memory_limit() -> int:
    """Bytes a buffer may take by default: the device's memory limit where JAX reports
    one (GPU/TPU), else the machine's physical memory."""
    try:
        stats = jax.devices()[0].memory_stats() or {}
    except Exception:  # backends without memory stats
        stats = {}
    if "bytes_limit" in stats:
        return int(stats["bytes_limit"])
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def nbytes(example: PyTree, num_items: int) -> int:
    """Bytes that ``num_items`` copies of one ``example`` transition take."""
    # The dtype the buffer will allocate (float64 becomes float32 unless x64 is on).
    return num_items * sum(jnp.asarray(x).dtype.itemsize * int(np.prod(np.shape(x))) for x in jax.tree.leaves(example))


def check_memory(num_bytes: int, max_bytes: int | None, what: str) -> None:
    limit = memory_limit() if max_bytes is None else max_bytes
    if num_bytes > limit:
        raise ValueError(
            f"{what} needs {num_bytes:,} bytes ({num_bytes / 2**30:.2f} GiB), more than the limit of "
            f"{limit:,} bytes ({limit / 2**30:.2f} GiB); lower the capacity or the observation size"
        )


def num_rows_for(capacity: int, num_envs: int) -> int:
    """Rows ``R = ceil(capacity / num_envs)``; ValueError unless both are ints >= 1."""
    for name, value in (("capacity", capacity), ("num_envs", num_envs)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return -(-int(capacity) // int(num_envs))


def init(
    example: PyTree, capacity: int, num_envs: int, max_bytes: int | None = None, reserved_bytes: int = 0
) -> ReplayState:
    """An empty buffer for ``capacity`` transitions shaped like ``example``.

    Args:
      example: one transition (any pytree of arrays, no batch axis); only its shapes and
        dtypes are used.
      capacity: transitions to hold; rounded up to a multiple of ``num_envs``
        (``R = ceil(capacity / num_envs)`` rows).
      num_envs: transitions per :func:`add` (the env batch ``N``).
      max_bytes: refuse (``ValueError``) a buffer larger than this; defaults to
        :func:`memory_limit`. Checked before anything is allocated.
      reserved_bytes: bytes that structures built beside it (a sum-tree) add to the check.
    """
    num_rows = num_rows_for(capacity, num_envs)
    num_bytes = nbytes(example, num_rows * num_envs) + reserved_bytes
    check_memory(num_bytes, max_bytes, f"a replay buffer of {num_rows * num_envs:,} transitions")
    data = jax.tree.map(lambda x: jnp.zeros((num_rows, num_envs) + jnp.shape(x), jnp.asarray(x).dtype), example)
    return ReplayState(data=data, cursor=jnp.zeros((), jnp.int32), size=jnp.zeros((), jnp.int32))


def written_rows(state: ReplayState, num_new: int) -> jax.Array:
    """The rows the next ``num_new`` added rows go to, ``[num_new]``."""
    return (state.cursor + jnp.arange(num_new)) % state.num_rows


def add_sequence(state: ReplayState, items: PyTree) -> ReplayState:
    """Append ``T`` rows at once; ``items`` leaves are ``[T, N, ...]`` (e.g. a
    :class:`~jaxrl.types.Trajectory` chunk), oldest first. The oldest rows are
    overwritten once the buffer is full."""
    num_new = jax.tree.leaves(items)[0].shape[0]
    if num_new > state.num_rows:
        raise ValueError(f"cannot add {num_new} rows to a buffer of {state.num_rows} rows")
    if num_new == 1:  # the common case: a slice write, cheaper than a scatter
        data = jax.tree.map(
            lambda buf, x: jax.lax.dynamic_update_slice_in_dim(buf, x.astype(buf.dtype), state.cursor, 0),
            state.data,
            items,
        )
    else:
        rows = written_rows(state, num_new)
        data = jax.tree.map(lambda buf, x: buf.at[rows].set(x.astype(buf.dtype)), state.data, items)
    return ReplayState(
        data=data,
        cursor=(state.cursor + num_new) % state.num_rows,
        size=jnp.minimum(state.size + num_new, state.num_rows),
    )


def add(state: ReplayState, items: PyTree) -> ReplayState:
    """Append one row: ``items`` leaves are ``[N, ...]``, one transition per env."""
    return add_sequence(state, jax.tree.map(lambda x: x[None], items))


def can_sample(state: ReplayState, min_size: int) -> jax.Array:
    """True once the buffer holds at least ``min_size`` transitions."""
    return state.size * state.num_envs >= min_size


def sample_index(state: ReplayState, key: jax.Array, batch_size: int) -> Index:
    """``batch_size`` positions drawn uniformly (with replacement) from the filled part."""
    flat = jax.random.randint(key, (batch_size,), 0, jnp.maximum(state.size, 1) * state.num_envs)
    return Index(flat // state.num_envs, flat % state.num_envs)


def gather(state: ReplayState, index: Index) -> PyTree:
    """The transitions at ``index``; leaves ``[B, ...]``."""
    return jax.tree.map(lambda x: x[index.row, index.lane], state.data)


def sample(state: ReplayState, key: jax.Array, batch_size: int) -> tuple[PyTree, Index]:
    """``(batch, index)``: ``batch_size`` uniformly sampled transitions, leaves ``[B, ...]``."""
    index = sample_index(state, key, batch_size)
    return gather(state, index), index


def n_step(state: ReplayState, index: Index, n: int, gamma: jax.Array) -> dict:
    """n-step transitions starting at ``index``, following each sample's own env lane.

    The transitions must be dicts with ``reward``, ``terminated``, ``truncated`` and
    ``next_obs`` (the pre-reset successor). From step ``t`` the window takes
    ``m <= n`` steps, stopping after the first step that ended an episode and at the
    newest row written (later rows of the ring are older data, never crossed). Returns
    the transition at ``index`` with

    * ``reward``: ``sum_{k<m} gamma^k r_{t+k}``,
    * ``next_obs``, ``terminated``, ``truncated``: those of step ``t+m-1``,
    * ``discount``: ``gamma^m`` (multiply by ``1 - terminated`` to bootstrap),
    * ``n_steps``: ``m`` (int32).

    So the target is ``reward + discount * (1 - terminated) * V(next_obs)``: stopped
    at termination, bootstrapped through truncation. ``n`` is static.
    """
    missing = [f for f in N_STEP_FIELDS if f not in state.data]
    if missing:
        raise ValueError(f"n-step sampling needs transition fields {N_STEP_FIELDS}; missing {missing}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n_step must be an integer >= 1, got {n!r}")
    data = state.data
    if n == 1:  # the transition itself: one gather (a smaller program than the window's)
        batch = gather(state, index)
        batch.update(
            discount=jnp.full(index.row.shape, gamma, data["reward"].dtype),
            n_steps=jnp.ones(index.row.shape, jnp.int32),
        )
        return batch
    # Rows from ``row`` to the newest one, inclusive.
    available = (state.cursor - 1 - index.row) % state.num_rows + 1
    reward = jnp.zeros(index.row.shape, data["reward"].dtype)
    discount = jnp.ones(index.row.shape, data["reward"].dtype)
    last_row = index.row
    alive = jnp.ones(index.row.shape, bool)
    for k in range(n):
        row = (index.row + k) % state.num_rows
        take = alive & (k < available)
        reward = reward + jnp.where(take, discount * data["reward"][row, index.lane], 0.0)
        discount = jnp.where(take, discount * gamma, discount)
        last_row = jnp.where(take, row, last_row)
        ended = data["terminated"][row, index.lane] | data["truncated"][row, index.lane]
        alive = take & ~ended
    last = Index(last_row, index.lane)
    batch = gather(state.replace(data={k: v for k, v in data.items() if k != "next_obs"}), index)
    batch.update(
        reward=reward,
        discount=discount,
        next_obs=jax.tree.map(lambda x: x[last.row, last.lane], data["next_obs"]),
        terminated=data["terminated"][last.row, last.lane],
        truncated=data["truncated"][last.row, last.lane],
        n_steps=((last_row - index.row) % state.num_rows + 1).astype(jnp.int32),
    )
    return batch
