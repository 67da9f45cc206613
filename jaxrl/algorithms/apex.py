"""Ape-X DQN (Horgan et al., 2018, arXiv:1803.00933): many actors, each env with its own
fixed epsilon, feeding one prioritized replay; the actors compute the new transitions'
priorities, so the learner never has to give them the largest priority blindly.

With actors apart from the learner (:func:`jaxrl.workflow.actor_learner.run`, ``python -m
jaxrl train apex --actors 2``), each actor steps its ``num_envs`` envs with the newest
params it pulled, forms ``n_step``-step transitions and their TD errors (its online and
target networks, as the paper's actors use their local copies) and sends them as one
block; the learner appends a block to its replay with the actors' priorities, then
makes ``num_updates`` of DQN's updates (:func:`jaxrl.algorithms.dqn.update`) on
prioritized samples. Env lane ``j`` of actor ``a`` explores with the epsilon of lane
``a * num_envs + j`` of all ``num_actors * num_envs`` (:class:`jaxrl.exploration.ApeXEpsilons`).

As one compiled program (``train``) it is DQN with Ape-X's epsilons: all lanes' steps
stored in lock-step, n-step returns formed at sampling. ::

    out = jax.jit(apex.train)(key, apex.Config(env_id="CartPole-v1"))   # lock-step
    result = actor_learner.run("apex", apex.Config(env_id="gymnasium:CartPole-v1"), actors=2)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import envs, rollout
from jaxrl.algorithms import dqn, offpolicy
from jaxrl.algorithms.contract import ActorLearner
from jaxrl.buffers import prioritized, replay
from jaxrl.config import static
from jaxrl.exploration import ApeXEpsilons


@struct.dataclass
class Config(dqn.Config):
    """Ape-X DQN settings: :class:`jaxrl.algorithms.dqn.Config`'s, exploring with
    Ape-X's per-lane epsilons. With actors apart, ``num_envs`` and ``num_steps`` are
    one actor's block, and the learner makes ``num_updates`` updates per block (twice
    DQN's replay ratio: tested on CartPole-v1 through Gymnasium with two actors)."""

    num_envs: int = static(4)  # one actor's envs: two actors have DQN's 8 lanes
    num_steps: int = static(8)  # env steps per env per block
    num_updates: int = static(8)  # learner updates per block
    exploration: Any = ApeXEpsilons()


PRESETS = {}


def example_step(config: Config) -> dict:
    """One env step as an actor keeps it (obs, action, reward, flags, next_obs, valid)."""
    spec = envs.config_spec(config)
    example = offpolicy.example_transition(spec.zeros((1,)), jnp.zeros((1,), jnp.int32))
    return {**example, "valid": jnp.zeros((), bool)}


def example_transition(config: Config) -> dict:
    """One n-step transition as the learner's replay stores it: a step's fields with the
    summed ``reward``, the ``discount`` ``gamma ** m`` and the last step's ``next_obs``
    and flags."""
    example = {**example_step(config), "discount": jnp.zeros((), jnp.float32)}
    return offpolicy.stored_observations(example, config)


def initial_tail(config: Config) -> dict:
    """What an actor keeps between blocks: its last ``n_step - 1`` steps (``steps``,
    leaves ``[n_step - 1, num_envs, ...]``), whose n-step windows end in the next block,
    and whether they are real (``valid [n_step - 1]``: not before the first block)."""
    batch = lambda x: jnp.zeros((config.n_step - 1, config.num_envs) + x.shape, x.dtype)  # noqa: E731
    return {"steps": jax.tree.map(batch, example_step(config)), "valid": jnp.zeros((config.n_step - 1,), bool)}


def lane_epsilons(timesteps: jax.Array, config: Config, actor, num_actors: int) -> jax.Array:
    """The epsilons ``[num_envs]`` of ``actor``'s lanes among all ``num_actors *
    num_envs`` (the ``exploration`` part's, at ``timesteps`` steps of all actors)."""
    every = config.exploration.epsilons(timesteps, config.total_timesteps, num_actors * config.num_envs)
    return jax.lax.dynamic_slice_in_dim(every, actor * config.num_envs, config.num_envs)


