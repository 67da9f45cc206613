"""Prioritized replay (Schaul et al., 2016, arXiv:1511.05952), proportional variant.

The uniform ring buffer of :mod:`jaxrl.buffers.replay` plus a sum-tree over its
``R * N`` slots (leaf ``row * N + lane``). Transition ``i`` is drawn with probability
``P(i) = p_i / sum_j p_j``, where ``p_i = (|delta_i| + eps) ** alpha`` comes from its
last TD error; new transitions get the largest priority given so far, so each is
sampled at least about once. Importance-sampling weights
``w_i = (M * P(i)) ** -beta`` (``M`` transitions stored) are divided by the batch's
largest weight, as most implementations do, so they lie in ``(0, 1]``.

Priorities are always finite and positive: ``|delta|`` is clipped to
``[0, MAX_TD_ERROR]`` before ``eps > 0`` is added, and a NaN or infinite TD error
leaves that transition's priority unchanged. Slots never written have priority zero and
are never sampled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.buffers import replay, sumtree
from jaxrl.buffers.replay import Index
from jaxrl.config import part, require_range

PyTree = Any
MAX_TD_ERROR = 1e6


@part
class Prioritized:
    """The settings of prioritized replay, as a config part: priorities ``(|delta| + eps)
    ** alpha``, importance-sampling exponent ``beta`` annealed linearly from
    ``beta_start`` to ``beta_end`` over the run."""

    alpha: float = 0.6
    beta_start: float = 0.4
    beta_end: float = 1.0
    eps: float = 1e-6

    def check_traced(self) -> None:
        for field in ("alpha", "beta_start", "beta_end"):
            require_range(self, field, 0.0, 1.0)
        require_range(self, "eps", 0.0, float("inf"), low_open=True)

    use_priorities = True  # a sum-tree beside the replay (this module's buffer)

    def beta(self, progress: jax.Array) -> jax.Array:
        """The importance-sampling exponent at ``progress`` (0 to 1) through the run."""
        progress = jnp.clip(progress, 0.0, 1.0)
        return self.beta_start + progress * (self.beta_end - self.beta_start)

    def write_priorities(self, buffer, index, errors: jax.Array, update: Callable | None = None):
        """``buffer`` with the priorities of ``errors`` at ``index``: ``update(buffer, index,
        errors, alpha, eps)``, by default this module's :func:`update_priorities`
        (:func:`jaxrl.buffers.sequence.update_priorities` for windows)."""
        return (update or update_priorities)(buffer, index, errors, self.alpha, self.eps)


class Uniform:
    """Uniform replay (a Config's ``prioritized=None``): :class:`Prioritized`'s counterpart
    with the same methods, so that a learner samples and writes without asking which it
    has (:func:`replay_priorities`)."""

    use_priorities = False  # jaxrl.buffers.replay's buffer alone

    def beta(self, progress: jax.Array) -> jax.Array:
        """0: every importance weight is 1."""
        return jnp.zeros((), jnp.float32)

    def write_priorities(self, buffer, index, errors, update: Callable | None = None):
        """``buffer`` unchanged: there are no priorities."""
        return buffer


def replay_priorities(prioritized: Prioritized | None, uniform: type = Uniform) -> Prioritized | Uniform:
    """How replay samples: ``prioritized``, or without it (None) ``uniform()``. The one
    place a Config's ``prioritized`` is asked about."""
    return uniform() if prioritized is None else prioritized


@struct.dataclass
class PrioritizedState:
    replay: replay.ReplayState
    tree: sumtree.SumTree  # over the R * N slots
    max_priority: jax.Array  # float32: priority given to new transitions


def init(example: PyTree, capacity: int, num_envs: int, max_bytes: int | None = None) -> PrioritizedState:
    """An empty prioritized buffer; arguments as :func:`jaxrl.buffers.replay.init`.
    The memory check counts the sum-tree too."""
    num_slots = replay.num_rows_for(capacity, num_envs) * num_envs
    tree_bytes = sumtree.nbytes(num_slots)
    replay_state = replay.init(example, capacity, num_envs, max_bytes, reserved_bytes=tree_bytes)
    tree = sumtree.init(num_slots)
    return PrioritizedState(replay=replay_state, tree=tree, max_priority=jnp.ones((), jnp.float32))


def _flat(index: Index, num_envs: int) -> jax.Array:
    return index.row * num_envs + index.lane


def add_sequence(state: PrioritizedState, items: PyTree) -> PrioritizedState:
    """Append ``T`` rows (leaves ``[T, N, ...]``) at the current maximum priority."""
    num_new = jax.tree.leaves(items)[0].shape[0]
    num_envs = state.replay.num_envs
    rows = replay.written_rows(state.replay, num_new)
    slots = (rows[:, None] * num_envs + jnp.arange(num_envs)).reshape(-1)
    tree = sumtree.update(state.tree, slots, jnp.full(slots.shape, state.max_priority))
    return state.replace(replay=replay.add_sequence(state.replay, items), tree=tree)


def add(state: PrioritizedState, items: PyTree) -> PrioritizedState:
    """Append one row (leaves ``[N, ...]``) at the current maximum priority."""
    return add_sequence(state, jax.tree.map(lambda x: x[None], items))


def sample_index(state: PrioritizedState, key: jax.Array, batch_size: int, beta: jax.Array):
    """``(index, weights [B])``: stratified proportional sampling and normalised
    importance-sampling weights with exponent ``beta``. The buffer must hold at least
    one transition (:func:`can_sample`); an empty one gives meaningless indices."""
    num_envs = state.replay.num_envs
    slot, slot_priority = sumtree.stratified_sample(state.tree, key, batch_size)
    probability = slot_priority / sumtree.total(state.tree)
    num_stored = state.replay.size * num_envs
    weights = (num_stored * probability) ** -beta
    weights = weights / jnp.max(weights)
    return Index(slot // num_envs, slot % num_envs), weights


def sample(state: PrioritizedState, key: jax.Array, batch_size: int, beta: jax.Array):
    """``(batch, index, weights)``: leaves of ``batch`` and ``weights`` are ``[B, ...]``."""
    index, weights = sample_index(state, key, batch_size, beta)
    return replay.gather(state.replay, index), index, weights


def priority(td_error: jax.Array, alpha: jax.Array, eps: jax.Array) -> jax.Array:
    """``(min(|td_error|, MAX_TD_ERROR) + eps) ** alpha``: finite and positive for finite input."""
    return (jnp.minimum(jnp.abs(td_error), MAX_TD_ERROR) + eps) ** alpha


def update_priorities(
    state: PrioritizedState, index: Index, td_errors: jax.Array, alpha: jax.Array, eps: jax.Array = 1e-6
) -> PrioritizedState:
    """Set the priorities of the transitions at ``index`` from ``td_errors [B]``.

    ``alpha`` in [0, 1] (0 is uniform sampling), ``eps > 0``. Non-finite errors keep the
    old priority."""
    slot = _flat(index, state.replay.num_envs)
    old = sumtree.leaves(state.tree)[slot]
    new = jnp.where(jnp.isfinite(td_errors), priority(td_errors, alpha, eps), old)
    return state.replace(
        tree=sumtree.update(state.tree, slot, new),
        max_priority=jnp.maximum(state.max_priority, jnp.max(new)),
    )


def can_sample(state: PrioritizedState, min_size: int) -> jax.Array:
    return replay.can_sample(state.replay, min_size)
