"""R2D2 (Kapturowski et al., 2019, "Recurrent Experience Replay in Distributed
Reinforcement Learning"): DQN's parts with a recurrent Q-network learning from
prioritized sequence replay.

A recurrent core (``memory="lstm"`` or ``"gru"``, ``memory_size`` units) sits between
the Q-network's torso and its head. The actors' memory is kept in the state and stored
with every step in a sequence replay (:mod:`jaxrl.buffers.sequence`) of ``windows``:
``windows.length`` consecutive steps of one env, starting every ``windows.period``
steps. The learner re-runs the online and target networks over each sampled window from
its stored memory, warming it up over the first ``windows.burn_in`` steps, and trains
the steps after them whose ``n_step`` targets lie inside the window with n-step
double-Q targets (value-rescaled with the default ``head``,
:class:`jaxrl.value_heads.Rescaled`). A window's priority mixes the max and the mean
of its TD errors (``prioritized.eta``, :class:`PrioritizedWindows`); the actors explore
with Ape-X's fixed per-env epsilons. Acting, the optimiser, the target refresh and the
collection are DQN's (:mod:`jaxrl.algorithms.dqn`). ::

    config = r2d2.Config(env_id="MemoryChain-bsuite")
    out = jax.jit(r2d2.train)(jax.random.key(0), config)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import networks, rollout, value_heads
from jaxrl.algorithms import dqn, offpolicy
from jaxrl.buffers import sequence
from jaxrl.buffers.prioritized import Prioritized, Uniform
from jaxrl.buffers.sequence import Windows
from jaxrl.config import part, require_choice, require_range, static
from jaxrl.exploration import ApeXEpsilons
from jaxrl.networks import QNetwork

RECURRENT_CORES = tuple(kind for kind in networks.MEMORY_KINDS if kind != "none")


@part
class PrioritizedWindows(Prioritized):
    """Prioritized sequence replay's settings (R2D2's defaults): a window's priority is
    ``(p + eps) ** alpha`` of ``p = eta * max_t |td_t| + (1 - eta) * mean_t |td_t|`` over
    its trained steps (:func:`jaxrl.buffers.sequence.sequence_priority`), and
    importance-sampling weights take the exponent ``beta``, annealed from ``beta_start``
    to ``beta_end``."""

    alpha: float = 0.9
    beta_start: float = 0.6
    beta_end: float = 0.6
    eta: float = 0.9

    def check_traced(self) -> None:
        super().check_traced()
        require_range(self, "eta", 0.0, 1.0)

    def window_priority(self, td: jax.Array, trained: jax.Array) -> jax.Array:
        """Each window's priority ``[B]`` from its TD errors ``td [B, T]`` on the steps
        where ``trained [B, T]``."""
        return sequence.sequence_priority(td, trained, self.eta)


class UniformWindows(Uniform):
    """Uniform sequence replay (``prioritized=None``): every window keeps the first
    priority and weight 1, so no window priority is computed or written."""

    def window_priority(self, td: jax.Array, trained: jax.Array) -> None:
        return None


@struct.dataclass
class Config(dqn.QLearningConfig):
    """R2D2 settings: DQN's shared ones (:class:`jaxrl.algorithms.dqn.QLearningConfig`)
    with R2D2's defaults (an LSTM, the rescaled head, Ape-X epsilons, prioritized windows
    with alpha 0.9 and beta 0.6), plus the recurrent core and the windows; the window
    sizes are shorter than the paper's Atari ones.

    Replay holds windows: ``batch_size`` counts windows, and the loss trains the steps
    after the first ``windows.burn_in`` whose ``n_step`` targets lie inside the window.
    The target network is copied every ``target_update_period`` updates (``tau`` 1).
    """

    memory: str = static("lstm")  # the recurrent core after the torso: "lstm" or "gru"
    memory_size: int = static(64)  # the recurrent core's units
    windows: Windows = Windows()  # replayed windows (length, burn-in, period)
    head: Any = value_heads.Rescaled()  # Scalar or Rescaled: the sequence targets are scalar
    exploration: Any = ApeXEpsilons()  # lane i: epsilon ** (1 + alpha * i / (N - 1))
    prioritized: Any = PrioritizedWindows()  # or None: every window keeps the first priority

    prioritized_part = PrioritizedWindows
    uniform_part = UniformWindows
    tau = 1.0  # the target network is a copy
    scale_rewards = False  # the rescaled head takes the returns' scale

    def __post_init__(self):
        super().__post_init__()
        require_choice(self, "memory", RECURRENT_CORES)
        if not isinstance(self.head, value_heads.Scalar):
            raise ValueError(
                f"R2D2 does not support distributional heads (head={self.head!r}): its n-step double-Q "
                "sequence targets are scalar; use jaxrl.value_heads.Scalar or Rescaled"
            )
        offpolicy.check_sequence_replay(self, bootstrap_steps=self.n_step - 1)


PRESETS = {"CartPole-v1": {}}


# ----------------------------------------------------------------------------- set-up


def make_network(config: Config) -> QNetwork:
    """DQN's Q-network with the recurrent core."""
    return dqn.make_network(config, config.memory, config.memory_size)