def actor_policy(published: dict, obs, carry, key: jax.Array, config: Config, actor, num_actors: int, timesteps):
    """Epsilon-greedy in the published params' Q-values, with the lanes' epsilons
    (:func:`lane_epsilons`, ``timesteps`` scaled to all actors' steps); no extras."""
    epsilon = lane_epsilons(timesteps * num_actors, config, actor, num_actors)
    action, carry = dqn.act(published["params"], obs, carry, key, config, epsilon=epsilon)
    return action, carry, {}


def n_step_transitions(window: dict, config: Config) -> dict:
    """The n-step transitions starting at each of the first ``T`` steps of ``window``
    (leaves ``[T + n_step - 1, N, ...]``, oldest first): :func:`jaxrl.buffers.replay.n_step`
    over it as a buffer whose newest row is its last. Leaves ``[T, N, ...]``."""
    rows = jax.tree.leaves(window)[0].shape[0]
    starts = rows - (config.n_step - 1)
    buffer = replay.ReplayState(data=window, cursor=jnp.zeros((), jnp.int32), size=jnp.full((), rows, jnp.int32))
    row, lane = jnp.meshgrid(jnp.arange(starts), jnp.arange(config.num_envs), indexing="ij")
    batch = replay.n_step(buffer, replay.Index(row.reshape(-1), lane.reshape(-1)), config.n_step, config.gamma)
    batch = {k: batch[k] for k in example_transition(config)}
    return jax.tree.map(lambda x: x.reshape((starts, config.num_envs) + x.shape[1:]), batch)


def finish(tail: dict, trajectory, published: dict, key: jax.Array, config: Config):
    """A block from a rollout ``[num_steps, num_envs]``: the n-step transitions that
    start at the ``num_steps`` steps whose windows are complete (the tail's, then the
    rollout's: ``transitions``, leaves ``[num_steps, num_envs, ...]``, ``valid`` False
    where they start before the actor's first step), their TD errors under the actor's
    online and target networks (``priority_error``) and the rollout's finished episodes
    (``episodes``). Returns the new tail and the block."""
    params, target = published["params"], published["target"]
    steps = {
        "obs": trajectory.obs,
        "action": trajectory.action,
        "reward": trajectory.reward,
        "terminated": trajectory.terminated,
        "truncated": trajectory.truncated,
        "next_obs": trajectory.next_obs,
        "valid": jnp.ones_like(trajectory.terminated) if trajectory.valid is None else trajectory.valid,
    }
    window = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), tail["steps"], steps)
    starts_valid = jnp.concatenate([tail["valid"], jnp.ones((config.num_steps,), bool)])
    transitions = n_step_transitions(window, config)
    transitions["valid"] = transitions["valid"] & starts_valid[: config.num_steps, None]
    flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), transitions)
    flat["weight"] = jnp.ones(flat["reward"].shape, jnp.float32)
    _, (_, priority_error) = dqn.loss_fn(
        params["network"], target, offpolicy.observe_batch(params, flat, config), key, config
    )
    keep = config.n_step - 1
    tail = {
        "steps": jax.tree.map(lambda x: x[x.shape[0] - keep :], window),
        "valid": starts_valid[starts_valid.shape[0] - keep :],
    }
    block = {
        "transitions": transitions,
        "priority_error": priority_error.reshape(transitions["reward"].shape) * transitions["valid"],
        "episodes": rollout.episode_metrics(trajectory),
    }
    return tail, block


def learner_init(key: jax.Array, config: Config) -> dqn.State:
    """Online and target networks, optimiser and an empty replay of n-step transitions
    (``num_envs`` lanes: one block's); no envs."""
    config.check_traced()
    params_key, _ = jax.random.split(key)
    obs = envs.config_spec(config).zeros((1,))
    network_params = dqn.init_network(config, {"params": params_key, "noise": params_key}, obs)
    use_priorities = dqn.replay_part(config).use_priorities
    buffers = prioritized if use_priorities else replay
    buffer = buffers.init(example_transition(config), config.buffer_size, config.num_envs)
    return dqn.initial_state(network_params, buffer, (), (), (), config)


