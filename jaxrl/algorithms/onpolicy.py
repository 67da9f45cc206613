"""What the on-policy actor-critic algorithms share (PPO, A2C, REINFORCE, IMPALA, IPPO,
MAPPO), and the builder of their iteration, program and record (:class:`Learner`).

The settings they have in common (:class:`Config`, which each algorithm's Config
extends, with :class:`SingleAgent`'s or :class:`MultiAgent`'s), the training env, the
actor-critic network (feed-forward or recurrent), acting, one rollout with the behaviour
policy's log-probabilities, values and memory, the policy re-evaluated over a stored
rollout, running observation statistics and the optimiser with optional linear annealing.

Where a policy with memory runs differently from one without (one step, a stored
rollout, its bootstrap values, PPO's minibatches), :func:`data_path` picks the
functions once, from ``memory``: :data:`FEED_FORWARD` or :data:`RECURRENT`.

``sde`` (a :class:`jaxrl.exploration.GSDE`) explores continuous actions with generalized
state-dependent exploration (gSDE, :class:`jaxrl.distributions.StateDependentNoise`):
the policy is a Gaussian whose scale depends on the actor's features, and acting adds
the noise ``z(s) @ theta`` with a matrix ``theta`` per env drawn at each episode's start
(and every ``sde.sample_freq`` steps). The matrix lives in the policy's carry beside the
memory: with ``sde`` the carry is ``{"memory": <the recurrent memory, () without>,
"sde": <the gSDE state>}``, and everything that re-runs the network over stored steps
sees the memory alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import envs, evaluation, loop, networks, prng, rollout
from jaxrl.algorithms import requirements
from jaxrl.algorithms.contract import ActorLearner, Algorithm
from jaxrl.config import (
    check_traced_parts,
    choose_part,
    freeze_mapping,
    require_choice,
    require_int,
    require_range,
    static,
)
from jaxrl.distributions import Categorical, MultiCategorical, Normal, mask_actions
from jaxrl.envs.multiagent import AGENT_ID, GLOBAL_STATE
from jaxrl.exploration import GSDE, policy_exploration
from jaxrl.networks import ActorCritic
from jaxrl.types import Trajectory

OPTIMIZERS = ("adam", "rmsprop")


@struct.dataclass
class Config:
    """What every on-policy actor-critic config holds (defaults: PureJaxRL's CartPole PPO).

    Static fields fix the program; the rest can be traced and vmapped. An algorithm's
    Config adds its own fields and defaults and one of :class:`SingleAgent` (reward
    scaling, gSDE) or :class:`MultiAgent` (a multi-agent env's agents as a batch axis).
    The class constants below are what the shared code reads of settings that only some
    Configs make fields.
    """

    multi_agent = False  # MultiAgent: the env's agents as a batch axis
    share_parameters = True  # MultiAgent's field: one network for all agents
    centralised_critic = False  # CentralisedCritic: the critic reads the global state
    scale_rewards = False  # SingleAgent's field
    sde = None  # SingleAgent's field: a jaxrl.exploration.GSDE, or None
    optimizer = "adam"  # A2C's field: "adam" or "rmsprop"
    baseline = True  # REINFORCE's field: whether a critic is learned and subtracted
    policy_lag = 0  # IMPALA's field: actors act with the params of this many updates ago

    # --- static: environment and program structure
    env_id: str = static("CartPole-v1")
    env_kwargs: Any = static(())  # EnvParams overrides, e.g. {"max_steps_in_episode": 200}
    num_envs: int = static(4)
    num_steps: Any = static(128)  # rollout length per env per iteration
    total_timesteps: int = static(500_000)
    network: Any = static("mlp")  # a shorthand or your torso: networks.resolve_torso
    hidden_sizes: tuple = static((64, 64))
    memory: str = static("none")  # "gru" or "lstm": a recurrent core after the torso
    memory_size: int = static(128)  # the recurrent core's units
    shared_memory: bool = static(True)  # one core for the policy and value heads, or one each
    activation: str = static("tanh")
    anneal_lr: bool = static(True)  # linearly to 0 over the run
    normalize_observations: bool = static(False)  # running stats kept in params
    log_std_init: float = static(0.0)  # continuous actions only: the state-independent Gaussian's
    num_evals: int = static(10)  # deterministic evaluations over the run
    eval_episodes: int = static(10)
    num_reports: int = static(50)  # `train`'s progress reports (the runner reports between chunks)
    # --- traced hyper-parameters
    learning_rate: float = 2.5e-4
    gamma: float = 0.99
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5

    def __post_init__(self):
        object.__setattr__(self, "env_kwargs", freeze_mapping(self.env_kwargs, "env_kwargs"))
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        for field in ("num_envs", "num_steps", "eval_episodes", "memory_size"):
            require_int(self, field, 1)
        require_choice(self, "memory", networks.MEMORY_KINDS)
        require_choice(self, "shared_memory", (True, False))
        for field in ("num_evals", "num_reports"):
            require_int(self, field, 0)
        require_int(self, "total_timesteps", self.num_envs * self.num_steps)
        networks.require_network(self, envs.config_spec(self), check_whole_network)
        # A padding step would carry one episode's memory into the next. An agent that has
        # left (multi-agent) is terminated at each of its invalid steps, so its memory resets.
        if self.memory != "none" and not self.multi_agent:
            requirements.require_transitions_only(self, f"memory={self.memory!r}")

    @property
    def agent_view(self) -> tuple | None:
        """How :func:`jaxrl.envs.make_config_env` views a multi-agent env: ``(agent_id,
        global_state)`` for :class:`jaxrl.envs.multiagent.AgentBatch`; None for one agent."""
        return (self.share_parameters, self.centralised_critic) if self.multi_agent else None

    @property
    def num_iterations(self) -> int:
        return self.total_timesteps // (self.num_envs * self.num_steps)

    def check_traced(self) -> None:
        """Range checks of the traced fields (skipped while tracing); run by ``init``."""
        require_range(self, "learning_rate", 0.0, float("inf"), low_open=True)
        require_range(self, "gamma", 0.0, 1.0)
        require_range(self, "max_grad_norm", 0.0, float("inf"), low_open=True)
        for field in ("ent_coef", "vf_coef"):
            require_range(self, field, 0.0, float("inf"))
        check_traced_parts(self)


@struct.dataclass
class SingleAgent:
    """The fields of a Config for one agent, mixed in before :class:`Config` (``class
    Config(SingleAgent, Config)``): reward scaling and gSDE exploration."""

    scale_rewards: bool = static(False)  # divide rewards by running return std
    sde: GSDE | None = None  # gSDE exploration (continuous actions): noise z(s) @ theta

    def __post_init__(self):
        choose_part(self, "sde", {"gsde": GSDE}, optional=True)
        super().__post_init__()
        require_choice(self, "scale_rewards", (True, False))
        if self.sde is None:
            return
        spec = envs.config_spec(self)
        if not spec.continuous:
            raise ValueError(
                f"sde (gSDE) needs a continuous (Box) action space; env_id {self.env_id!r} has "
                f"{spec.action_kind.replace('_', '-')} actions"
            )
        if self.log_std_init != 0.0:
            raise ValueError(
                f"log_std_init={self.log_std_init} sets the state-independent Gaussian, which sde replaces: "
                "leave it at 0.0 and set sde.log_std_init"
            )


@struct.dataclass
class MultiAgent:
    """The fields of a Config for several agents (IPPO, MAPPO; any on-policy algorithm:
    ``class Config(MultiAgent, a2c.Config)``), mixed in before the algorithm's: a
    multi-agent env (``jaxmarl:<id>``, ``MultiAgentClimbing-v0``) is seen through
    :class:`jaxrl.envs.multiagent.AgentBatch`, its agents a batch axis (rollouts ``[T, N,
    A, ...]``). ``share_parameters``: one network for all agents, told the agent's id;
    else one each (parameters ``[A, ...]``)."""

    multi_agent = True

    env_id: str = static("MultiAgentClimbing-v0")
    share_parameters: bool = static(True)

    def __post_init__(self):
        require_choice(self, "share_parameters", (True, False))
        super().__post_init__()
        if self.scale_rewards:
            raise ValueError("scale_rewards is not supported with several agents (rewards are per agent)")
        if self.sde is not None:
            raise ValueError("sde (gSDE) is for one agent: a multi-agent Config has none")


@struct.dataclass
class CentralisedCritic(MultiAgent):
    """:class:`MultiAgent` with a centralised critic (MAPPO): the critic reads the env's
    global state and the agent's id, the actor only the agent's own observation; with
    memory each has its own core."""

    centralised_critic = True

    shared_memory: bool = static(False)  # with memory: the critic's input differs from the actor's

    def __post_init__(self):
        super().__post_init__()
        if self.memory != "none" and self.shared_memory:
            raise ValueError(
                "a centralised critic reads other inputs than the actor, so it cannot share its memory: "
                "set shared_memory=False"
            )


@struct.dataclass
class State:
    params: dict  # {"network": flax params, "obs_stats": RunningStats}
    opt_state: Any  # the optimiser state of params["network"]
    env_state: Any  # batched env state [num_envs]
    obs: Any  # [num_envs, *obs_shape] observation to act on next ([num_envs, A, ...] with multi_agent)
    timesteps: jax.Array  # int32 env steps taken so far
    lagged_params: Any = ()  # IMPALA's policy lag: the last k params, oldest first, leaves [k, ...]
    carry: Any = ()  # the policy's state for ``obs`` (initial_carry), leaves [num_envs, ...]; () without any


def make_env(config):
    """The training env (episode statistics, action clipping, optional reward scaling);
    with ``multi_agent`` the :class:`jaxrl.envs.multiagent.AgentBatch` view, which
    reports each agent's episode statistics itself."""
    env, env_params = envs.make_config_env(config)
    env = envs.ClipAction(env) if config.multi_agent else envs.EpisodeStatistics(envs.ClipAction(env))
    if config.scale_rewards:
        env = envs.ScaleReward(env, gamma=config.gamma)
    return env, env_params


def split_observation(obs, config):
    """``(actor_obs, critic_obs)``: with a ``centralised_critic`` the actor reads
    everything but the global state and the critic the global state and the agent's id
    (:data:`jaxrl.envs.multiagent.GLOBAL_STATE`, ``AGENT_ID``); otherwise both read
    ``obs`` (``critic_obs`` is None). Works on observations and on their spec alike."""
    if not config.centralised_critic:
        return obs, None
    actor = {k: v for k, v in obs.items() if k != GLOBAL_STATE}
    return actor, {k: obs[k] for k in (GLOBAL_STATE, AGENT_ID) if k in obs}


def _layouts(observation, spec: envs.EnvSpec):
    """:attr:`jaxrl.envs.EnvSpec.obs_ndim` of a part of the spec's observation."""
    if observation is None:
        return None
    tree = jax.tree.unflatten(jax.tree.structure(spec.observation), list(jax.tree.leaves(spec.obs_ndim)))
    layouts = {k: tree[k] for k in observation} if isinstance(observation, dict) else tree
    return tuple(jax.tree.leaves(layouts)) if spec.structured else layouts


def make_network(config) -> ActorCritic:
    """The actor-critic: logits for Discrete actions, every choice's logits one after
    another (``sum(nvec)``) for MultiDiscrete ones, a Gaussian's mean and log-std for Box.
    With a ``centralised_critic`` its critic reads other inputs (:func:`split_observation`),
    through its own torso. A whole network of the user's (:class:`jaxrl.networks.Whole`)
    stands in for all of it."""
    spec = envs.config_spec(config)
    if isinstance(config.network, networks.Whole):
        return networks.user_module(config.network.network, spec)
    actor_obs, critic_obs = split_observation(spec.observation, config)
    torso = lambda obs: networks.resolve_torso(config.network, _input_spec(spec, obs))  # noqa: E731
    return ActorCritic(
        action_dim=_action_dim(spec),
        discrete=not spec.continuous,
        network=torso(actor_obs),
        critic_network=None if critic_obs is None else torso(critic_obs),
        hidden_sizes=config.hidden_sizes,
        activation=config.activation,
        obs_ndim=_layouts(actor_obs, spec),
        critic_obs_ndim=_layouts(critic_obs, spec),
        log_std_init=config.log_std_init,
        memory=config.memory,
        memory_size=config.memory_size,
        shared_memory=config.shared_memory,
        state_dependent_std=policy_exploration(config.sde).state_dependent_std,
    )


def _action_dim(spec: envs.EnvSpec) -> int:
    """The policy head's outputs: a Gaussian's dims, or every discrete choice's logits."""
    if spec.continuous:
        return spec.action_shape[0]
    return spec.num_actions if spec.discrete else sum(spec.action_nvec)


def check_whole_network(config, spec: envs.EnvSpec) -> None:
    """A whole network (:class:`jaxrl.networks.Whole`) here is called as
    :class:`~jaxrl.networks.ActorCritic` is, feed-forward, and returns its outputs."""
    sde = policy_exploration(config.sde).state_dependent_std
    networks.refuse_head_options(
        {"memory": config.memory != "none", "centralised_critic": config.centralised_critic, "sde": sde}
    )
    module = networks.user_module(config.network.network, spec)
    dims, action_dim = networks.PROBE_DIMS, _action_dim(spec)
    policy = [dims + (action_dim,)]
    if spec.continuous:
        policy = [(dims + (action_dim,), log_std) for log_std in ((action_dim,), dims + (action_dim,))]
    call = (
        f"network(obs, carry=(), reset=None, critic_obs=None) -> ({'(mean, log_std)' if spec.continuous else 'logits'}"
        f" [..., {action_dim}], value [...], carry ())"
    )
    networks.check_call(
        module, (networks.probe_batch(spec.observation), (), None, None), [(p, dims, ()) for p in policy], call
    )


def _input_spec(spec: envs.EnvSpec, observation) -> envs.EnvSpec:
    """The spec of one network's input: ``spec`` narrowed to ``observation``, a part of
    its dict observation (:func:`split_observation`), so a user's torso factory sees what
    that network reads."""
    if observation is spec.observation:
        return spec
    classes = spec.obs_classes or (0,) * len(jax.tree.leaves(spec.observation))
    tree = jax.tree.unflatten(jax.tree.structure(spec.observation), list(classes))
    kept = tuple(jax.tree.leaves({k: tree[k] for k in observation}))
    return dataclasses.replace(spec, observation=observation, obs_classes=kept if any(kept) else ())


def _agents_first(tree, layouts, to_front: bool = True):
    """Move the agent axis of each leaf (the last batch axis, before its ``layouts``
    trailing dims: a pytree of ints like ``tree``, or one int for all) to the front,
    or (``to_front=False``) from the front back."""

    def move(x, ndim):
        last_batch = x.ndim - ndim - 1
        return jnp.moveaxis(x, last_batch, 0) if to_front else jnp.moveaxis(x, 0, last_batch)

    if isinstance(layouts, int):
        return jax.tree.map(lambda x: move(x, layouts), tree)
    return jax.tree.map(move, tree, layouts)


def _leaf_ndims(obs, obs_ndim):
    """Per observation leaf, its trailing feature dims (``obs_ndim`` as networks read it)."""
    ndims = [0 if isinstance(layout, networks.OneHot) else layout for _, layout in networks.obs_leaves(obs, obs_ndim)]
    return jax.tree.unflatten(jax.tree.structure(obs), ndims)


def init_network(key: jax.Array, config):
    """The network's parameters: one set, or with ``multi_agent`` and not
    ``share_parameters`` one per agent (leaves ``[A, ...]``)."""
    spec = envs.config_spec(config)
    actor_obs, critic_obs = split_observation(spec.zeros((1, 1)), config)  # [T, B, ...]
    memory = data_path(config).initial_memory(config, 1)
    init = lambda k: make_network(config).init(k, actor_obs, memory, None, critic_obs)  # noqa: E731
    if config.multi_agent and not config.share_parameters:
        return jax.vmap(init)(jax.random.split(key, envs.config_num_agents(config)))
    return init(key)


def apply_network(network_params, obs, config, carry=(), reset=None):
    """``make_network(config).apply`` on observations ``[..., *obs]`` (normalised, if at all):
    ``(policy_out, value [...], carry)``. With one network per agent (``multi_agent``,
    not ``share_parameters``) each agent's slice of the last batch axis of ``obs``,
    ``carry`` and ``reset`` goes through its own parameters (a ``vmap``)."""
    network = make_network(config)
    actor_obs, critic_obs = split_observation(obs, config)
    if not config.multi_agent or config.share_parameters:
        return network.apply(network_params, actor_obs, carry, reset, critic_obs)
    ndims = _leaf_ndims(actor_obs, network.obs_ndim)
    critic_ndims = None if critic_obs is None else _leaf_ndims(critic_obs, network.critic_obs_ndim)
    inputs = (
        _agents_first(actor_obs, ndims),
        _agents_first(carry, 1),
        None if reset is None else _agents_first(reset, 0),
        None if critic_obs is None else _agents_first(critic_obs, critic_ndims),
    )
    policy_out, value, carry = jax.vmap(network.apply)(network_params, *inputs)
    if isinstance(policy_out, tuple):  # a Gaussian's mean [A, ..., d] and log-std [A, d]
        policy_out = (_agents_first(policy_out[0], 1, False), policy_out[1])
    else:
        policy_out = _agents_first(policy_out, 1, False)
    return policy_out, _agents_first(value, 0, False), _agents_first(carry, 1, False)


def _memory(carry, config):
    """The recurrent memory in a policy's carry: the carry itself, or with ``sde`` its
    ``"memory"`` (beside the gSDE state: :meth:`jaxrl.exploration.GSDE.split`)."""
    return policy_exploration(config.sde).split(carry)[0]


def initial_carry(config, batch_size: int):
    """The policy's state before an episode's first step, for ``batch_size`` envs, all
    zeros: the memory, leaves ``[batch_size, memory_size]`` (``[batch_size, A,
    memory_size]`` with ``multi_agent``; a dict of the actor's and the critic's without
    ``shared_memory``), ``()`` without memory. With ``sde`` a dict: that memory as
    ``"memory"`` and the gSDE state as ``"sde"`` (:meth:`jaxrl.exploration.GSDE.initial_carry`:
    the noise matrices ``[batch_size, F, A]`` and their step counters), which
    :func:`act` advances."""
    path, exploration = data_path(config), policy_exploration(config.sde)
    memory = path.initial_memory(config, batch_size)
    if config.multi_agent:
        agents = envs.config_num_agents(config)
        memory = jax.tree.map(lambda c: jnp.zeros((batch_size, agents) + c.shape[1:], c.dtype), memory)
    features = path.num_features(config) if exploration.state_dependent_std else 0  # only gSDE's noise reads them
    sde = exploration.initial_carry(batch_size, features, _action_dim(envs.config_spec(config)))
    return exploration.join(memory, sde)


def make_optimizer(config, updates_per_iteration: int) -> optax.GradientTransformation:
    """Global-norm clipping then Adam or (``optimizer="rmsprop"``, A2C) RMSProp, the
    learning rate annealed linearly to 0 over the run's ``num_iterations *
    updates_per_iteration`` updates if ``anneal_lr``."""
    num_updates = config.num_iterations * updates_per_iteration

    def learning_rate(count):
        if not config.anneal_lr:
            return config.learning_rate
        return config.learning_rate * (1.0 - jnp.minimum(count, num_updates) / num_updates)

    if config.optimizer == "adam":
        optimizer = optax.inject_hyperparams(optax.adam)(learning_rate=learning_rate, eps=1e-5)
    else:  # the A2C paper's choice
        optimizer = optax.inject_hyperparams(optax.rmsprop)(learning_rate=learning_rate, decay=0.99, eps=1e-5)
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optimizer)


def current_learning_rate(opt_state) -> jax.Array:
    """The learning rate the last update used (from :func:`make_optimizer`'s state)."""
    return opt_state[1].hyperparams["learning_rate"]


def init(key: jax.Array, config, updates_per_iteration: int) -> State:
    """Network, optimiser and ``num_envs`` freshly reset envs. Checks the traced fields
    (the Config's and its parts')."""
    network_key, env_key = jax.random.split(key)
    learner = init_learner(network_key, config, updates_per_iteration)
    actor = init_actor(env_key, config)
    return learner.replace(env_state=actor.env_state, obs=actor.obs, carry=actor.carry)


def init_learner(key: jax.Array, config, updates_per_iteration: int) -> State:
    """A learner's state without envs (``env_state``, ``obs`` and ``carry`` are ``()``):
    the network from ``key`` and its optimiser. Checks the traced fields."""
    config.check_traced()
    spec = envs.config_spec(config)
    params = {
        "network": init_network(key, config),
        "obs_stats": envs.observation_stats_init(spec.observation, spec.obs_classes),
    }
    params["network"] = policy_exploration(config.sde).initial_params(params["network"])
    return State(
        params=params,
        opt_state=make_optimizer(config, updates_per_iteration).init(params["network"]),
        env_state=(),
        obs=(),
        timesteps=jnp.zeros((), jnp.int32),
    )


def init_actor(key: jax.Array, config) -> State:
    """An actor's state: ``num_envs`` envs reset from ``key`` and the policy's initial
    carry (``params`` and ``opt_state`` are ``()``: an actor acts with params it is given)."""
    env, env_params = make_env(config)
    obs, env_state = rollout.reset(env, env_params, key, config.num_envs)
    return State(
        params=(),
        opt_state=(),
        env_state=env_state,
        obs=obs,
        timesteps=jnp.zeros((), jnp.int32),
        carry=initial_carry(config, config.num_envs),
    )


def policy_and_value(params: dict, obs: jax.Array, config, carry=(), reset=None):
    """``(distribution, value, carry)`` for raw observations.

    Feed-forward: ``obs [..., *obs_shape]`` gives a distribution and values over
    ``[...]``; ``carry`` stays ``()``. Recurrent: ``obs [T, B, *obs_shape]`` is a
    sequence entered with ``carry`` (the memory, leaves ``[B, ...]``; with ``sde``
    :func:`initial_carry`'s ``"memory"``), ``reset [T, B]`` (default none) marks the
    steps that begin an episode; outputs are ``[T, B]`` and the memory after the last
    step. Where observations carry an action mask (``obs["action_mask"]``), masked
    actions have probability 0. The distribution is a :class:`Categorical` (Discrete
    actions), a :class:`MultiCategorical` (MultiDiscrete: actions ``[..., k]``) or a
    :class:`Normal` (Box; with ``sde`` its scale depends on the state)."""
    distribution, value, carry, _ = policy_value_and_noise(params, obs, config, carry, reset)
    return distribution, value, carry


def policy_value_and_noise(params: dict, obs: jax.Array, config, carry=(), reset=None):
    """:func:`policy_and_value`'s ``(distribution, value, carry)`` and, with ``sde``,
    the :class:`jaxrl.distributions.StateDependentNoise` (features over the same leading
    dims) that gives the Normal its scale and acting its noise; None without."""
    spec = envs.config_spec(config)
    raw_obs = obs
    if config.normalize_observations:
        obs = envs.normalize_observation(params["obs_stats"], obs)
    policy_out, value, carry = apply_network(params["network"], obs, config, carry, reset)
    if spec.discrete:
        if spec.action_mask:
            policy_out = mask_actions(policy_out, raw_obs[envs.ACTION_MASK])
        return Categorical(policy_out), value, carry, None
    if spec.multi_discrete:
        return MultiCategorical(policy_out, spec.action_nvec), value, carry, None
    distribution, noise = policy_exploration(config.sde).distribution(policy_out, Normal)
    return distribution, value, carry, noise


# ----------------------------------------------------------------------------- the data path: with or without memory


def _no_memory(config, batch_size: int):
    return ()


def _recurrent_memory(config, batch_size: int):
    carry = networks.initial_carry(config.memory, config.memory_size, batch_size)
    return carry if config.shared_memory else {"actor": carry, "critic": carry}


def _feed_forward_step(params: dict, obs, memory, config):
    return policy_value_and_noise(params, obs, config)


def _recurrent_step(params: dict, obs, memory, config):
    one_step = jax.tree.map(lambda x: x[None], obs)  # a sequence of one step
    distribution, value, memory, noise = policy_value_and_noise(params, one_step, config, memory)
    distribution, value = jax.tree.map(lambda x: x[0], (distribution, value))
    return distribution, value, memory, policy_exploration(config.sde).first_step(noise)


def _feed_forward_trajectory(params: dict, trajectory: Trajectory, config):
    return policy_and_value(params, trajectory.obs, config)[:2]


def _recurrent_trajectory(params: dict, trajectory: Trajectory, config):
    carry = jax.tree.map(lambda c: c[0], trajectory.extras["carry"])
    distribution, value, _ = policy_and_value(
        params, trajectory.obs, config, carry, rollout.episode_starts(trajectory.done)
    )
    return distribution, value


def _feed_forward_bootstrap(params: dict, trajectory: Trajectory, config) -> jax.Array:
    return policy_and_value(params, trajectory.next_obs, config)[1]


def _recurrent_bootstrap(params: dict, trajectory: Trajectory, config) -> jax.Array:
    flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
    obs = jax.tree.map(lambda a, b: jnp.stack([flat(a), flat(b)]), trajectory.obs, trajectory.next_obs)
    carry = jax.tree.map(flat, trajectory.extras["carry"])
    value = policy_and_value(params, obs, config, carry)[1][1]
    return value.reshape(trajectory.reward.shape)


def _transition_rows(batch: dict, trajectory: Trajectory, sequence_length: int) -> dict:
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), batch)


