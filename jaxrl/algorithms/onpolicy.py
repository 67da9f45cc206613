"""What the on-policy actor-critic algorithms share (PPO, A2C, REINFORCE, IMPALA).

The settings they have in common (:class:`Config`, which each algorithm's Config
extends), the training env, the actor-critic network (feed-forward or recurrent),
acting, one rollout with the behaviour policy's log-probabilities, values and memory,
the policy re-evaluated over a stored rollout, running observation statistics, the
optimiser with optional linear annealing, and the ``train`` scan.

``use_sde`` explores continuous actions with generalized state-dependent exploration
(gSDE, :class:`jaxrl.distributions.StateDependentNoise`): the policy is a Gaussian whose
scale depends on the actor's features, and acting adds the noise ``z(s) @ theta`` with a
matrix ``theta`` per env drawn at each episode's start (and every ``sde_sample_freq``
steps). The matrix lives in the policy's carry beside the memory: with ``use_sde`` the
carry is ``{"memory": <the recurrent memory, () without>, "sde": <the gSDE state>}``,
and everything that re-runs the network over stored steps sees the memory alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import envs, evaluation, loop, networks, rollout
from jaxrl.algorithms import requirements
from jaxrl.config import freeze_mapping, require_choice, require_int, require_network, require_range, static
from jaxrl.distributions import (
    Categorical,
    MultiCategorical,
    Normal,
    StateDependentNoise,
    mask_actions,
    sde_initial_carry,
    sde_next_matrix,
)
from jaxrl.envs.multiagent import AGENT_ID, GLOBAL_STATE
from jaxrl.networks import ActorCritic
from jaxrl.types import Trajectory

OPTIMIZERS = ("adam", "rmsprop")


@struct.dataclass
class Config:
    """What every on-policy actor-critic config holds (defaults: PureJaxRL's CartPole PPO).

    Static fields fix the program; the rest can be traced and vmapped. Algorithms extend
    it with their own fields and defaults (``ppo.Config``, ``a2c.Config``).
    """

    # --- static: environment and program structure
    env_id: str = static("CartPole-v1")
    env_kwargs: Any = static(())  # EnvParams overrides, e.g. {"max_steps_in_episode": 200}
    num_envs: int = static(4)
    num_steps: Any = static(128)  # rollout length per env per iteration
    total_timesteps: int = static(500_000)
    network: str = static("mlp")  # "mlp" or "cnn" (MinAtar)
    hidden_sizes: tuple = static((64, 64))
    memory: str = static("none")  # "gru" or "lstm": a recurrent core after the torso
    memory_size: int = static(128)  # the recurrent core's units
    shared_memory: bool = static(True)  # one core for the policy and value heads, or one each
    activation: str = static("tanh")
    optimizer: str = static("adam")  # "adam" or "rmsprop"
    anneal_lr: bool = static(True)  # linearly to 0 over the run
    normalize_advantages: bool = static(True)
    normalize_observations: bool = static(False)  # running stats kept in params
    scale_rewards: bool = static(False)  # divide rewards by running return std
    log_std_init: float = static(0.0)  # continuous actions only: the state-independent Gaussian's
    use_sde: bool = static(False)  # gSDE exploration (continuous actions): noise z(s) @ theta
    sde_sample_freq: int = static(0)  # with use_sde: steps between draws of theta; 0: once per episode
    # --- static: several agents (IPPO / MAPPO; see jaxrl.envs.multiagent.AgentBatch)
    multi_agent: bool = static(False)  # a multi-agent env's agents as a batch axis
    share_parameters: bool = static(True)  # one network for all agents, told the agent's id; else one each
    centralised_critic: bool = static(False)  # the critic reads the global state, not the agent's observation
    num_evals: int = static(10)  # deterministic evaluations over the run
    eval_episodes: int = static(10)
    num_reports: int = static(50)  # `train`'s progress reports (the runner reports between chunks)
    # --- traced hyper-parameters
    learning_rate: float = 2.5e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    # With use_sde: the initial log-std of theta's entries, Stable-Baselines3's gSDE default: the
    # std in each action dimension starts at exp(-2) ||z(s)||, at most exp(-2) sqrt(F) for tanh features.
    sde_log_std_init: float = -2.0

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
        require_choice(self, "optimizer", OPTIMIZERS)
        self.check_agents()
        self.check_sde()
        require_network(self, envs.config_spec(self).obs_ndim)
        # A padding step would carry one episode's memory into the next. An agent that has
        # left (multi-agent) is terminated at each of its invalid steps, so its memory resets.
        if self.memory != "none" and not self.multi_agent:
            requirements.require_transitions_only(self, f"memory={self.memory!r}")

    def check_agents(self) -> None:
        """ValueErrors for multi-agent settings that cannot work."""
        for field in ("multi_agent", "share_parameters", "centralised_critic"):
            require_choice(self, field, (True, False))
        if not self.multi_agent:
            for field, default in (("share_parameters", True), ("centralised_critic", False)):
                value = getattr(self, field)
                if value != default:
                    raise ValueError(f"{field}={value} applies to multi-agent training (multi_agent=True)")
            return
        if self.scale_rewards:
            raise ValueError("scale_rewards is not supported with multi_agent=True (rewards are per agent)")
        if self.centralised_critic and self.memory != "none" and self.shared_memory:
            raise ValueError(
                "a centralised critic reads other inputs than the actor, so it cannot share its memory: "
                "set shared_memory=False"
            )

    def check_sde(self) -> None:
        """ValueErrors for gSDE settings that cannot work."""
        require_choice(self, "use_sde", (True, False))
        require_int(self, "sde_sample_freq", 0)
        if not self.use_sde:
            if self.sde_sample_freq != 0:
                raise ValueError(f"sde_sample_freq={self.sde_sample_freq} applies with use_sde=True")
            return
        if self.multi_agent:
            raise ValueError("use_sde=True is for one agent: multi_agent=True has no gSDE")
        spec = envs.config_spec(self)
        if not spec.continuous:
            raise ValueError(
                f"use_sde=True needs a continuous (Box) action space; env_id {self.env_id!r} has "
                f"{spec.action_kind.replace('_', '-')} actions"
            )
        if self.log_std_init != 0.0:
            raise ValueError(
                f"log_std_init={self.log_std_init} sets the state-independent Gaussian, which use_sde=True "
                "replaces: leave it at 0.0 and set sde_log_std_init"
            )

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
        require_range(self, "gae_lambda", 0.0, 1.0)
        require_range(self, "max_grad_norm", 0.0, float("inf"), low_open=True)
        for field in ("ent_coef", "vf_coef"):
            require_range(self, field, 0.0, float("inf"))
        require_range(self, "sde_log_std_init", -float("inf"), float("inf"))


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
    With a ``centralised_critic`` its critic reads other inputs (:func:`split_observation`)."""
    spec = envs.config_spec(config)
    actor_obs, critic_obs = split_observation(spec.observation, config)
    if spec.continuous:
        action_dim = spec.action_shape[0]
    else:
        action_dim = spec.num_actions if spec.discrete else sum(spec.action_nvec)
    return ActorCritic(
        action_dim=action_dim,
        discrete=not spec.continuous,
        network=config.network,
        hidden_sizes=config.hidden_sizes,
        activation=config.activation,
        obs_ndim=_layouts(actor_obs, spec),
        critic_obs_ndim=_layouts(critic_obs, spec),
        log_std_init=config.log_std_init,
        memory=config.memory,
        memory_size=config.memory_size,
        shared_memory=config.shared_memory,
        state_dependent_std=config.use_sde,
    )


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
    init = lambda k: make_network(config).init(k, actor_obs, _core_carry(config, 1), None, critic_obs)  # noqa: E731
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


def _core_carry(config, batch_size: int):
    carry = networks.initial_carry(config.memory, config.memory_size, batch_size)
    if config.memory == "none" or config.shared_memory:
        return carry
    return {"actor": carry, "critic": carry}


def initial_carry(config, batch_size: int):
    """The policy's state before an episode's first step, for ``batch_size`` envs, all
    zeros: the memory, leaves ``[batch_size, memory_size]`` (``[batch_size, A,
    memory_size]`` with ``multi_agent``; a dict of the actor's and the critic's without
    ``shared_memory``), ``()`` without memory. With ``use_sde`` a dict: that memory as
    ``"memory"`` and the gSDE state as ``"sde"``
    (:func:`jaxrl.distributions.sde_initial_carry`: the noise matrices ``[batch_size,
    F, A]`` and their step counters), which :func:`act` advances."""
    carry = _core_carry(config, batch_size)
    if config.use_sde:
        num_features = config.hidden_sizes[-1] if config.memory == "none" else config.memory_size
        action_dim = envs.config_spec(config).action_shape[0]
        return {"memory": carry, "sde": sde_initial_carry(batch_size, num_features, action_dim)}
    if not config.multi_agent:
        return carry
    agents = envs.config_num_agents(config)
    return jax.tree.map(lambda c: jnp.zeros((batch_size, agents) + c.shape[1:], c.dtype), carry)


def make_optimizer(config, updates_per_iteration: int) -> optax.GradientTransformation:
    """Global-norm clipping then Adam or RMSProp, the learning rate annealed linearly to 0
    over the run's ``num_iterations * updates_per_iteration`` updates if ``anneal_lr``."""
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


def init(key: jax.Array, config, updates_per_iteration: int, policy_lag: int = 0) -> State:
    """Network, optimiser, ``num_envs`` freshly reset envs and, for a ``policy_lag`` of
    k > 0, k copies of the initial params to act with. Checks the traced fields."""
    config.check_traced()
    env, env_params = make_env(config)
    spec = envs.config_spec(config)
    network_key, env_key = jax.random.split(key)
    params = {
        "network": init_network(network_key, config),
        "obs_stats": envs.observation_stats_init(spec.observation, spec.obs_classes),
    }
    if config.use_sde:
        params["network"] = networks.fill_param(params["network"], networks.SDE_LOG_STD, config.sde_log_std_init)
    obs, env_state = rollout.reset(env, env_params, env_key, config.num_envs)
    lagged = jax.tree.map(lambda x: jnp.stack([x] * policy_lag), params) if policy_lag else ()
    return State(
        params=params,
        opt_state=make_optimizer(config, updates_per_iteration).init(params["network"]),
        env_state=env_state,
        obs=obs,
        timesteps=jnp.zeros((), jnp.int32),
        lagged_params=lagged,
        carry=initial_carry(config, config.num_envs),
    )


def policy_and_value(params: dict, obs: jax.Array, config, carry=(), reset=None):
    """``(distribution, value, carry)`` for raw observations.

    Feed-forward: ``obs [..., *obs_shape]`` gives a distribution and values over
    ``[...]``; ``carry`` stays ``()``. Recurrent: ``obs [T, B, *obs_shape]`` is a
    sequence entered with ``carry`` (the memory, leaves ``[B, ...]``; with ``use_sde``
    :func:`initial_carry`'s ``"memory"``), ``reset [T, B]`` (default none) marks the
    steps that begin an episode; outputs are ``[T, B]`` and the memory after the last
    step. Where observations carry an action mask (``obs["action_mask"]``), masked
    actions have probability 0. The distribution is a :class:`Categorical` (Discrete
    actions), a :class:`MultiCategorical` (MultiDiscrete: actions ``[..., k]``) or a
    :class:`Normal` (Box; with ``use_sde`` its scale depends on the state)."""
    distribution, value, carry, _ = policy_value_and_noise(params, obs, config, carry, reset)
    return distribution, value, carry


def policy_value_and_noise(params: dict, obs: jax.Array, config, carry=(), reset=None):
    """:func:`policy_and_value`'s ``(distribution, value, carry)`` and, with ``use_sde``,
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
    if config.use_sde:
        mean, features, sde_log_std = policy_out
        noise = StateDependentNoise(features, sde_log_std)
        return Normal(mean, noise.scale()), value, carry, noise
    mean, log_std = policy_out
    return Normal(mean, jnp.broadcast_to(jnp.exp(log_std), mean.shape)), value, carry, None


def trajectory_policy_and_value(params: dict, trajectory: Trajectory, config):
    """The policy and values ``[T, N]`` of ``params`` on the trajectory's observations;
    a recurrent policy runs over each env's sequence from the carry stored at ``t = 0``
    (``extras["carry"]``), its memory reset where episodes ended."""
    if config.memory == "none":
        return policy_and_value(params, trajectory.obs, config)[:2]
    carry = jax.tree.map(lambda c: c[0], trajectory.extras["carry"])
    distribution, value, _ = policy_and_value(
        params, trajectory.obs, config, carry, rollout.episode_starts(trajectory.done)
    )
    return distribution, value


def bootstrap_value(params: dict, trajectory: Trajectory, config) -> jax.Array:
    """The critic's values ``[T, N]`` of ``next_obs`` (the final observation where an
    episode ended), with the memory the policy had after each step: the stored carry
    entering step ``t``, advanced through ``obs[t]``, then ``next_obs[t]`` (all steps
    at once, as a batch of two-step sequences)."""
    if config.memory == "none":
        return policy_and_value(params, trajectory.next_obs, config)[1]
    flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
    obs = jax.tree.map(lambda a, b: jnp.stack([flat(a), flat(b)]), trajectory.obs, trajectory.next_obs)
    carry = jax.tree.map(flat, trajectory.extras["carry"])
    value = policy_and_value(params, obs, config, carry)[1][1]
    return value.reshape(trajectory.reward.shape)


def behaviour_step(params: dict, obs: jax.Array, carry, key: jax.Array, config, deterministic: bool = False):
    """One step of the policy at raw observations ``[B, *obs_shape]`` with ``carry``
    (:func:`initial_carry`'s, leaves ``[B, ...]``): ``(action, distribution, value [B],
    carry)``, the carry after the step. The action is sampled from the distribution, or
    with ``use_sde`` is its mean plus the gSDE noise of this step's matrix
    (:func:`jaxrl.distributions.sde_next_matrix`), or is its mode if ``deterministic``
    (the gSDE state then stays as it was); unclipped."""
    memory = carry["memory"] if config.use_sde else carry
    if config.memory == "none":
        distribution, value, memory, noise = policy_value_and_noise(params, obs, config)
    else:  # a sequence of one step
        one_step = jax.tree.map(lambda x: x[None], obs)
        distribution, value, memory, noise = policy_value_and_noise(params, one_step, config, memory)
        distribution, value = jax.tree.map(lambda x: x[0], (distribution, value))
        noise = None if noise is None else noise.replace(features=noise.features[0])
    if not config.use_sde:
        action = distribution.mode() if deterministic else distribution.sample(key)
        return action, distribution, value, memory
    sde = carry["sde"]
    if deterministic:
        action = distribution.mode()
    else:
        matrix, sde = sde_next_matrix(sde, key, config.sde_sample_freq)
        action = distribution.loc + noise.noise(matrix)
    return action, distribution, value, {"memory": memory, "sde": sde}


def act(params: dict, obs: jax.Array, carry, key: jax.Array, config, deterministic: bool = False):
    """``(action [B, *action_shape], carry)`` (int32 ``[B]`` for Discrete actions, int32
    ``[B, k]`` for MultiDiscrete ones) for raw observations ``[B, *obs_shape]`` and the
    policy's state ``carry`` (leaves ``[B, ...]``, from :func:`initial_carry`: the
    memory, ``()`` without; with ``use_sde`` also the gSDE noise matrices). The caller
    resets the returned carry where an episode ends.

    Samples from the policy (with ``use_sde``: its mean plus the noise of the env's
    current matrix), or takes its mode if ``deterministic``; continuous actions are
    clipped to the action bounds."""
    action, _, _, carry = behaviour_step(params, obs, carry, key, config, deterministic)
    spec = envs.config_spec(config)
    if spec.continuous:
        action = jnp.clip(action, spec.action_low, spec.action_high)
    return action, carry


def collect(state: State, params: dict, key: jax.Array, config, fresh_start: bool = False):
    """``num_steps`` steps in each of the ``num_envs`` envs, acting with ``params``.

    The trajectory's ``extras`` hold the behaviour ``log_prob`` and ``value`` ``[T, N]``
    and the memory that entered each step as ``carry`` (leaves ``[T, N, ...]``; ``()``
    without memory; with ``use_sde`` the carry's ``"memory"``, which is all that
    re-running the network needs). With ``fresh_start`` every env is reset first (and the memory with it), so
    each env's first episode starts at ``t = 0`` (whole-episode Monte Carlo). Returns
    ``(state, trajectory)``; the state has the envs, next observations, memory and
    ``timesteps`` advanced.
    """
    env, env_params = make_env(config)
    env_state, obs, carry = state.env_state, state.obs, state.carry
    if fresh_start:
        key, reset_key = jax.random.split(key)
        obs, env_state = rollout.reset(env, env_params, reset_key, config.num_envs)
        carry = initial_carry(config, config.num_envs)

    def policy(obs, carry, policy_key):
        action, distribution, value, next_carry = behaviour_step(params, obs, carry, policy_key, config)
        memory = carry["memory"] if config.use_sde else carry
        return action, next_carry, {"log_prob": distribution.log_prob(action), "value": value, "carry": memory}

    trajectory, env_state, obs, carry = rollout.collect(
        env, env_params, policy, env_state, obs, key, config.num_steps, carry
    )
    state = state.replace(
        env_state=env_state,
        obs=obs,
        carry=carry,
        timesteps=state.timesteps + config.num_envs * config.num_steps,
    )
    return state, trajectory


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
    return loop.Program(
        init=lambda key, inputs: init(key, config),
        iteration=lambda state, key, index: step(state, key, config),
        evaluate=lambda params, key: evaluate(params, key, config),
        num_iterations=config.num_iterations,
        num_evals=config.num_evals,
        num_reports=config.num_reports,
        budget=config.total_timesteps,
        resumable=not envs.steps_on_host(config.env_id),
        restart_envs=lambda state, key: rollout.restart(state, *make_env(config), key, config.num_envs),
    )
