"""Q-learning on the agents of a multi-agent env, with a mixer deciding how their values
meet the team's reward: the core of :mod:`jaxrl.algorithms.iql` and
:mod:`jaxrl.algorithms.vdn`.

The agents are a batch axis (:class:`jaxrl.envs.multiagent.AgentBatch`) and share one
Q-network told each agent's one-hot id, so acting is one network call for all agents
(DQN's :func:`~jaxrl.algorithms.dqn.act`, every agent of an env with that env's
epsilon). Replay stores each agent's transitions as its own lane: each env step's ``[N,
A]`` agent-transitions are ``N * A`` lanes (lane ``n * A + a``,
:func:`jaxrl.algorithms.offpolicy.replay_lanes`), so ``buffer_size`` counts
agent-transitions. The ``mixer`` part, a class constant of each variant's Config (the
mixer is the algorithm: a setting would let ``iql.Config`` train VDN), is chosen once:

* :class:`Independent` (IQL): every agent-transition is a DQN sample on its own reward;
  batches are ``batch_size`` agent-transitions and DQN's loss applies unchanged, every
  ``head`` with it.
* :class:`Sum` (VDN, Sunehag et al., 2018): batches are ``batch_size`` env steps with
  every agent's lane (:func:`jaxrl.algorithms.offpolicy.sample` with ``team``), and
  ``Q_tot = sum_a Q_a`` is trained toward the team's target (:func:`vdn_values`); every
  agent's lane of a sampled step gets the team's TD error as priority.

``learning_starts`` and ``total_timesteps`` count env steps. Everything else (the
network, exploration, the optimiser, the target refresh, the collection) is DQN's.
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import envs, value_heads
from jaxrl.algorithms import dqn
from jaxrl.algorithms.contract import Algorithm
from jaxrl.config import part, static
from jaxrl.exploration import EpsilonGreedy


@part
class Independent:
    """Independent Q-learning (Tan, 1993; with deep Q-networks, Tampuu et al., 2017):
    every agent learns its own action values from its own reward, the other agents part
    of its environment."""

    team = False  # batches are agent-transitions

    def check_head(self, head) -> None:
        """Every head applies."""

    def values(self, head, out: jax.Array, next_out: jax.Array, batch: dict):
        """``(out, target)``: each agent-transition's own (DQN's) target."""
        return out, head.target(next_out, batch["reward"], dqn.bootstrap_discount(batch))

    def lane_errors(self, batch: dict, priority_error: jax.Array):
        """``(index, priority_error)``: each sampled lane's own error."""
        return dqn.sampled_errors(batch, priority_error)


@part
class Sum:
    """Value decomposition networks (VDN; Sunehag et al., 2018, arXiv:1706.05296): the
    team's action value is the sum of the agents' own, ``Q_tot(o, u) = sum_a Q_a(o_a,
    u_a)``, trained end to end on the team's reward, while each agent acts greedily on
    its own ``Q_a``."""

    team = True  # batches are env steps with every agent's lane

    def check_head(self, head) -> None:
        """ValueError unless ``head`` is the plain scalar one."""
        if type(head) is not value_heads.Scalar:
            raise ValueError(
                f"VDN's mixer (Sum) sums the agents' Q-values and needs head=jaxrl.value_heads.Scalar, got "
                f"head={head!r}: a sum of the agents' distributional (categorical) values is no distribution on "
                "its support, a sum of their quantiles is in general no quantile of the team's return, and a sum "
                "of rescaled values h(Q_a) is not h(Q_tot)"
            )

    def values(self, head, out: jax.Array, next_out: jax.Array, batch: dict):
        """``(q_tot [B], target [B])`` of :func:`vdn_values` for a team batch (``out``,
        ``next_out`` ``[B, A]``); padding steps (an agent that had left) count 0."""
        weight = batch["valid"].astype(jnp.float32) if "valid" in batch else jnp.ones_like(out)
        return vdn_values(out, next_out, batch["reward"], dqn.bootstrap_discount(batch), weight)

    def lane_errors(self, batch: dict, priority_error: jax.Array):
        """``(index [B * A], priority_error [B * A])``: the team's error on every agent's
        lane of each sampled env step (0 where no agent acted). A step is so drawn ``A``
        times as often as one lane, which the sampled lane's importance weight (computed
        against ``A`` times as many lanes as steps) corrects exactly."""
        index = batch["index"]
        if "valid" in batch:
            priority_error = priority_error * jnp.any(batch["valid"], axis=-1)
        priority_error = jnp.broadcast_to(priority_error[:, None], index.lane.shape).reshape(-1)
        return jax.tree.map(jnp.ravel, index), priority_error