def _sequence_rows(batch: dict, trajectory: Trajectory, sequence_length: int) -> dict:
    def chunks(x):  # [T, N, ...] -> [N, T / L, L, ...] -> [N * T / L, L, ...]
        x = jnp.swapaxes(x, 0, 1)
        return x.reshape((-1, sequence_length) + x.shape[2:])

    batch = jax.tree.map(chunks, {**batch, "reset": rollout.episode_starts(trajectory.done)})
    batch["carry"] = jax.tree.map(lambda c: chunks(c)[:, 0], trajectory.extras["carry"])
    return batch


def _transition_rows_policy(params: dict, rows: dict, config):
    return policy_and_value(params, rows["obs"], config)[:2]


def _sequence_rows_policy(params: dict, rows: dict, config):
    time_major = lambda x: jnp.swapaxes(x, 0, 1)  # noqa: E731
    obs = jax.tree.map(time_major, rows["obs"])
    distribution, value, _ = policy_and_value(params, obs, config, rows["carry"], time_major(rows["reset"]))
    return jax.tree.map(time_major, (distribution, value))


class DataPath(NamedTuple):
    """How the policy runs over steps: without memory each step on its own, with memory
    over sequences entered with a stored carry. :func:`data_path` picks one from the
    config's ``memory``, once; the public functions below (:func:`behaviour_step`,
    :func:`trajectory_policy_and_value`, :func:`bootstrap_value`, ...) run its entries."""

    initial_memory: Callable  # (config, batch_size) -> the memory before an episode; () without
    num_features: Callable  # (config) -> the size of the actor's last features
    policy_step: Callable  # (params, obs [B, ...], memory, config) -> (distribution, value, memory, noise)
    trajectory_policy_and_value: Callable  # (params, trajectory, config) -> (distribution, value [T, N])
    bootstrap_value: Callable  # (params, trajectory, config) -> the values of next_obs [T, N]
    minibatch_rows: Callable  # (batch, trajectory, sequence_length) -> rows: transitions or sequences
    minibatch_policy_and_value: Callable  # (params, rows, config) -> (distribution, value) shaped like the rows