def store(state: dqn.State, block: dict, config: Config) -> dqn.State:
    """A block's transitions appended to replay; with prioritized replay at the
    priorities of the actors' TD errors."""
    transitions = block["transitions"]
    if not isinstance(state.buffer, prioritized.PrioritizedState):
        return state.replace(buffer=replay.add_sequence(state.buffer, transitions))
    rows = replay.written_rows(state.buffer.replay, config.num_steps)
    index = replay.Index(*jnp.meshgrid(rows, jnp.arange(config.num_envs), indexing="ij"))
    buffer = prioritized.add_sequence(state.buffer, transitions)
    return dqn.write_priorities(state.replace(buffer=buffer), index, block["priority_error"], config)


def sample(state: dqn.State, key: jax.Array, config: Config) -> dict:
    """``batch_size`` stored n-step transitions, prioritized (importance ``weight``,
    beta annealed over the run) or uniform, with their ``index``; ``weight`` 0 where a
    transition is not ``valid``. Observations as the networks read them."""
    if isinstance(state.buffer, prioritized.PrioritizedState):
        index, weight = prioritized.sample_index(state.buffer, key, config.batch_size, dqn.replay_beta(state, config))
        buffer = state.buffer.replay
    else:
        index = replay.sample_index(state.buffer, key, config.batch_size)
        weight, buffer = jnp.ones(config.batch_size, jnp.float32), state.buffer
    batch = replay.gather(buffer, index)
    batch.update(weight=weight * batch["valid"], index=index)
    return offpolicy.observe_batch(state.params, batch, config)


def learn(state: dqn.State, block: dict, key: jax.Array, config: Config):
    """The learner's iteration on a block: :func:`store` it, then (once replay holds
    ``learning_starts`` steps) ``num_updates`` of :func:`jaxrl.algorithms.dqn.update` on
    :func:`sample`'s batches. Metrics: the updates' (NaN before learning starts), the
    block's episodes and ``timesteps``."""
    state = store(state, block, config)
    transitions = block["transitions"]
    if config.normalize_observations:
        observation = envs.config_spec(config).observation
        obs_stats = envs.observation_stats_fold(state.params["obs_stats"], transitions["obs"], observation)
        state = state.replace(params={**state.params, "obs_stats": obs_stats})
    state = state.replace(timesteps=state.timesteps + config.num_envs * config.num_steps)

    def one_update(state, key, index):
        sample_key, update_key = jax.random.split(key)
        return dqn.update(state, sample(state, sample_key, config), update_key, config)

    def updates(state):
        return offpolicy.run_updates(state, one_update, key, config.num_updates)

    def no_updates(state):
        return state, offpolicy.nan_metrics(dqn.LEARNER_METRICS)

    state, metrics = jax.lax.cond(state.timesteps >= config.learning_starts, updates, no_updates, state)
    return state, {**metrics, **block["episodes"], "timesteps": state.timesteps}


ACTOR_LEARNER = ActorLearner(
    prepare=lambda config: config,
    learner_init=learner_init,
    published=lambda state: {"params": state.params, "target": state.target_params},
    make_env=offpolicy.make_env,
    initial_carry=dqn.initial_carry,
    initial_tail=initial_tail,
    policy=actor_policy,
    finish=finish,
    learn=learn,
    block_steps=lambda config: config.num_envs * config.num_steps,
    num_iterations=lambda config: config.num_iterations,
)

algorithm = dqn.algorithm.variant(
    "apex",
    Config,
    PRESETS,
    summary="Ape-X DQN: actors with their own epsilons feeding one prioritized replay, priorities from the actors",
    variants={},
    actor_learner=ACTOR_LEARNER,
)
__getattr__ = algorithm.module_getattr(__name__)  # apex.train, apex.preset: the record's