def initial_carry(config: Config, batch_size: int):
    """The Q-network's memory before an episode's first step, for ``batch_size`` envs:
    zeros, leaves ``[batch_size, memory_size]`` (an LSTM's ``(c, h)`` pair)."""
    return networks.initial_carry(config.memory, config.memory_size, batch_size)


def init(key: jax.Array, config: Config) -> dqn.State:
    """Online and target networks, optimiser, an empty sequence replay, ``num_envs``
    reset envs and the actors' initial memory."""
    config.check_traced()
    rngs, obs, env_state = dqn.reset_envs(key, config)
    one_step = jax.tree.map(lambda x: x[None, :1], obs)  # a sequence of one step of one env
    carry = initial_carry(config, config.num_envs)
    network_params = make_network(config).init(rngs, one_step, carry=initial_carry(config, 1))
    buffer = offpolicy.init_sequence_buffer(obs, jnp.zeros(config.num_envs, jnp.int32), carry, config)
    return dqn.initial_state(network_params, buffer, env_state, obs, carry, config)


# ----------------------------------------------------------------------------- acting


def q_values(params: dict, obs, carry, config: Config, noise_key: jax.Array | None = None):
    """``(q [B, A], carry)``: the action values for raw observations ``[B,
    *obs_shape]`` entered with the memory ``carry`` (leaves ``[B, ...]``), and the
    memory after them (:func:`jaxrl.algorithms.dqn.acting_out` on a sequence of one step)."""
    obs = offpolicy.add_time(offpolicy.observe(params, obs, config))
    out, carry = dqn.acting_out(make_network(config), params["network"], obs, config, noise_key, carry=carry)
    return config.head.q_values(out[0]), carry


act = dqn.acting(q_values)  # epsilon-greedy in q_values, as DQN acts


# ----------------------------------------------------------------------------- learning


def sample(state: dqn.State, key: jax.Array, config: Config) -> dict:
    """``batch_size`` windows of :func:`jaxrl.buffers.sequence.sample`: the transition
    fields with leaves ``[B, L, ...]`` except ``carry``, the memory entering each window's
    first step (leaves ``[B, ...]``), plus ``weight [B]`` (importance sampling, beta
    annealed over the run) and ``index``; observations as the networks read them."""
    windows = sequence.sample(state.buffer, key, config.batch_size, dqn.replay_beta(state, config))
    batch = {**windows.data, "carry": windows.carry, "weight": windows.weights, "index": windows.index}
    return offpolicy.observe_batch(state.params, batch, config)


def unroll(network_params, obs, next_obs, carry, reset: jax.Array, noise: jax.Array | None, config: Config):
    """The recurrent Q-network over windows, time-major, one step at a time.

    Args:
      obs: ``[T, B, *obs_shape]``; ``carry`` the memory entering step 0 (leaves ``[B,
        ...]``); ``reset [T, B]`` True where step ``t`` begins an episode.
      next_obs: ``[T, B, *obs_shape]`` the observation each step reached (the final one
        where an episode ended), or None to skip it.
      noise: one sample of :func:`jaxrl.algorithms.dqn.draw_noise` for every step, or None.
    Returns ``(out [T, B, A], next_out [T, B, A] or None, carry)``: ``next_out[t]`` is
    the network on ``next_obs[t]`` with the memory after step ``t``, before any reset.
    """
    network = make_network(config)

    def one_step(carry, inputs):
        obs_t, next_obs_t, reset_t = inputs
        out_t, carry = dqn.network_out(
            network, network_params, offpolicy.add_time(obs_t), noise, carry=carry, reset=reset_t[None]
        )
        if next_obs_t is None:
            return carry, (out_t[0], None)
        next_out_t, _ = dqn.network_out(network, network_params, offpolicy.add_time(next_obs_t), noise, carry=carry)
        return carry, (out_t[0], next_out_t[0])

    carry, (out, next_out) = jax.lax.scan(one_step, carry, (obs, next_obs, reset))
    return out, next_out, carry


def trained_steps(config: Config) -> jax.Array:
    """bool ``[L - burn_in]``: the window steps after the burn-in that the loss
    trains, those whose ``n_step`` targets lie inside the window."""
    mask = sequence.burn_in_mask(config.windows.length, config.windows.burn_in, config.n_step - 1)
    return mask[config.windows.burn_in :]