FEED_FORWARD = DataPath(
    initial_memory=_no_memory,
    num_features=lambda config: networks.torso_features(make_network(config).network, config.hidden_sizes),
    policy_step=_feed_forward_step,
    trajectory_policy_and_value=_feed_forward_trajectory,
    bootstrap_value=_feed_forward_bootstrap,
    minibatch_rows=_transition_rows,
    minibatch_policy_and_value=_transition_rows_policy,
)
RECURRENT = DataPath(
    initial_memory=_recurrent_memory,
    num_features=lambda config: config.memory_size,
    policy_step=_recurrent_step,
    trajectory_policy_and_value=_recurrent_trajectory,
    bootstrap_value=_recurrent_bootstrap,
    minibatch_rows=_sequence_rows,
    minibatch_policy_and_value=_sequence_rows_policy,
)


def data_path(config) -> DataPath:
    """:data:`FEED_FORWARD` without memory (``memory="none"``), else :data:`RECURRENT`."""
    return FEED_FORWARD if config.memory == "none" else RECURRENT


def trajectory_policy_and_value(params: dict, trajectory: Trajectory, config):
    """The policy and values ``[T, N]`` of ``params`` on the trajectory's observations;
    a recurrent policy runs over each env's sequence from the carry stored at ``t = 0``
    (``extras["carry"]``), its memory reset where episodes ended."""
    return data_path(config).trajectory_policy_and_value(params, trajectory, config)


