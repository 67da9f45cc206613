"""Prioritized sequence replay for recurrent Q-learning (R2D2: Kapturowski et al., 2019,
"Recurrent Experience Replay in Distributed Reinforcement Learning").

The ring storage of :mod:`jaxrl.buffers.replay` (leaves ``[R, N, ...]``, one row per env
step, each env lane its own time-ordered stream) plus a sum-tree, as in
:mod:`jaxrl.buffers.prioritized`, whose items are *sequences*: windows of ``L``
consecutive steps of one lane. The transitions must be a dict with a ``carry`` field,
the policy's recurrent state entering the step, so a sampled window comes with the carry
that entered its first step. The first ``burn_in`` steps of a window only warm that
carry up (:func:`burn_in_mask`); a sequence's priority mixes the max and the mean of
its trained steps' TD errors (:func:`sequence_priority`).

Which windows exist (the rule :func:`add` keeps):

* The number of rows ``R`` is rounded up to a multiple of ``period``. A window starts
  at each row ``s`` with ``s % period == 0``: ``K = R / period`` starts per lane, so
  consecutive windows of a lane start ``period`` steps apart in its stream, also across
  the ring's wrap-around (the ``c``-th row ever added lands in row ``c % R``, on the
  grid exactly when ``c % period == 0``).
* The window of start ``s`` is rows ``s, s + 1, ..., s + L - 1`` (mod ``R``). It is
  *sampleable* exactly when those ``L`` rows hold data written in time order: row ``s``
  is written and the rows from ``s`` through the newest one number at least ``L``,
  ``avail(s) >= L`` with ``avail(s) = (cursor - s - 1) % R + 1`` if ``s < size``, else
  0. A window reaching past the newest row would wrap into older data (it crosses the
  write cursor), so it is not sampleable.
* A start becomes sampleable, at the largest priority given so far, on the :func:`add`
  that writes its ``L``-th row; the add that overwrites any row of its window sets its
  priority to 0 until the window is whole again. Every other start keeps its priority.
  So the sum-tree's positive leaves are exactly the sampleable starts.

For example::

    buffer = sequence.init(example, capacity=100_000, num_envs=8, sequence_length=80, period=40)
    buffer = sequence.add(buffer, transitions)                   # leaves [8, ...]
    batch = sequence.sample(buffer, key, batch_size=32, beta=0.6)
    # batch.data leaves [32, 80, ...], batch.carry leaves [32, ...]
    trained = jnp.broadcast_to(sequence.burn_in_mask(80, burn_in=40), (32, 80))
    priorities = sequence.sequence_priority(td_error, trained, eta=0.9)  # td_error [32, 80]
    buffer = sequence.update_priorities(buffer, batch.index, priorities, alpha=0.9, eps=1e-6)

Every function is pure and works under ``jit`` and ``vmap``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl.buffers import prioritized, replay, sumtree
from jaxrl.buffers.replay import Index
from jaxrl.config import part, require_int, static

PyTree = Any
CARRY = "carry"  # the transition field holding the recurrent state entering the step


@part
class Windows:
    """What a recurrent off-policy learner replays, as a config part: windows of
    ``length`` consecutive steps of one env, starting every ``period`` steps of its stream,
    whose first ``burn_in`` steps only warm up the memory stored with the window's first
    step (R2D2's stored state with burn-in). The learner's own checks (the window must
    train a step, hold its n-step targets, fit in the buffer) are its config's."""

    length: int = static(20)
    burn_in: int = static(5)
    period: int = static(10)

    def __post_init__(self):
        require_int(self, "length", 1)
        require_int(self, "burn_in", 0)
        require_int(self, "period", 1)


@struct.dataclass
class SequenceState:
    replay: replay.ReplayState  # leaves [R, N, ...], R a multiple of period
    tree: sumtree.SumTree  # over the K * N starts, leaf (s // period) * N + lane
    max_priority: jax.Array  # float32: priority given to newly whole sequences
    sequence_length: int = struct.field(pytree_node=False)
    period: int = struct.field(pytree_node=False)

    @property
    def num_starts(self) -> int:
        """Window starts per lane, ``K = R / period``."""
        return self.replay.num_rows // self.period


class SequenceBatch(NamedTuple):
    """What :func:`sample` returns."""

    data: PyTree  # every field's windows, leaves [B, L, ...]
    carry: PyTree  # the carry entering each window's first step, leaves [B, ...]
    index: Index  # start row and lane of each window, int32 [B] each
    weights: jax.Array  # importance-sampling weights, float32 [B]


def _check_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def init(
    example: PyTree,
    capacity: int,
    num_envs: int,
    sequence_length: int,
    period: int,
    max_bytes: int | None = None,
) -> SequenceState:
    """An empty sequence buffer.

    Args:
      example: one transition, a dict with a ``carry`` field (any pytree, ``()`` for a
        feed-forward policy) and whatever else the learner needs per step; no batch
        axis. Only shapes and dtypes are used.
      capacity: transitions to hold; rounded up to ``R * N`` with ``R`` rows per lane a
        multiple of ``period`` (``R >= ceil(capacity / N)``).
      num_envs: transitions per :func:`add` (the env batch ``N``).
      sequence_length: steps per window ``L`` (burn-in, trained steps and any tail the
        targets bootstrap from).
      period: steps between the starts of consecutive windows of a lane,
        ``1 <= period <= L`` (windows overlap by ``L - period`` steps).
      max_bytes: refuse (``ValueError``) a buffer larger than this, counting the
        sum-tree; defaults to :func:`jaxrl.buffers.replay.memory_limit`.
    """
    sequence_length = _check_int("sequence_length", sequence_length)
    period = _check_int("period", period)
    if period > sequence_length:
        raise ValueError(
            f"period ({period}) must be <= sequence_length ({sequence_length}), "
            "else the steps between windows are never replayed"
        )
    if not isinstance(example, Mapping) or CARRY not in example:
        raise ValueError(f"the example transition must be a dict with a {CARRY!r} field (use () for no memory)")
    min_rows = replay.num_rows_for(capacity, num_envs)
    if min_rows < sequence_length:
        raise ValueError(
            f"capacity ({capacity}) must hold at least one sequence per env: {min_rows} rows for "
            f"num_envs={num_envs}, fewer than sequence_length={sequence_length}"
        )
    num_rows = -(-min_rows // period) * period
    num_starts = num_rows // period * num_envs
    replay_state = replay.init(
        example, num_rows * num_envs, num_envs, max_bytes, reserved_bytes=sumtree.nbytes(num_starts)
    )
    return SequenceState(
        replay=replay_state,
        tree=sumtree.init(num_starts),
        max_priority=jnp.ones((), jnp.float32),
        sequence_length=sequence_length,
        period=period,
    )


def is_sampleable(state: SequenceState, start: jax.Array) -> jax.Array:
    """Whether the windows starting at rows ``start`` (int, any shape, on the grid) hold
    ``L`` written rows in time order; the rule of the module docstring."""
    buffer = state.replay
    available = jnp.where(start < buffer.size, (buffer.cursor - start - 1) % buffer.num_rows + 1, 0)
    return available >= state.sequence_length


def sampleable_starts(state: SequenceState) -> jax.Array:
    """bool ``[K]``: which window starts (rows ``0, period, ...``) are sampleable, the
    same for every lane."""
    return is_sampleable(state, jnp.arange(state.num_starts) * state.period)


def num_sequences(state: SequenceState) -> jax.Array:
    """int32: sampleable windows over all lanes."""
    return jnp.sum(sampleable_starts(state)).astype(jnp.int32) * state.replay.num_envs


def can_sample(state: SequenceState, min_sequences: int) -> jax.Array:
    """True once at least ``min_sequences`` windows (over all lanes) are sampleable."""
    return num_sequences(state) >= min_sequences


def _slots(state: SequenceState, start: jax.Array, lane: jax.Array) -> jax.Array:
    return (start // state.period) * state.replay.num_envs + lane


def add(state: SequenceState, transitions: PyTree) -> SequenceState:
    """Append one row: ``transitions`` leaves are ``[N, ...]``, one step of every lane.

    Only starts whose window holds the written row ``w`` can change: the one at
    ``w - L + 1`` becomes sampleable at the current max priority, the others are cut by
    the cursor and get priority 0. They are the grid rows among the ``L`` rows ending at
    ``w``, at most ``ceil(L / period) <= K`` of them."""
    written = state.replay.cursor
    buffer = replay.add(state.replay, transitions)
    state = state.replace(replay=buffer)
    num_rows, num_envs, period = buffer.num_rows, buffer.num_envs, state.period
    num_candidates = -(-state.sequence_length // period)
    # The grid rows at or before w, newest first; distinct since num_candidates <= K.
    start = ((written // period - jnp.arange(num_candidates)) % state.num_starts) * period
    holds_written = (written - start) % num_rows < state.sequence_length
    new = jnp.where(is_sampleable(state, start), state.max_priority, 0.0)
    slots = _slots(state, start[:, None], jnp.arange(num_envs))  # [C, N]
    old = sumtree.leaves(state.tree)[slots]
    values = jnp.where(holds_written[:, None], new[:, None], old)  # others keep theirs
    return state.replace(tree=sumtree.update(state.tree, slots.reshape(-1), values.reshape(-1)))


def add_sequence(state: SequenceState, transitions: PyTree) -> SequenceState:
    """Append ``T`` rows (leaves ``[T, N, ...]``, oldest first), one :func:`add` per row."""
    state, _ = jax.lax.scan(lambda s, x: (add(s, x), None), state, transitions)
    return state


def sample(state: SequenceState, key: jax.Array, batch_size: int, beta: jax.Array) -> SequenceBatch:
    """``batch_size`` windows drawn by stratified proportional sampling.

    Window ``i`` is drawn with probability ``P(i) = p_i / sum_j p_j`` and weighted by
    ``w_i = (M * P(i)) ** -beta / max_j w_j`` (``M`` = :func:`num_sequences`), as in
    :mod:`jaxrl.buffers.prioritized`. Only sampleable windows are drawn; the buffer must
    hold at least one (:func:`can_sample`), else the batch is meaningless.

    Returns a :class:`SequenceBatch`: ``data`` leaves ``[B, L, ...]`` (rows ``s .. s + L
    - 1`` of the window's lane, across the ring's wrap-around), ``carry`` leaves
    ``[B, ...]`` (``data["carry"]`` at offset 0), ``index`` (start row, lane) for
    :func:`update_priorities`, ``weights [B]``."""
    num_envs = state.replay.num_envs
    slot, slot_priority = sumtree.stratified_sample(state.tree, key, batch_size)
    probability = slot_priority / sumtree.total(state.tree)
    weights = (num_sequences(state) * probability) ** -beta
    weights = weights / jnp.max(weights)
    index = Index((slot // num_envs) * state.period, slot % num_envs)
    data, carry = gather(state, index)
    return SequenceBatch(data=data, carry=carry, index=index, weights=weights)


def gather(state: SequenceState, index: Index) -> tuple[PyTree, PyTree]:
    """``(data, carry)``: the windows starting at ``index`` (start rows and lanes, int
    ``[B]``), leaves ``[B, L, ...]``, and ``data["carry"]`` at their first step, leaves
    ``[B, ...]``. Rows are taken mod ``R``, so windows run across the wrap-around."""
    buffer = state.replay
    rows = (index.row[:, None] + jnp.arange(state.sequence_length)) % buffer.num_rows  # [B, L]
    data = jax.tree.map(lambda x: x[rows, index.lane[:, None]], buffer.data)
    carry = jax.tree.map(lambda x: x[index.row, index.lane], buffer.data[CARRY])
    return data, carry


def update_priorities(
    state: SequenceState, index: Index, priorities: jax.Array, alpha: jax.Array, eps: jax.Array = 1e-6
) -> SequenceState:
    """Set the priorities of the windows at ``index`` (from :func:`sample`).

    ``priorities [B]`` is each window's TD-error scale (:func:`sequence_priority`); the
    stored priority is :func:`jaxrl.buffers.prioritized.priority` of it, ``(|x| + eps) **
    alpha``. Non-finite values keep the old priority, and a window that stopped being
    sampleable since it was drawn stays at 0."""
    slot = _slots(state, index.row, index.lane)
    old = sumtree.leaves(state.tree)[slot]
    apply = jnp.isfinite(priorities) & is_sampleable(state, index.row)
    new = jnp.where(apply, prioritized.priority(priorities, alpha, eps), old)
    return state.replace(
        tree=sumtree.update(state.tree, slot, new),
        max_priority=jnp.maximum(state.max_priority, jnp.max(jnp.where(apply, new, 0.0))),
    )


def sequence_priority(td_error: jax.Array, mask: jax.Array, eta: jax.Array) -> jax.Array:
    """R2D2's sequence priority ``eta * max_t |delta_t| + (1 - eta) * mean_t |delta_t|``
    over the steps where ``mask`` is True (0 where a row has none).

    Args:
      td_error: ``[B, T]`` TD errors of each window's steps (non-finite values at masked
        steps are ignored).
      mask: ``[B, T]`` bool, True on the trained steps (e.g. :func:`burn_in_mask`
        broadcast, and-ed with any per-step validity).
      eta: scalar in ``[0, 1]`` (R2D2: 0.9); may be traced.
    Returns ``[B]``, to pass to :func:`update_priorities`.
    """
    chex.assert_rank([td_error, mask], 2)
    chex.assert_equal_shape([td_error, mask])
    abs_td = jnp.where(mask, jnp.abs(td_error), 0.0)  # |delta| >= 0, so 0 is neutral for the max
    count = jnp.sum(mask, axis=1)
    mean = jnp.sum(abs_td, axis=1) / jnp.maximum(count, 1)
    return eta * jnp.max(abs_td, axis=1) + (1.0 - eta) * mean


def burn_in_mask(sequence_length: int, burn_in: int, bootstrap_steps: int = 0) -> jax.Array:
    """bool ``[L]``: True on the trained steps ``burn_in <= t < L - bootstrap_steps``.

    The first ``burn_in`` steps only warm up the carry; the last ``bootstrap_steps`` (0
    by default) only supply n-step targets' bootstrap values."""
    sequence_length = _check_int("sequence_length", sequence_length)
    burn_in = _check_int("burn_in", burn_in, minimum=0)
    bootstrap_steps = _check_int("bootstrap_steps", bootstrap_steps, minimum=0)
    if burn_in + bootstrap_steps >= sequence_length:
        raise ValueError(
            f"burn_in ({burn_in}) + bootstrap_steps ({bootstrap_steps}) must be < sequence_length "
            f"({sequence_length}), else no step is trained"
        )
    t = jnp.arange(sequence_length)
    return (t >= burn_in) & (t < sequence_length - bootstrap_steps)