def vdn_values(q_taken, next_q, reward, discount, weight):
    """VDN's team value and its target (Sunehag et al., 2018, arXiv:1706.05296).

    Args:
      q_taken: ``[B, A]`` each agent's online ``Q_a(o_a, u_a)``.
      next_q: ``[B, A]`` each agent's bootstrap value ``Q_target,a(o'_a, a*_a)``.
      reward: ``[B, A]`` each agent's (n-step) reward.
      discount: ``[B, A]`` each agent's ``gamma^m (1 - terminated_a)``.
      weight: ``[B, A]`` 1 for an agent's transition, 0 for a padding step (an agent
        that had left the episode).
    Returns ``(q_tot [B], target [B])``: ``q_tot = sum_a weight_a Q_a`` and ``target =
    sum_a (r_a / A + discount_a next_q_a)``. The team's reward is the mean of the
    agents' (the shared reward itself in a cooperative task); each agent bootstraps
    from its own next observation and stops at its own termination.
    """
    chex.assert_rank(q_taken, 2)
    chex.assert_equal_shape([q_taken, next_q, reward, discount, weight])
    q_tot = jnp.sum(weight * q_taken, axis=-1)
    target = jnp.sum(reward / q_taken.shape[-1] + discount * next_q, axis=-1)
    return q_tot, target


@struct.dataclass
class Config(dqn.Config):
    """DQN's Config (:class:`jaxrl.algorithms.dqn.Config`) on a multi-agent env's agents,
    with defaults for the climbing game: ``MultiAgentClimbing-v0`` in 100k env steps
    (``tests/test_marl_dqn.py``'s learning test). Its ``mixer`` is a class constant, the
    variant's (:class:`Independent` here and in IQL, :class:`Sum` in VDN), not a field.

    ``buffer_size`` counts agent-transitions (``num_envs * A`` lanes); ``batch_size``
    counts agent-transitions (:class:`Independent`) or env steps of every agent
    (:class:`Sum`); ``learning_starts`` and ``total_timesteps`` count env steps.
    """

    env_id: str = static("MultiAgentClimbing-v0")
    num_steps: int = static(4)
    num_updates: int = static(2)
    batch_size: int = static(64)  # agent-transitions (IQL) or env steps (VDN)
    buffer_size: int = static(20_000)  # agent-transitions
    learning_starts: int = static(500)
    hidden_sizes: tuple = static((64,))
    target_update_period: int = static(50)
    exploration: Any = EpsilonGreedy(fraction=0.5)

    multi_agent = True  # the env's agents as a batch axis and as replay lanes
    mixer = Independent()  # how the agents' values meet the team's reward: the variant's choice

    def __post_init__(self):
        super().__post_init__()  # AgentBatch refuses a single-agent env
        agent_steps = self.iteration_steps * envs.config_num_agents(self)
        if self.buffer_size < agent_steps:
            raise ValueError(
                f"buffer_size ({self.buffer_size}) counts agent-transitions and must hold one iteration's "
                f"num_envs * num_steps * agents = {agent_steps}"
            )
        self.mixer.check_head(self.head)

    @property
    def agent_view(self) -> tuple:
        """How :func:`jaxrl.envs.make_config_env` views the env: ``(agent_id,
        global_state)`` for :class:`jaxrl.envs.multiagent.AgentBatch` (one shared network
        told each agent's one-hot id)."""
        return (True, False)


PRESETS = {"MultiAgentClimbing-v0": {}}


def sample(state: dqn.State, key: jax.Array, config: Config) -> dict:
    """DQN's batch (:func:`jaxrl.algorithms.dqn.sample`): ``batch_size`` agent-transitions,
    or with a team mixer ``batch_size`` env steps with every agent's lane (leaves and
    ``index`` ``[B, A, ...]``, ``weight [B]`` the sampled lane's)."""
    return dqn.sample(state, key, config, team=config.mixer.team)


def loss_fn(network_params, target_params, batch: dict, key: jax.Array, config: Config):
    """The ``head``'s weighted TD loss on a batch from :func:`sample`: DQN's outputs
    (:func:`jaxrl.algorithms.dqn.taken_and_next`) combined by the ``mixer`` into values
    and targets (IQL: each agent-transition's; VDN: the team's ``Q_tot`` and target,
    whose mean is the metric ``q_mean``). Returns ``(loss, (metrics, priority_error
    [B]))``."""
    out, next_out = dqn.taken_and_next(network_params, target_params, batch, key, config)
    q, target = config.mixer.values(config.head, out, next_out, batch)
    return dqn.weighted_td_loss(config.head, q, target, batch["weight"])


def update(state: dqn.State, batch: dict, key: jax.Array, config: Config):
    """One gradient step on ``batch`` (:func:`jaxrl.algorithms.dqn.optimize` with
    :func:`loss_fn`) and, with prioritized replay, the new priorities of the lanes the
    ``mixer`` names. Returns ``(state, metrics)``."""
    state, metrics, priority_error = dqn.optimize(state, batch, key, config, loss_fn)
    index, priority_error = config.mixer.lane_errors(batch, priority_error)
    return dqn.write_priorities(state, index, priority_error, config), metrics


learner = dqn.learner_of(dqn.init, dqn.act, dqn.initial_carry, sample, update)


def algorithm_of(name: str, Config: type, summary: str) -> Algorithm:
    """The record of a variant (IQL, VDN): this core's functions with the variant's
    ``Config``, whose ``mixer`` makes it."""
    return learner.algorithm(name, Config, update, PRESETS, summary=summary)