def bootstrap_value(params: dict, trajectory: Trajectory, config) -> jax.Array:
    """The critic's values ``[T, N]`` of ``next_obs`` (the final observation where an
    episode ended), with the memory the policy had after each step: the stored carry
    entering step ``t``, advanced through ``obs[t]``, then ``next_obs[t]`` (all steps
    at once, as a batch of two-step sequences)."""
    return data_path(config).bootstrap_value(params, trajectory, config)


def behaviour_step(params: dict, obs: jax.Array, carry, key: jax.Array, config, deterministic: bool = False):
    """One step of the policy at raw observations ``[B, *obs_shape]`` with ``carry``
    (:func:`initial_carry`'s, leaves ``[B, ...]``): ``(action, distribution, value [B],
    carry)``, the carry after the step. The action is sampled from the distribution, or
    with ``sde`` is its mean plus the gSDE noise of this step's matrix
    (:meth:`jaxrl.exploration.GSDE.next_matrix`), or is its mode if ``deterministic``
    (the gSDE state then stays as it was); unclipped."""
    exploration = policy_exploration(config.sde)
    memory, sde = exploration.split(carry)
    distribution, value, memory, noise = data_path(config).policy_step(params, obs, memory, config)
    action, sde = exploration.act(distribution, noise, sde, key, deterministic)
    return action, distribution, value, exploration.join(memory, sde)


