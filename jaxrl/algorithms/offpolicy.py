"""What the off-policy algorithms (DQN, DDPG, TD3, SAC) share: collecting into replay,
sampling n-step batches, soft target updates, and the train loop that acts at random
until ``learning_starts`` and then learns.

The helpers read these fields of an algorithm's config: ``env_id``, ``env_kwargs``,
``num_envs``, ``num_steps``, ``batch_size``, ``buffer_size``, ``n_step``, ``gamma``,
``normalize_observations``, ``scale_rewards``, ``num_evals``, ``num_reports``,
``replay_obs_dtype`` where a Config has it (R2D2's has not) and the derived sizes of
:class:`ReplaySchedule`, which every off-policy Config mixes in.

Observation normalisation keeps replay raw: running statistics of every collected
observation live in ``params["obs_stats"]`` (so a policy acts from ``params`` alone), and
both acting and the learner's batches are standardised by the newest statistics
(:func:`observe`). Reward scaling divides each reward by the running standard deviation of
its lane's discounted return before it is stored (:class:`jaxrl.envs.ScaleReward`, as
PPO's ``scale_rewards``); the reported episode returns stay raw.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl import envs, evaluation, loop, networks, rollout
from jaxrl.algorithms import requirements
from jaxrl.algorithms.contract import Algorithm
from jaxrl.buffers import prioritized, replay, sequence
from jaxrl.config import require_choice, require_int
from jaxrl.distributions import mask_actions


class ReplaySchedule:
    """Derived sizes of a collect-store-update loop, mixed into off-policy Configs.

    One iteration collects ``num_steps`` steps from each of ``num_envs`` envs and then
    runs ``num_updates`` updates on batches of ``batch_size``."""

    def check_schedule(self) -> None:
        """ValueErrors for sizes that cannot work (called from ``__post_init__``)."""
        for field in ("num_envs", "num_steps", "num_updates", "batch_size", "buffer_size", "n_step", "eval_episodes"):
            require_int(self, field, 1)
        for field in ("learning_starts", "num_evals", "num_reports"):
            require_int(self, field, 0)
        require_int(self, "total_timesteps", self.learning_starts + self.iteration_steps)
        if self.buffer_size < self.batch_size:
            raise ValueError(f"buffer_size ({self.buffer_size}) must be at least batch_size ({self.batch_size})")
        if self.buffer_size < self.iteration_steps:
            raise ValueError(
                f"buffer_size ({self.buffer_size}) must hold one iteration's "
                f"num_envs * num_steps = {self.iteration_steps} transitions"
            )

    @property
    def iteration_steps(self) -> int:
        """Env steps per iteration (all envs)."""
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        return self.total_timesteps // self.iteration_steps

    @property
    def warmup_iterations(self) -> int:
        """Leading iterations that act at random and do not update."""
        return -(-self.learning_starts // self.iteration_steps)

    @property
    def replay_ratio(self) -> float:
        """Sampled transitions per env step."""
        return self.num_updates * self.batch_size / self.iteration_steps


def require_box_actions(config, algorithm: str) -> envs.EnvSpec:
    """The env's spec; ValueError unless its actions are a Box with finite bounds."""
    spec = envs.config_spec(config)
    requirements.refuse_multi_discrete(spec, config.env_id, algorithm)
    if spec.discrete:
        raise ValueError(
            f"{algorithm} needs a continuous (Box) action space; env_id {config.env_id!r} has "
            f"{spec.num_actions} discrete actions (use DQN, PPO, or SAC with discrete=True)"
        )
    if not (np.all(np.isfinite(spec.action_low)) and np.all(np.isfinite(spec.action_high))):
        raise ValueError(
            f"{algorithm} scales actions to the Box bounds, which must be finite; "
            f"{config.env_id!r} has low={spec.action_low}, high={spec.action_high}"
        )
    return spec


def polyak(target, online, tau):
    """``tau * online + (1 - tau) * target`` leaf by leaf: ``tau = 1`` copies ``online``
    exactly, ``tau = 0`` keeps ``target``."""
    return jax.tree.map(lambda t, o: tau * o + (1.0 - tau) * t, target, online)