def sequence_q_values(network_params, target_params, batch: dict, online_noise, target_noise, config: Config):
    """The online and target networks re-run over the windows of a :func:`sample`
    batch from their stored memory, resetting it after every episode end.

    The first ``burn_in`` steps only warm up each network's memory, under
    ``stop_gradient``. Returns, time-major over the ``T = L - burn_in`` steps after
    them: ``q [T, B, A]`` (online, differentiable), ``next_online [T, B, A]`` and
    ``next_target [T, B, A]`` (gradient stopped) at each step's ``next_obs``, and the
    batch's time-major fields."""
    time_major = {
        name: jax.tree.map(offpolicy.time_major, batch[name])
        for name in ("obs", "action", "reward", "terminated", "truncated", "next_obs")
    }
    time_major["reset"] = rollout.episode_starts(time_major["terminated"] | time_major["truncated"])
    warm = jax.tree.map(lambda x: x[: config.windows.burn_in], time_major)
    train = jax.tree.map(lambda x: x[config.windows.burn_in :], time_major)
    online_carry = target_carry = batch["carry"]
    if config.windows.burn_in > 0:
        frozen = jax.lax.stop_gradient(network_params)
        _, _, online_carry = unroll(frozen, warm["obs"], None, online_carry, warm["reset"], online_noise, config)
        _, _, target_carry = unroll(target_params, warm["obs"], None, target_carry, warm["reset"], target_noise, config)
        online_carry = jax.lax.stop_gradient(online_carry)
    double_obs = train["next_obs"] if config.double else None
    q, next_online, _ = unroll(
        network_params, train["obs"], double_obs, online_carry, train["reset"], online_noise, config
    )
    _, next_target, _ = unroll(
        target_params, train["obs"], train["next_obs"], target_carry, train["reset"], target_noise, config
    )
    next_online = next_target if next_online is None else next_online  # without double: the target's argmax
    next_online = dqn.allowed(next_online, train["next_obs"], config)  # the argmax never picks a masked action
    return q, jax.lax.stop_gradient(next_online), jax.lax.stop_gradient(next_target), train


def loss_fn(network_params, target_params, batch: dict, key: jax.Array, config: Config):
    """R2D2's loss on a batch of windows from :func:`sample`.

    :func:`sequence_q_values`, then the ``head``'s n-step double-Q targets
    (:func:`jaxrl.returns.double_q_n_step_targets`, value-rescaled with
    :class:`jaxrl.value_heads.Rescaled`), bootstrapped through truncation from
    ``next_obs`` and stopped at termination. Each window's loss is the mean of the
    head's TD loss over its :func:`trained_steps`, weighted by its importance weight.
    Noisy nets: one noise sample for the online network and one for the target, for
    every step.

    Returns ``(loss, (metrics, priority [B]))`` with ``priority`` the window's
    :meth:`PrioritizedWindows.window_priority` of its TD errors on its trained steps
    (None with uniform replay).
    """
    online_noise, target_noise = config.exploration.draw(key, make_network(config), (2,))
    q, next_online, next_target, train = sequence_q_values(
        network_params, target_params, batch, online_noise, target_noise, config
    )
    q_taken = config.head.at_action(q, train["action"])  # [T, B]
    target = config.head.n_step_targets(
        train["reward"], next_online, next_target, train["terminated"], train["truncated"], config.gamma, config.n_step
    )
    elementwise, td, _ = config.head.td_loss(q_taken, target)
    mask = trained_steps(config)[:, None]  # [T, 1]
    count = jnp.sum(mask)
    per_window = jnp.sum(jnp.where(mask, elementwise, 0.0), axis=0) / count  # [B]
    loss = jnp.mean(batch["weight"] * per_window)
    metrics = {
        "loss": loss,
        "q_mean": jnp.sum(jnp.where(mask, q_taken, 0.0)) / (count * config.batch_size),
        "td_abs": jnp.sum(jnp.where(mask, jnp.abs(td), 0.0)) / (count * config.batch_size),
    }
    priority = dqn.replay_part(config).window_priority(td.T, jnp.broadcast_to(mask.T, td.T.shape))
    return loss, (metrics, jax.lax.stop_gradient(priority))


def update(state: dqn.State, batch: dict, key: jax.Array, config: Config):
    """One gradient step on a batch of windows (:func:`jaxrl.algorithms.dqn.optimize`
    with :func:`loss_fn`) and, with prioritized replay, the windows' new priorities.
    Returns ``(state, metrics)``."""
    state, metrics, priority = dqn.optimize(state, batch, key, config, loss_fn)
    replay = dqn.replay_part(config)
    return state.replace(
        buffer=replay.write_priorities(state.buffer, batch["index"], priority, sequence.update_priorities)
    ), metrics


# ----------------------------------------------------------------------------- training


learner = dqn.learner_of(init, act, initial_carry, sample, update)
warmup_step = learner.warmup_step  # an iteration of random actions: the warm-up before learning_starts
summary = "R2D2: a recurrent Q-network on prioritized sequence replay with burn-in and n-step rescaled targets"
algorithm = learner.algorithm("r2d2", Config, update, PRESETS, summary=summary)
__getattr__ = algorithm.module_getattr(__name__)  # r2d2.train, r2d2.step, r2d2.preset: the record's