def act(params: dict, obs: jax.Array, carry, key: jax.Array, config, deterministic: bool = False):
    """``(action [B, *action_shape], carry)`` (int32 ``[B]`` for Discrete actions, int32
    ``[B, k]`` for MultiDiscrete ones) for raw observations ``[B, *obs_shape]`` and the
    policy's state ``carry`` (leaves ``[B, ...]``, from :func:`initial_carry`: the
    memory, ``()`` without; with ``sde`` also the gSDE noise matrices). The caller
    resets the returned carry where an episode ends.

    Samples from the policy (with ``sde``: its mean plus the noise of the env's current
    matrix), or takes its mode if ``deterministic``; continuous actions are clipped to
    the action bounds."""
    action, _, _, carry = behaviour_step(params, obs, carry, key, config, deterministic)
    spec = envs.config_spec(config)
    if spec.continuous:
        action = jnp.clip(action, spec.action_low, spec.action_high)
    return action, carry


def behaviour_policy(params: dict, config) -> rollout.PolicyFn:
    """The rollout policy of ``params`` (:data:`jaxrl.rollout.PolicyFn`): ``(obs, carry,
    key) -> (action, carry, extras)`` with the behaviour ``log_prob`` and ``value`` and
    the memory that entered the step (``carry``) as extras."""

    def policy(obs, carry, policy_key):
        action, distribution, value, next_carry = behaviour_step(params, obs, carry, policy_key, config)
        memory = _memory(carry, config)
        return action, next_carry, {"log_prob": distribution.log_prob(action), "value": value, "carry": memory}

    return policy


