"""Return and advantage estimators, time-major, with explicit episode boundaries.

Conventions for every function (``[T, ...]``: time first, any batch dims after):

* ``r_t``: reward of step ``t``.
* ``v_t``: value estimate of the state the step started from.
* ``v_next_t``: value estimate of the state the step reached, *before* any auto-reset
  (the value of ``Trajectory.next_obs[t]``). At a time-limit truncation this is the
  value of the final observation, so targets bootstrap through truncation.
* ``terminated_t``: the MDP ended at step ``t``: nothing after it is bootstrapped.
* ``truncated_t``: the episode was cut at step ``t`` (time limit): the target
  bootstraps from ``v_next_t`` but no return flows back from step ``t + 1`` (which
  belongs to the next episode).
* The sequence end is treated like a truncation: the last step bootstraps from
  ``v_next_{T-1}``.

Loops over time are reverse ``lax.scan`` loops, so compile time does not grow with ``T``.
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

Array = jax.Array


def _check(r_t, *others):
    chex.assert_rank(r_t, {1, 2, 3})
    chex.assert_equal_shape([r_t, *others])


def _reverse_scan(fn, init, xs):
    _, ys = jax.lax.scan(fn, init, xs, reverse=True)
    return ys


def gae(
    r_t: Array, v_t: Array, v_next_t: Array, terminated_t: Array, truncated_t: Array, gamma: float, lambda_: float
) -> Array:
    """Generalised advantage estimation (Schulman et al., 2016, arXiv:1506.02438).

    ``delta_t = r_t + gamma * (1 - terminated_t) * v_next_t - v_t`` and
    ``A_t = delta_t + gamma * lambda_ * (1 - done_t) * A_{t+1}``, ``A_T = 0``.

    Args: all arrays ``[T, ...]`` (see module docstring); ``gamma``, ``lambda_`` scalars
    (may be traced). Returns the advantages ``[T, ...]``; value targets are ``A + v_t``.
    """
    _check(r_t, v_t, v_next_t, terminated_t, truncated_t)
    not_terminated = 1.0 - terminated_t.astype(r_t.dtype)
    continues = 1.0 - jnp.logical_or(terminated_t, truncated_t).astype(r_t.dtype)
    delta_t = r_t + gamma * not_terminated * v_next_t - v_t

    def backward(advantage_tp1, x):
        delta, cont = x
        advantage = delta + gamma * lambda_ * cont * advantage_tp1
        return advantage, advantage

    return _reverse_scan(backward, jnp.zeros_like(r_t[0]), (delta_t, continues))


def lambda_returns(
    r_t: Array, v_next_t: Array, terminated_t: Array, truncated_t: Array, gamma: float, lambda_: float
) -> Array:
    """TD(lambda) returns (Sutton & Barto, 2018, ch. 12).

    ``G_t = r_t + gamma * (1 - terminated_t) * ((1 - lambda_) v_next_t + lambda_ G_{t+1})``
    where ``G_{t+1}`` is replaced by ``v_next_t`` at episode ends and at the sequence end.

    Args: arrays ``[T, ...]``; scalars may be traced. Returns ``[T, ...]``.
    """
    _check(r_t, v_next_t, terminated_t, truncated_t)
    not_terminated = 1.0 - terminated_t.astype(r_t.dtype)
    continues = 1.0 - jnp.logical_or(terminated_t, truncated_t).astype(r_t.dtype)

    def backward(g_tp1, x):
        r, v_next, not_term, cont = x
        g_tp1 = cont * g_tp1 + (1.0 - cont) * v_next  # no return flows across an episode end
        g = r + gamma * not_term * ((1.0 - lambda_) * v_next + lambda_ * g_tp1)
        return g, g

    # At the sequence end G_T is replaced by v_next_{T-1}: start the carry from it.
    return _reverse_scan(backward, v_next_t[-1], (r_t, v_next_t, not_terminated, continues))


def q_lambda_targets(
    r_t: Array, q_next_t: Array, terminated_t: Array, truncated_t: Array, gamma: float, lambda_: float
) -> Array:
    """Peng's Q(lambda) targets (Peng & Williams, 1996), as PQN trains on them (Gallici
    et al., 2024, arXiv:2407.04811): :func:`lambda_returns` with the greedy value
    ``max_a q_next_t`` as each step's bootstrap, so no trace is cut at exploratory actions.

    ``G_t = r_t + gamma (1 - terminated_t) ((1 - lambda_) max_a q_next_t + lambda_ G_{t+1})``,
    with ``G_{t+1}`` replaced by ``max_a q_next_t`` at a truncation and at the sequence end
    (``q_next_t`` is then the value of the final observation).

    Args: ``r_t``, ``terminated_t``, ``truncated_t`` ``[T, ...]``; ``q_next_t [T, ..., A]``
    the action values of each step's next observation (before any auto-reset; forbidden
    actions already at the lowest float); scalars may be traced. Returns ``[T, ...]``.
    """
    chex.assert_equal_shape_prefix([r_t, q_next_t], r_t.ndim)
    chex.assert_rank(q_next_t, r_t.ndim + 1)
    return lambda_returns(r_t, jnp.max(q_next_t, axis=-1), terminated_t, truncated_t, gamma, lambda_)


def discounted_returns(r_t: Array, v_next_t: Array, terminated_t: Array, truncated_t: Array, gamma: float) -> Array:
    """Discounted Monte-Carlo returns ``G_t = r_t + gamma * (1 - terminated_t) G_{t+1}``,
    bootstrapping from ``v_next_t`` at truncations and at the sequence end (pass zeros
    for pure Monte Carlo). The ``lambda_ = 1`` case of :func:`lambda_returns`."""
    return lambda_returns(r_t, v_next_t, terminated_t, truncated_t, gamma, 1.0)


def n_step_targets(r_t: Array, v_next_t: Array, terminated_t: Array, truncated_t: Array, gamma: float, n: int) -> Array:
    """n-step bootstrapped targets (Sutton & Barto, 2018, ch. 7).

    ``G_t = sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - terminated_{t+m-1}) v_next_{t+m-1}``
    where ``m <= n`` stops early at the first episode end at or after ``t`` and at the
    sequence end. ``n`` is static (a Python int >= 1).

    Args: arrays ``[T, ...]``. Returns ``[T, ...]``.
    """
    _check(r_t, v_next_t, terminated_t, truncated_t)
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    T = r_t.shape[0]
    dtype = r_t.dtype
    done_t = jnp.logical_or(terminated_t, truncated_t)
    not_terminated = 1.0 - terminated_t.astype(dtype)

    def shifted(x, k, fill):
        """``x[t + k]`` for every ``t``, ``fill`` past the end."""
        pad = jnp.full((k,) + x.shape[1:], fill, x.dtype)
        return jnp.concatenate([x[k:], pad], axis=0)

    target = jnp.zeros_like(r_t)
    discount = jnp.ones_like(r_t)
    alive = jnp.ones(r_t.shape, bool)
    time = jnp.arange(T).reshape((T,) + (1,) * (r_t.ndim - 1))
    for k in range(min(n, T)):  # no step lies beyond the sequence end
        in_range = (time + k) < T
        take = alive & in_range
        target = target + jnp.where(take, discount * shifted(r_t, k, 0.0), 0.0)
        stop = take & (shifted(done_t, k, True) | (k == n - 1) | (time + k == T - 1))
        bootstrap = gamma * shifted(not_terminated, k, 0.0) * shifted(v_next_t, k, 0.0)
        target = target + jnp.where(stop, discount * bootstrap, 0.0)
        discount = discount * gamma
        alive = take & ~stop
    return target.astype(dtype)


def value_rescale(x: Array, eps: float = 1e-3) -> Array:
    """R2D2's invertible value rescaling ``h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x``
    (Pohlen et al., 2018, arXiv:1805.11593; Kapturowski et al., 2019).

    Args: ``x`` any shape; ``eps >= 0`` scalar (may be traced). Returns ``h(x)``, same shape.
    """
    abs_x = jnp.abs(x)
    # sqrt(a + 1) - 1 written as a / (sqrt(a + 1) + 1): no cancellation for small |x|.
    return jnp.sign(x) * abs_x / (jnp.sqrt(abs_x + 1.0) + 1.0) + eps * x


def value_unrescale(y: Array, eps: float = 1e-3) -> Array:
    """The exact inverse of :func:`value_rescale`,
    ``h^-1(y) = sign(y) (((sqrt(1 + 4 eps (|y| + 1 + eps)) - 1) / (2 eps)) ** 2 - 1)``.

    Computed as ``|y| (s + 1) / (1 + eps (s + 1))`` with ``s = sqrt(|x| + 1)`` solved
    from ``|y| = (s - 1) (1 + eps (s + 1))``, which has no cancellation and allows
    ``eps = 0``. Args: ``y`` any shape; ``eps >= 0`` scalar (may be traced).
    """
    abs_y = jnp.abs(y)
    b = 1.0 + eps + abs_y
    s = 2.0 * b / (1.0 + jnp.sqrt(1.0 + 4.0 * eps * b))  # the positive root of eps s^2 + s - b
    return jnp.sign(y) * abs_y * (s + 1.0) / (1.0 + eps * (s + 1.0))


def double_q_n_step_targets(
    r_t: Array,
    q_next_online_t: Array,
    q_next_target_t: Array,
    terminated_t: Array,
    truncated_t: Array,
    gamma: float,
    n: int,
    rescale_eps: float | None = None,
) -> Array:
    """n-step double-Q targets over a sequence, optionally value-rescaled as in R2D2
    (van Hasselt et al., 2016, arXiv:1509.06461; Kapturowski et al., 2019).

    ``v_next_t = q_next_target_t[a*]`` with ``a* = argmax_a q_next_online_t[a]``, then
    :func:`n_step_targets` (bootstrapped through truncation and at the sequence end,
    stopped at termination). With ``rescale_eps`` the Q-values are rescaled ones:
    ``h(n_step_targets(..., h^-1(v_next_t)))`` with ``h`` = :func:`value_rescale`.

    Args:
      r_t, terminated_t, truncated_t: ``[T, ...]`` as in the module docstring.
      q_next_online_t, q_next_target_t: ``[T, ..., A]`` online / target network
        Q-values of the state each step reached, before any auto-reset.
      gamma: scalar (may be traced); n: static int >= 1; rescale_eps: ``None`` for no
        rescaling, else ``h``'s ``eps`` (may be traced).
    Returns the targets ``[T, ...]`` (in rescaled units with ``rescale_eps``).
    """
    chex.assert_equal_shape([q_next_online_t, q_next_target_t])
    chex.assert_shape(q_next_online_t, r_t.shape + (None,))
    action = jnp.argmax(q_next_online_t, axis=-1)
    v_next_t = jnp.take_along_axis(q_next_target_t, action[..., None], axis=-1)[..., 0]
    if rescale_eps is None:
        return n_step_targets(r_t, v_next_t, terminated_t, truncated_t, gamma, n)
    v_next_t = value_unrescale(v_next_t, rescale_eps)
    return value_rescale(n_step_targets(r_t, v_next_t, terminated_t, truncated_t, gamma, n), rescale_eps)


class VTraceOutput(NamedTuple):
    vs: Array  # [T, ...] V-trace value targets
    pg_advantages: Array  # [T, ...] clipped-rho policy-gradient advantages
    q_estimate: Array  # [T, ...] r_t + gamma (1 - terminated_t) vs'_t: pg_advantages before the rho and the baseline


def vtrace(
    v_t: Array,
    v_next_t: Array,
    r_t: Array,
    terminated_t: Array,
    truncated_t: Array,
    log_rho_t: Array,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    pg_rho_bar: float | None = None,
    lambda_: float = 1.0,
) -> VTraceOutput:
    """V-trace targets for off-policy actor-critic (Espeholt et al., 2018, IMPALA).

    With ``rho_t = min(rho_bar, pi/mu)`` and ``c_t = lambda_ * min(c_bar, pi/mu)``:
    ``vs_t = v_t + rho_t delta_t + gamma (1 - done_t) c_t (vs_{t+1} - v_{t+1})``,
    ``delta_t = r_t + gamma (1 - terminated_t) v_next_t - v_t``; and the policy-gradient
    advantage ``min(pg_rho_bar, pi/mu) (q_t - v_t)``, ``q_t = r_t + gamma (1 -
    terminated_t) vs'_t`` (``q_estimate``) with ``vs'_t = vs_{t+1}`` inside an episode
    and ``v_next_t`` at its end.

    Args:
      v_t, v_next_t, r_t, terminated_t, truncated_t: ``[T, ...]`` as in the module doc.
      log_rho_t: ``[T, ...]`` log importance ratios ``log pi(a|s) - log mu(a|s)``.
      gamma: discount; rho_bar, c_bar, pg_rho_bar (defaults to rho_bar): clipping
        thresholds (``jnp.inf`` for none); ``lambda_``: trace-cutting mixture.
    With ``log_rho_t = 0`` and infinite thresholds, ``vs`` equals
    :func:`discounted_returns` (the on-policy n-step return to the sequence end).
    """
    _check(r_t, v_t, v_next_t, terminated_t, truncated_t, log_rho_t)
    pg_rho_bar = rho_bar if pg_rho_bar is None else pg_rho_bar
    rho_t = jnp.exp(log_rho_t)
    clipped_rho = jnp.minimum(rho_bar, rho_t)
    c_t = lambda_ * jnp.minimum(c_bar, rho_t)
    not_terminated = 1.0 - terminated_t.astype(r_t.dtype)
    continues = 1.0 - jnp.logical_or(terminated_t, truncated_t).astype(r_t.dtype)
    delta_t = clipped_rho * (r_t + gamma * not_terminated * v_next_t - v_t)

    def backward(correction_tp1, x):
        delta, cont, c = x
        correction = delta + gamma * cont * c * correction_tp1  # vs_t - v_t
        return correction, correction

    vs = v_t + _reverse_scan(backward, jnp.zeros_like(r_t[0]), (delta_t, continues, c_t))
    vs_tp1 = jnp.concatenate([vs[1:], v_next_t[-1:]], axis=0)
    vs_next = continues * vs_tp1 + (1.0 - continues) * v_next_t
    q_estimate = r_t + gamma * not_terminated * vs_next
    pg_advantages = jnp.minimum(pg_rho_bar, rho_t) * (q_estimate - v_t)
    return VTraceOutput(*(jax.lax.stop_gradient(x) for x in (vs, pg_advantages, q_estimate)))


def categorical_projection(probs: Array, reward: Array, discount: Array, support: Array) -> Array:
    """Project the distribution of ``reward + discount * Z`` onto ``support`` (C51,
    Bellemare et al., 2017, arXiv:1707.06887).

    Each atom ``z_j`` of ``probs`` moves to ``clip(r + d z_j, z_0, z_{K-1})`` and its mass
    is split between the two nearest atoms of the support, in proportion to closeness.

    Args:
      probs: ``[B, K]`` next-state distribution over ``support``.
      reward, discount: ``[B]``; ``discount`` already includes ``1 - terminated``.
      support: ``[K]`` evenly spaced atoms.
    Returns ``[B, K]`` target probabilities (each row sums to the row sum of ``probs``).
    """
    chex.assert_rank([probs, reward, discount, support], [2, 1, 1, 1])
    num_atoms = support.shape[0]
    delta = support[1] - support[0]
    # Where each atom lands, in units of atoms from z_0: [B, K] in [0, K - 1].
    position = jnp.clip((reward[:, None] + discount[:, None] * support - support[0]) / delta, 0.0, num_atoms - 1)
    lower = jnp.minimum(jnp.floor(position), num_atoms - 2)  # its two neighbours: lower, lower + 1
    upper_share = position - lower  # in [0, 1]
    lower = lower.astype(jnp.int32)
    rows = jnp.arange(probs.shape[0])[:, None]
    # Two scatter-adds of B * K shares: a dense [B, K, K] matrix of interpolation weights
    # does K times the work, and XLA fuses the n-step sums into it, recomputed per element.
    target = jnp.zeros_like(probs).at[rows, lower].add(probs * (1.0 - upper_share))
    return target.at[rows, lower + 1].add(probs * upper_share)