def make_env(config):
    """The config's env, reporting episode statistics, and its params; with
    ``multi_agent`` the :class:`jaxrl.envs.multiagent.AgentBatch` view, which reports
    each agent's episode statistics itself; with ``scale_rewards`` the rewards divided by
    the running std of the discounted return (:class:`jaxrl.envs.ScaleReward`, outside
    the episode statistics, which stay raw)."""
    env, env_params = envs.make_config_env(config)
    if not getattr(config, "multi_agent", False):
        env = envs.EpisodeStatistics(env)
    if config.scale_rewards:
        env = envs.ScaleReward(env, gamma=config.gamma)
    return env, env_params


# What ``replay_obs_dtype`` may name: exact for observations whose values are already
# small integers (0/1 grids, 8-bit frames).
REPLAY_OBS_DTYPES = ("uint8", "bool")


def check_replay_obs_dtype(config) -> None:
    """ValueError unless ``config.replay_obs_dtype`` is None or one of
    :data:`REPLAY_OBS_DTYPES`, for an env whose observation is one array."""
    require_choice(config, "replay_obs_dtype", (None, *REPLAY_OBS_DTYPES))
    dtype = config.replay_obs_dtype
    if dtype is None:
        return
    if envs.config_spec(config).structured:
        raise ValueError(
            f"replay_obs_dtype={dtype!r} needs an array observation; env_id {config.env_id!r} has a "
            "structured (dict or tuple) one"
        )


def check_normalization(config) -> None:
    """ValueErrors for ``normalize_observations`` / ``scale_rewards`` settings that
    cannot work (called from an off-policy Config's ``__post_init__``)."""
    if config.scale_rewards and getattr(config, "multi_agent", False):
        raise ValueError("scale_rewards is not supported with several agents (rewards are per agent)")


def init_params(params: dict, config) -> dict:
    """``params`` plus, with ``normalize_observations``, ``"obs_stats"``: the running
    statistics of the env's observations (:func:`jaxrl.envs.observation_stats_init`),
    which :func:`observe` reads and every collection updates."""
    if not config.normalize_observations:
        return params
    spec = envs.config_spec(config)
    return {**params, "obs_stats": envs.observation_stats_init(spec.observation, spec.obs_classes)}


def observe(params: dict, obs, config):
    """What the networks read of raw observations ``obs`` (leaves ``[..., *shape]``):
    with ``normalize_observations`` each float leaf standardised by
    ``params["obs_stats"]`` and clipped (:func:`jaxrl.envs.normalize_observation`), else
    ``obs`` itself."""
    if not config.normalize_observations:
        return obs
    return envs.normalize_observation(params["obs_stats"], obs)


def stored_observations(example: dict, config) -> dict:
    """A transition ``example`` with ``obs`` and ``next_obs`` at ``config.replay_obs_dtype``:
    what a replay buffer is allocated from (additions are cast to it). Configs without the
    field (R2D2's) store observations as the env emits them."""
    dtype = getattr(config, "replay_obs_dtype", None)
    return example if dtype is None else observations_as(example, dtype)


def observations_as(transitions: dict, dtype) -> dict:
    """``transitions`` with ``obs`` and ``next_obs`` cast to ``dtype``."""
    return {**transitions, **{name: transitions[name].astype(dtype) for name in ("obs", "next_obs")}}


def observe_batch(params: dict, batch: dict, config) -> dict:
    """A replay batch with its ``obs`` and ``next_obs`` as the networks read them: back at
    the env's dtype where replay stores them at ``replay_obs_dtype``, then :func:`observe`."""
    if getattr(config, "replay_obs_dtype", None) is not None:  # R2D2's and offline Configs have none
        batch = observations_as(batch, envs.config_spec(config).obs_dtype)
    if not config.normalize_observations:
        return batch
    return {**batch, **{name: observe(params, batch[name], config) for name in ("obs", "next_obs")}}