def _actor_policy(params: dict, obs, carry, key: jax.Array, config, actor, num_actors: int, timesteps):
    """An actor's step (:attr:`jaxrl.algorithms.contract.ActorLearner.policy`): the
    rollout policy's (:func:`behaviour_policy`), whichever actor it is."""
    return behaviour_policy(params, config)(obs, carry, key)


def collect(state: State, params: dict, key: jax.Array, config, fresh_start: bool = False):
    """``num_steps`` steps in each of the ``num_envs`` envs, acting with ``params``.

    The trajectory's ``extras`` hold the behaviour ``log_prob`` and ``value`` ``[T, N]``
    and the memory that entered each step as ``carry`` (leaves ``[T, N, ...]``; ``()``
    without memory; with ``sde`` the carry's ``"memory"``, which is all that re-running
    the network needs). With ``fresh_start`` every env is reset first (and the memory
    with it), so each env's first episode starts at ``t = 0`` (whole-episode Monte
    Carlo). Returns ``(state, trajectory)``; the state has the envs, next observations,
    memory and ``timesteps`` advanced.
    """
    env, env_params = make_env(config)
    env_state, obs, carry = state.env_state, state.obs, state.carry
    if fresh_start:
        key, reset_key = jax.random.split(key)
        obs, env_state = rollout.reset(env, env_params, reset_key, config.num_envs)
        carry = initial_carry(config, config.num_envs)

    trajectory, env_state, obs, carry = rollout.collect(
        env, env_params, behaviour_policy(params, config), env_state, obs, key, config.num_steps, carry
    )
    state = state.replace(
        env_state=env_state,
        obs=obs,
        carry=carry,
        timesteps=state.timesteps + config.num_envs * config.num_steps,
    )
    return state, trajectory


def collect_latest(state: State, key: jax.Array, config):
    """:func:`collect`, acting with the newest params (``state.params``): the rollout of
    PPO and A2C."""
    return collect(state, state.params, key, config)


def collect_lagged(state: State, key: jax.Array, config):
    """:func:`collect`, acting with the oldest params of the lag queue
    (``state.lagged_params``: ``config.policy_lag`` updates old), or the newest without a lag."""
    behaviour = jax.tree.map(lambda x: x[0], state.lagged_params) if config.policy_lag else state.params
    return collect(state, behaviour, key, config)


def with_policy_lag(init: Callable, update: Callable) -> Learner:
    """The learner of ``init`` and ``update`` whose lock-step actors act with the params of
    ``config.policy_lag`` updates ago (:func:`collect_lagged`; IMPALA's and APPO's
    emulated lag): the state keeps the last ``policy_lag`` params (``lagged_params``,
    oldest first), and after each update the params it started from join the queue."""

    def lagged_init(key: jax.Array, config) -> State:
        state = init(key, config)
        if not config.policy_lag:
            return state
        return state.replace(lagged_params=jax.tree.map(lambda x: jnp.stack([x] * config.policy_lag), state.params))

    def lagged_update(state: State, trajectory: Trajectory, key: jax.Array, config):
        updated, metrics = update(state, trajectory, key, config)
        if not config.policy_lag:
            return updated, metrics
        queue = jax.tree.map(lambda queue, p: jnp.concatenate([queue[1:], p[None]]), state.lagged_params, state.params)
        return updated.replace(lagged_params=queue), metrics

    return Learner(lagged_init, lagged_update, collect=collect_lagged)


def shuffled_minibatches(key: jax.Array, batch, num_minibatches: int):
    """Rows of ``batch`` (a pytree of ``[B, ...]`` arrays) in one random order, split into
    ``num_minibatches`` minibatches: leaves ``[num_minibatches, B // num_minibatches, ...]``.

    The order sorts one uint32 per row: random high bits with the row index in the low
    ``ceil(log2 B)`` bits, because one integer array sorts much faster than the
    key-value pairs of ``jax.random.permutation``. Rows whose random bits tie end up
    next to each other in index order; with at least 16 random bits (B <= 65,536) that
    barely changes which rows share a minibatch. Larger batches use
    ``jax.random.permutation``.
    """
    # Through JAX's own threefry loop: XLA:CPU ran PPO slower with this draw as straight-line
    # code (jaxrl.prng; measured in benchmarks/RESULTS.md, "Compile time").
    key = prng.rolled(key)
    batch_size = jax.tree.leaves(batch)[0].shape[0]
    index_bits = max(1, (batch_size - 1).bit_length())
    if index_bits > 16:
        order = jax.random.permutation(key, batch_size)
    else:
        random_bits = jax.random.bits(key, (batch_size,), jnp.uint32) >> index_bits << index_bits
        packed = random_bits | jnp.arange(batch_size, dtype=jnp.uint32)
        order = (jnp.sort(packed) & ((1 << index_bits) - 1)).astype(jnp.int32)
    return jax.tree.map(lambda x: x[order].reshape((num_minibatches, -1) + x.shape[1:]), batch)