def replay_lanes(tree, config, axis: int = 0):
    """A batch of env lanes as replay lanes: unchanged, or with ``multi_agent`` (leaves
    ``[..., N, A, ...]``, the env axis at ``axis``) each env's agents as consecutive lanes
    ``n * A + a`` (leaves ``[..., N * A, ...]``), so that every per-lane buffer function
    (n-step windows, priorities, valid weights) follows one agent's stream."""
    if not getattr(config, "multi_agent", False):
        return tree
    return jax.tree.map(lambda x: x.reshape(x.shape[:axis] + (-1,) + x.shape[axis + 2 :]), tree)


def sibling_lanes(index: replay.Index, num_agents: int) -> replay.Index:
    """Every agent's lane of the env steps at ``index`` (lanes of :func:`replay_lanes`):
    ``row`` and ``lane`` ``[B] -> [B, A]``, lane ``(lane // A) * A + a``."""
    lane = (index.lane // num_agents * num_agents)[:, None] + jnp.arange(num_agents)
    return replay.Index(jnp.broadcast_to(index.row[:, None], lane.shape), lane)


def example_transition(obs, action) -> dict:
    """One transition's structure (no env axis) from batched ``obs [N, ...]`` and
    ``action [N, ...]``: what a buffer is allocated from."""
    one = lambda x: x[0]  # noqa: E731
    return {
        "obs": jax.tree.map(one, obs),
        "action": one(action),
        "reward": jnp.zeros((), jnp.float32),
        "terminated": jnp.zeros((), bool),
        "truncated": jnp.zeros((), bool),
        "next_obs": jax.tree.map(one, obs),
    }


def init_buffer(obs, action, config, use_priorities: bool = False):
    """An empty replay buffer of ``config.buffer_size`` transitions shaped like ``obs``
    and ``action`` (batched over ``config.num_envs``), with a ``valid`` flag per
    transition where the env pads its episodes (:attr:`jaxrl.envs.EnvSpec.padding_steps`).
    With ``multi_agent`` (``obs`` and ``action`` ``[N, A, ...]``) its lanes are the
    ``N * A`` agents (:func:`replay_lanes`) and ``buffer_size`` counts agent-transitions."""
    buffers = prioritized if use_priorities else replay
    obs, action = replay_lanes((obs, action), config)
    example = stored_observations(example_transition(obs, action), config)
    if envs.config_spec(config).padding_steps:
        example["valid"] = jnp.zeros((), bool)
    return buffers.init(example, config.buffer_size, action.shape[0])


def init_sequence_buffer(obs, action, carry, config):
    """An empty :mod:`jaxrl.buffers.sequence` replay of ``config.buffer_size``
    transitions with ``config.windows`` (:class:`jaxrl.buffers.sequence.Windows`): the
    fields of :func:`example_transition` plus ``carry``,
    the recurrent state entering each step (``carry`` leaves ``[N, ...]``)."""
    example = stored_observations(example_transition(obs, action), config)
    example[sequence.CARRY] = jax.tree.map(lambda x: x[0], carry)
    windows = config.windows
    return sequence.init(example, config.buffer_size, config.num_envs, windows.length, windows.period)


def check_sequence_replay(config, bootstrap_steps: int) -> None:
    """ValueErrors, naming the field, for sequence-replay settings that cannot work:
    ``memory_size`` and ``windows`` (:class:`jaxrl.buffers.sequence.Windows`) of
    ``config``, with ``bootstrap_steps`` trailing steps of a window that only supply
    targets (``n_step - 1``). Called with memory on."""
    requirements.require_transitions_only(config, f"sequence replay (memory={config.memory!r})")
    require_int(config, "memory_size", 1)
    windows = config.windows
    if not isinstance(windows, sequence.Windows):
        raise TypeError(f"windows must be a jaxrl.buffers.sequence.Windows, got {windows!r}")
    if windows.burn_in + bootstrap_steps >= windows.length:
        raise ValueError(
            f"windows.burn_in ({windows.burn_in}) + {bootstrap_steps} bootstrap steps must be < windows.length "
            f"({windows.length}), else a window trains no step"
        )
    trained = windows.length - windows.burn_in - bootstrap_steps
    if windows.period > trained:
        raise ValueError(
            f"windows.period ({windows.period}) must be <= the steps a window trains "
            f"({trained}), else some steps are never trained"
        )
    if config.buffer_size // config.num_envs < windows.length:
        raise ValueError(
            f"buffer_size ({config.buffer_size}) must hold windows.length ({windows.length}) "
            f"steps of each of num_envs ({config.num_envs}) envs"
        )
    if config.warmup_iterations * config.num_steps < windows.length:
        raise ValueError(
            f"learning_starts ({config.learning_starts}) must cover windows.length ({windows.length}) "
            f"steps of each of num_envs ({config.num_envs}) envs, so a whole window exists before learning"
        )


def random_actions(key: jax.Array, spec: envs.EnvSpec, num: int, obs=None) -> jax.Array:
    """``num`` uniformly random actions: int32 ``[num]`` for a discrete space (uniform
    over the allowed actions where ``obs [num, ...]`` carries an action mask), float
    ``[num, *action_shape]`` within the bounds of a Box."""
    if spec.discrete and spec.action_mask and obs is not None:
        logits = jnp.zeros((num, spec.num_actions), jnp.float32)
        return jax.random.categorical(key, mask_actions(logits, obs[envs.ACTION_MASK])).astype(jnp.int32)
    if spec.discrete:
        return jax.random.randint(key, (num,), 0, spec.num_actions, jnp.int32)
    return spec.from_unit(jax.random.uniform(key, (num,) + spec.action_shape, jnp.float32, -1.0, 1.0))


def initial_carry(config, batch_size: int):
    """An off-policy actor-critic's memories before an episode's first step, for
    ``batch_size`` envs: ``{"actor": ..., "critic": ...}`` with ``memory`` on (DDPG, TD3,
    SAC), each zeros with leaves ``[batch_size, memory_size]`` (a ``(c, h)`` pair for an
    LSTM); ``()`` without memory (and for BC, which has none)."""
    memory = getattr(config, "memory", "none")
    if memory == "none":
        return ()
    return {name: networks.initial_carry(memory, config.memory_size, batch_size) for name in ("actor", "critic")}


def encode(module, params, obs: jax.Array, carry, reset: jax.Array | None = None):
    """``(features [T, B, memory_size], carry)``: a recurrent actor's or critic's
    encoder (:class:`jaxrl.networks.RecurrentActor`, ``RecurrentContinuousQ``) over ``obs
    [T, B, *obs_shape]`` (or a pytree of such leaves) entered with ``carry``, ``reset [T,
    B]`` True where step ``t`` begins an episode (None: nowhere)."""
    return module.apply(params, obs, carry, reset, method="encode")


def collect(state, policy: Callable, key: jax.Array, config):
    """``config.num_steps`` steps of ``policy(obs [N, ...], carry, key) -> (action [N,
    ...], carry)`` in every env, appended to the replay buffer. ``state`` is an
    algorithm's state with fields ``buffer`` (uniform, prioritized or sequence replay),
    ``env_state``, ``obs``, ``timesteps`` and ``carry`` (the policy's state, leaves ``[N,
    ...]``: a memory, exploration noise; ``()`` without), which is threaded through the
    steps, reset where an episode ended and, into a :mod:`jaxrl.buffers.sequence` replay,
    stored with each step as the transition field ``carry`` (the one entering the step).
    Returns the state updated and the metrics of :func:`jaxrl.rollout.episode_metrics`
    plus ``timesteps``."""
    env, env_params = make_env(config)
    store_carry = isinstance(state.buffer, sequence.SequenceState)

    def rollout_policy(obs, carry, k):
        action, next_carry = policy(obs, carry, k)
        return action, next_carry, {sequence.CARRY: carry} if store_carry else {}

    trajectory, env_state, obs, carry = rollout.collect(
        env, env_params, rollout_policy, state.env_state, state.obs, key, config.num_steps, state.carry
    )
    transitions = {
        "obs": trajectory.obs,
        "action": trajectory.action,
        "reward": trajectory.reward,
        "terminated": trajectory.terminated,
        "truncated": trajectory.truncated,
        "next_obs": trajectory.next_obs,
        **trajectory.extras,
    }
    if envs.config_spec(config).padding_steps:  # as init_buffer decided
        transitions["valid"] = trajectory.valid
    transitions = replay_lanes(transitions, config, axis=1)  # [T, N, A, ...] -> [T, N * A, ...]
    params = state.params
    if config.normalize_observations:  # every collected observation, random warm-up ones included
        observation = envs.config_spec(config).observation
        params = {**params, "obs_stats": envs.observation_stats_fold(params["obs_stats"], trajectory.obs, observation)}
    if store_carry:
        buffers = sequence
    else:
        buffers = prioritized if isinstance(state.buffer, prioritized.PrioritizedState) else replay
    state = state.replace(
        params=params,
        buffer=buffers.add_sequence(state.buffer, transitions),
        env_state=env_state,
        obs=obs,
        timesteps=state.timesteps + config.iteration_steps,
        carry=carry,
    )
    metrics = rollout.episode_metrics(trajectory)
    metrics["timesteps"] = state.timesteps
    return state, metrics


def sample(buffer, key: jax.Array, config, beta: jax.Array | None = None, team: bool = False) -> dict:
    """A batch of ``config.batch_size`` ``config.n_step``-step transitions, leaves
    ``[B, ...]``: those of :func:`jaxrl.buffers.replay.n_step` (``reward`` summed,
    ``discount = gamma ** m``, the last step's ``next_obs`` / ``terminated``) plus
    ``weight`` (importance-sampling weights with exponent ``beta`` from a prioritized
    buffer, ones from a uniform one; 0 where ``valid`` is stored and False) and
    ``index`` (where the batch came from).

    With ``team`` (lanes of :func:`replay_lanes`), each sampled lane brings every agent's
    lane of its env step (:func:`sibling_lanes`): leaves and ``index`` ``[B, A, ...]``,
    one n-step window per agent, and ``weight [B]`` the sampled lane's, 0 where no
    agent's step is valid."""
    if isinstance(buffer, prioritized.PrioritizedState):
        index, weight = prioritized.sample_index(buffer, key, config.batch_size, beta)
        buffer = buffer.replay
    else:
        index = replay.sample_index(buffer, key, config.batch_size)
        weight = jnp.ones(config.batch_size, jnp.float32)
    if team:
        index = sibling_lanes(index, buffer.num_envs // config.num_envs)
    batch = replay.n_step(buffer, index, config.n_step, config.gamma)
    if "valid" in batch:  # an env's padding step is no transition: weight 0
        weight = weight * (jnp.any(batch["valid"], axis=-1) if team else batch["valid"])
    batch.update(weight=weight, index=index)
    return batch


def nan_metrics(names) -> dict:
    """NaN scalars for metrics an iteration did not compute (warm-up, skipped updates)."""
    return {name: jnp.full((), jnp.nan, jnp.float32) for name in names}


def run_updates(state, one_update: Callable, key: jax.Array, num_updates: int):
    """``one_update(state, key, j) -> (state, metrics)`` for ``j = 0 .. num_updates - 1``
    in a scan; ``j`` is unbatched under vmap, so branches on it stay real branches.
    Returns the state and each metric's mean over the updates that computed it
    (NaN entries are skipped)."""
    state, metrics = jax.lax.scan(
        lambda state, x: one_update(state, *x), state, (jax.random.split(key, num_updates), jnp.arange(num_updates))
    )
    return state, jax.tree.map(jnp.nanmean, metrics)


class Learner(NamedTuple):
    """What makes an off-policy algorithm its own, from which its iteration, its warm-up
    and its program are built once for all of them (:meth:`step`, :meth:`warmup_step`,
    :meth:`program`).

    Attributes:
      init: ``init(key, config) -> state``.
      act: ``act(params, obs, carry, key, config, deterministic=False) -> (action,
        carry)``, the policy (evaluated deterministically).
      initial_carry: ``initial_carry(config, batch_size)``, the policy's state before an episode.
      behaviour: ``behaviour(state, config, uniform) -> (policy, metrics)``: the policy
        that collects (``policy(obs [N, ...], carry, key) -> (action, carry)``, exploring;
        with ``uniform``, the warm-up's uniformly random actions, any memory still
        advancing) and the metrics it reports (DQN's ``epsilon``).
      sample: ``sample(state, key, config) -> batch``, a batch as the learner reads it.
      learn: ``learn(state, batch, key, index, config) -> (state, metrics)``, the
        ``index``-th update of an iteration (an unbatched int32 scalar: TD3's delayed
        actor updates on every ``policy_delay``-th).
      learner_metrics: the names of ``learn``'s metrics, NaN in warm-up iterations.
    """

    init: Callable
    act: Callable
    initial_carry: Callable
    behaviour: Callable
    sample: Callable
    learn: Callable
    learner_metrics: tuple

    def step(self, state, key: jax.Array, config):
        """One iteration: ``num_steps`` steps of the behaviour policy in every env, stored
        in replay (:func:`collect`), then ``num_updates`` updates on sampled batches
        (:func:`run_updates`). Metrics: the collection's, the behaviour's, and the
        learner's averaged over the updates."""
        collect_key, update_key = jax.random.split(key)
        policy, behaviour_metrics = self.behaviour(state, config, False)
        state, metrics = collect(state, policy, collect_key, config)
        state, learner_metrics = self.updates(state, update_key, config)
        return state, {**metrics, **behaviour_metrics, **learner_metrics}

    def updates(self, state, key: jax.Array, config):
        """An iteration's ``num_updates`` updates on sampled batches (:func:`run_updates`)."""

        def one_update(state, key, index):
            sample_key, learn_key = jax.random.split(key)
            return self.learn(state, self.sample(state, sample_key, config), learn_key, index, config)

        return run_updates(state, one_update, key, config.num_updates)

    def warmup_step(self, state, key: jax.Array, config):
        """An iteration before ``learning_starts``: uniformly random actions stored in
        replay, no updates (the learner's metrics are NaN)."""
        policy, behaviour_metrics = self.behaviour(state, config, True)
        state, metrics = collect(state, policy, key, config)
        return state, {**metrics, **behaviour_metrics, **nan_metrics(self.learner_metrics)}

    def iteration(self, state, key: jax.Array, index, config):
        """Iteration ``index`` of the run: :meth:`warmup_step` for the first
        ``config.warmup_iterations``, :meth:`step` after.

        Both phases share one collection, whose policy is the warm-up's or the
        behaviour's by ``index``, so that the program holds one copy of the env and the
        replay writes rather than two (XLA compiles every copy); the updates run only
        after the warm-up. ``index`` is the scan's own counter, unbatched under vmap, so
        skipping the updates is a real branch (a one-branch loop, :func:`jaxrl.loop.run_if`:
        a ``lax.cond`` refuses host-env steps under vmap)."""
        if not config.warmup_iterations:
            return self.step(state, key, config)
        warmup = index < config.warmup_iterations
        collect_key, update_key = jax.random.split(key)
        explore, explore_metrics = self.behaviour(state, config, False)
        uniform, uniform_metrics = self.behaviour(state, config, True)
        pick = functools.partial(jax.tree.map, lambda a, b: jnp.where(warmup, a, b))

        def policy(obs, carry, k):
            return pick(uniform(obs, carry, k), explore(obs, carry, k))

        state, metrics = collect(state, policy, jnp.where(warmup, key, collect_key), config)
        state, learner_metrics = loop.run_if(
            ~warmup,
            lambda carry: self.updates(carry[0], update_key, config),
            (state, nan_metrics(self.learner_metrics)),
        )
        return state, {**metrics, **pick(uniform_metrics, explore_metrics), **learner_metrics}

    def program(self, config) -> loop.Program:
        """The :class:`jaxrl.loop.Program`: ``init``, then ``config.num_iterations``
        iterations (:meth:`iteration`), evaluated at ``config.num_evals`` points."""
        return loop.config_program(
            config,
            self.init,
            self.step,
            functools.partial(evaluation.evaluate_config, self.act, self.initial_carry),
            iteration=lambda state, key, index: self.iteration(state, key, index, config),
            resumable=not envs.steps_on_host(config.env_id),
            restart_envs=lambda state, key: rollout.restart(state, *make_env(config), key, config.num_envs),
        )

    def algorithm(self, name: str, Config: type, update: Callable, presets: dict, **details) -> Algorithm:
        """The algorithm's record: these parts with its ``Config``, ``update`` (one learner
        update from a given batch) and ``presets``; ``details``: ``summary``, ``variants``."""
        return Algorithm(
            name=name,
            Config=Config,
            init=self.init,
            act=self.act,
            initial_carry=self.initial_carry,
            update=update,
            step=self.step,
            program=self.program,
            presets=presets,
            **details,
        )


# ----------------------------------------------------------------------------- windows of an actor-critic with memory


def sample_windows(buffer: sequence.SequenceState, key: jax.Array, config) -> dict:
    """``batch_size`` windows drawn uniformly from the sequence replay (``memory`` on):
    the transition fields with leaves ``[B, L, ...]``, ``discount [B, L]`` (``gamma``)
    and ``carry``, the memories entering each window's first step (``{"actor",
    "critic"}``, leaves ``[B, ...]``)."""
    # Priorities are never updated, so every window keeps the first one: uniform replay.
    batch = sequence.sample(buffer, key, config.batch_size, jnp.zeros(()))
    discount = jnp.full(batch.data["reward"].shape, config.gamma, jnp.float32)
    return {**batch.data, "carry": batch.carry, "discount": discount}


def window_steps(batch: dict, config) -> dict:
    """A :func:`sample_windows` batch's per-step fields, time-major over the trained
    steps after the burn-in: leaves ``[L - burn_in, B, ...]``."""
    names = ("obs", "action", "reward", "discount", "terminated", "truncated", "next_obs")
    return {name: jax.tree.map(lambda x: time_major(x)[config.windows.burn_in :], batch[name]) for name in names}


def time_major(x: jax.Array) -> jax.Array:
    """``[B, L, ...] -> [L, B, ...]``."""
    return jnp.swapaxes(x, 0, 1)


def add_time(obs):
    """Observations ``[B, ...]`` (an array or a pytree) as a sequence of one step ``[1, B, ...]``."""
    return jax.tree.map(lambda x: x[None], obs)


def window_features(module, params, batch: dict, name: str, config, next_obs: bool = False):
    """A recurrent actor's or critic's encoder (``module``, the algorithm's ``make_actor`` or
    ``make_critic``) re-run over the windows of a :func:`sample_windows` batch from
    the stored memory ``batch["carry"][name]``, reset after every episode end.

    The first ``burn_in`` steps only warm the memory up, under ``stop_gradient``.
    Returns, time-major over the ``T = L - burn_in`` trained steps, ``features [T, B,
    memory_size]`` at each ``obs`` and, with ``next_obs``, the features at each step's
    ``next_obs`` from the memory after that step, before any reset (else None)."""
    obs = jax.tree.map(time_major, batch["obs"])
    reset = rollout.episode_starts(time_major(batch["terminated"] | batch["truncated"]))
    carry = batch["carry"][name]
    burn_in = config.windows.burn_in
    if burn_in > 0:
        frozen = jax.lax.stop_gradient(params)
        _, carry = encode(module, frozen, jax.tree.map(lambda x: x[:burn_in], obs), carry, reset[:burn_in])
        carry = jax.lax.stop_gradient(carry)
    obs, reset = jax.tree.map(lambda x: x[burn_in:], obs), reset[burn_in:]
    if not next_obs:
        return encode(module, params, obs, carry, reset)[0], None

    def one_step(carry, inputs):  # one step at a time: next_obs needs the memory after every step
        obs_t, next_obs_t, reset_t = inputs
        features_t, carry = encode(module, params, add_time(obs_t), carry, reset_t[None])
        next_features_t, _ = encode(module, params, add_time(next_obs_t), carry)
        return carry, (features_t[0], next_features_t[0])

    next_obs = jax.tree.map(lambda x: time_major(x)[burn_in:], batch["next_obs"])
    _, (features, next_features) = jax.lax.scan(one_step, carry, (obs, next_obs, reset))
    return features, next_features