def update_obs_stats(state: State, trajectory: Trajectory, config) -> State:
    """Fold the trajectory's observations into the running statistics (if enabled).

    Call it after the learner update, so that the update saw the statistics the data
    was collected with."""
    if not config.normalize_observations:
        return state
    observation = envs.config_spec(config).observation  # the trailing dims of one (agent's) observation
    obs_stats = envs.observation_stats_fold(state.params["obs_stats"], trajectory.obs, observation)
    return state.replace(params={**state.params, "obs_stats": obs_stats})


def evaluate(params: dict, key: jax.Array, config) -> evaluation.EvalResult:
    """Deterministic returns of ``eval_episodes`` episodes on the (unscaled) env."""
    return evaluation.evaluate_config(act, initial_carry, params, key, config)


def program(init: Callable, step: Callable, config) -> loop.Program:
    """The :class:`jaxrl.loop.Program` of an on-policy algorithm: ``init(key, config)``,
    then ``num_iterations`` of ``step(state, key, config)``, evaluated deterministically
    at ``config.num_evals`` points."""
    return loop.config_program(
        config,
        init,
        step,
        evaluate,
        resumable=not envs.steps_on_host(config.env_id),
        restart_envs=lambda state, key: rollout.restart(state, *make_env(config), key, config.num_envs),
    )


# ----------------------------------------------------------------------------- the endings, once


class Learner(NamedTuple):
    """What makes an on-policy algorithm its own, from which its iteration, its program
    and its record are built once for all of them (:meth:`step`, :meth:`program`,
    :meth:`algorithm`); acting (:func:`act`, :func:`initial_carry`) is the family's.

    Attributes:
      init: ``init(key, config) -> State``.
      update: ``update(state, trajectory, key, config) -> (state, metrics)``, the
        learner's work on one rollout (PPO's minibatch epochs, A2C's gradient step).
      collect: ``collect(state, key, config) -> (state, trajectory)``, the iteration's
        rollout: by default :func:`collect_latest`, acting with ``state.params``.
      episode_metrics: ``episode_metrics(trajectory) -> metrics`` of the episodes an
        iteration reports: by default every one that finished
        (:func:`jaxrl.rollout.episode_metrics`).
    """

    init: Callable
    update: Callable
    collect: Callable = collect_latest
    episode_metrics: Callable = rollout.episode_metrics

    def step(self, state: State, key: jax.Array, config):
        """One iteration: :attr:`collect`, :attr:`update`, then the rollout's observations
        folded into the running statistics (:func:`update_obs_stats`). Metrics: the
        update's, the episodes' (:attr:`episode_metrics`) and ``timesteps``."""
        collect_key, update_key = jax.random.split(key)
        state, trajectory = self.collect(state, collect_key, config)
        return self.learn(state, trajectory, update_key, config)

    def learn(self, state: State, trajectory: Trajectory, key: jax.Array, config):
        """The learner's half of :meth:`step`, on a rollout it is given (a decoupled
        actor's block, :mod:`jaxrl.workflow.actor_learner`): :attr:`update`, then the
        rollout's observations folded into the running statistics. ``key``: the
        update's. Metrics: the update's, the episodes' and ``timesteps``."""
        state, metrics = self.update(state, trajectory, key, config)
        state = update_obs_stats(state, trajectory, config)
        metrics.update(self.episode_metrics(trajectory), timesteps=state.timesteps)
        return state, metrics

    def program(self, config) -> loop.Program:
        """The run as a :class:`jaxrl.loop.Program` (:func:`program` of :attr:`init` and
        :meth:`step`), for :mod:`jaxrl.workflow.runner`'s chunked training and ``train``."""
        return program(self.init, self.step, config)

    def actor_learner(self, updates_per_iteration: Callable, prepare: Callable | None = None) -> ActorLearner:
        """The parts of a run with actors apart from this learner
        (:mod:`jaxrl.workflow.actor_learner`): an actor acts with the rollout policy
        (:func:`behaviour_policy`), its block is its rollout, and the learner's iteration
        is :meth:`learn` on it. ``updates_per_iteration(config)``: the optimiser's steps
        per block (for its learning-rate schedule); ``prepare(config)``: the settings
        such a run uses (default: the config as given)."""

        def learner_init(key: jax.Array, config) -> State:
            network_key, _ = jax.random.split(key)  # init's network, from the same key
            return init_learner(network_key, config, updates_per_iteration(config))

        def learn(state: State, trajectory: Trajectory, key: jax.Array, config):
            state = state.replace(timesteps=state.timesteps + config.num_envs * config.num_steps)
            return self.learn(state, trajectory, key, config)

        return ActorLearner(
            prepare=prepare or (lambda config: config),
            learner_init=learner_init,
            published=lambda state: state.params,
            make_env=make_env,
            initial_carry=initial_carry,
            initial_tail=lambda config: (),
            policy=_actor_policy,
            finish=lambda tail, trajectory, params, key, config: (tail, trajectory),  # the rollout is the block
            learn=learn,
            block_steps=lambda config: config.num_envs * config.num_steps,
            num_iterations=lambda config: config.num_iterations,
        )

    def algorithm(self, name: str, Config: type, presets: dict, **details) -> Algorithm:
        """The algorithm's record (fields in :class:`jaxrl.algorithms.contract.Algorithm`'s
        order): these parts and the family's acting with its ``Config`` and ``presets``;
        ``details``: ``summary``, ``variants``."""
        parts = (self.init, act, initial_carry, self.update, self.step, self.program, evaluate)
        return Algorithm(name, Config, *parts, presets=presets, **details)
