"""Deep Q-Networks (Mnih et al., 2015) with the Rainbow extensions (Hessel et al., 2018),
composed from parts, and the pieces the rest of the family is built from.

Each iteration collects ``num_steps`` steps from each of ``num_envs`` envs with the
exploring policy, appends them to a device replay buffer and runs ``num_updates``
gradient updates on sampled batches; the replay ratio is
``num_updates * batch_size / (num_envs * num_steps)`` samples per env step. The first
``learning_starts`` steps act uniformly at random and do not update.

A Config composes three parts, each chosen once when the program is traced:

* ``head`` (:mod:`jaxrl.value_heads`): what the network outputs per action and the TD
  loss on it: :class:`~jaxrl.value_heads.Scalar` (Huber or squared),
  :class:`~jaxrl.value_heads.Rescaled` (R2D2's ``h(Q)``),
  :class:`~jaxrl.value_heads.Categorical` (C51, Bellemare et al., 2017),
  :class:`~jaxrl.value_heads.Quantile` (QR-DQN, Dabney et al., 2017) or
  :class:`~jaxrl.value_heads.ImplicitQuantile` (IQN, Dabney et al., 2018: the network
  takes quantile fractions, which the head draws: ``acting_fractions`` /
  ``learning_fractions``);
* ``exploration`` (:mod:`jaxrl.exploration`): :class:`~jaxrl.exploration.EpsilonGreedy`,
  :class:`~jaxrl.exploration.ApeXEpsilons` (Ape-X's per-actor epsilons, Horgan et al.,
  2018) or :class:`~jaxrl.exploration.NoisyNets` (Fortunato et al., 2018);
* ``prioritized``: :class:`~jaxrl.buffers.prioritized.Prioritized` replay (Schaul et
  al., 2016), or None for uniform replay;

and the switches ``double`` (van Hasselt et al., 2016), ``dueling`` (Wang et al., 2016)
and ``n_step``. ``rainbow(env_id)`` turns them all on; ``qr_dqn(env_id)`` and
``iqn(env_id)`` are DQN's defaults with a quantile head.

The family shares these pieces: :mod:`jaxrl.algorithms.r2d2` (a recurrent Q-network
learning from prioritized sequence replay) and :mod:`jaxrl.algorithms.value_decomposition`
(IQL and VDN: the agents of a multi-agent env as replay lanes). ::

    config = dqn.Config(env_id="CartPole-v1")
    out = jax.jit(dqn.train)(jax.random.key(0), config)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import envs, networks, optim, rollout, value_heads
from jaxrl.algorithms import offpolicy, requirements
from jaxrl.buffers.prioritized import Prioritized, Uniform, replay_priorities
from jaxrl.config import (
    check_traced_parts,
    choose_part,
    freeze_mapping,
    require_int,
    require_range,
    static,
)
from jaxrl.distributions import mask_actions
from jaxrl.exploration import ApeXEpsilons, EpsilonGreedy, NoisyNets
from jaxrl.networks import QNetwork, resolve_torso

LEARNER_METRICS = ("loss", "q_mean", "td_abs")
EXPLORATIONS = {"epsilon_greedy": EpsilonGreedy, "apex": ApeXEpsilons, "noisy": NoisyNets}


@struct.dataclass
class QLearningConfig(offpolicy.ReplaySchedule):
    """The settings every Q-learner of the family reads (DQN, R2D2, IQL, VDN); each
    algorithm's ``Config`` adds its own. Static fields fix the program; the rest, the
    parts' numbers included, can be traced and vmapped."""

    # --- static: environment and program structure
    env_id: str = static("CartPole-v1")
    env_kwargs: Any = static(())  # EnvParams overrides
    num_envs: int = static(8)
    num_steps: int = static(8)  # env steps per env per iteration
    num_updates: int = static(8)  # gradient updates per iteration
    batch_size: int = static(128)
    buffer_size: int = static(50_000)  # transitions (rounded up to a multiple of num_envs)
    learning_starts: int = static(2_000)  # random-action steps before the first update
    total_timesteps: int = static(100_000)
    network: Any = static("mlp")  # a shorthand or your torso: networks.resolve_torso
    hidden_sizes: tuple = static((128, 128))
    activation: str = static("relu")
    target_update_period: int = static(100)  # updates between target refreshes
    double: bool = static(True)  # the online network picks the next action, the target evaluates it
    dueling: bool = static(True)  # a state value plus mean-centred advantages
    n_step: int = static(3)
    anneal_lr: bool = static(False)  # linearly to 0 over the updates
    normalize_observations: bool = static(False)  # running stats in params; replay keeps raw observations
    num_evals: int = static(10)
    eval_episodes: int = static(10)
    num_reports: int = static(50)
    # --- parts (jaxrl.config.part): the class fixes the program, the numbers are traced
    head: Any = value_heads.Scalar()  # Scalar, Rescaled, Categorical (C51), Quantile (QR-DQN), ImplicitQuantile (IQN)
    exploration: Any = EpsilonGreedy()  # EpsilonGreedy, ApeXEpsilons or NoisyNets; "epsilon_greedy", "apex", "noisy"
    prioritized: Any = Prioritized()  # prioritized replay's settings, or None (uniform); True / False
    # --- traced hyper-parameters
    learning_rate: float = 1e-3
    gamma: float = 0.99
    max_grad_norm: float = 10.0

    heads = value_heads.HEADS  # what ``head`` takes
    prioritized_part = Prioritized  # what ``prioritized`` takes (R2D2's sequence priorities add eta)
    uniform_part = Uniform  # how replay samples with prioritized=None (replay_part)

    def __post_init__(self):
        object.__setattr__(self, "env_kwargs", freeze_mapping(self.env_kwargs, "env_kwargs"))
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        choose_part(self, "head", self.heads)
        choose_part(self, "exploration", EXPLORATIONS)
        choose_part(self, "prioritized", {"prioritized": self.prioritized_part}, optional=True)
        self.check_schedule()
        offpolicy.check_normalization(self)
        require_int(self, "target_update_period", 1)
        spec = env_spec(self)
        requirements.refuse_multi_discrete(spec, self.env_id, "dqn")
        if not spec.discrete:
            raise ValueError(
                f"DQN needs a discrete action space; env_id {self.env_id!r} has a continuous (Box) "
                f"action space of shape {spec.action_shape} (use SAC, TD3 or DDPG)"
            )
        networks.require_network(self, spec, check_whole_network)

    def check_traced(self) -> None:
        """ValueErrors for traced hyper-parameters out of range (skipped while tracing)."""
        require_range(self, "learning_rate", 0.0, float("inf"), low_open=True)
        require_range(self, "max_grad_norm", 0.0, float("inf"), low_open=True)
        require_range(self, "gamma", 0.0, 1.0)
        check_traced_parts(self)


@struct.dataclass
class Config(QLearningConfig):
    """DQN settings (see :class:`QLearningConfig` for the shared ones).

    The defaults solve CartPole-v1 in 100k steps. They turn on double Q-learning,
    the dueling head, 3-step returns and prioritized replay (uniform-replay DQN forgets
    how to recover from rare failures once it balances, and collapses on CartPole);
    ``double=False, dueling=False, n_step=1, prioritized=None`` is the DQN of Mnih et
    al. ``rainbow(env_id)`` adds C51 and noisy nets.
    """

    scale_rewards: bool = static(False)  # divide rewards by the running std of the discounted return
    replay_obs_dtype: Any = static(None)  # "uint8" / "bool": replay keeps 0/1 or 8-bit observations compact
    tau: float = 1.0  # target <- tau * online + (1 - tau) * target every target_update_period; 1: a copy

    def __post_init__(self):
        super().__post_init__()
        offpolicy.check_replay_obs_dtype(self)

    def check_traced(self) -> None:
        super().check_traced()
        require_range(self, "tau", 0.0, 1.0, low_open=True)


# The MinAtar paper's DQN (Young & Tian, 2019): its CNN (one 3x3 convolution of 16
# filters, 128 units), batches of 32, one update per env step, replay of 100k, the
# target copied every 1,000 updates, epsilon 1 -> 0.1 over the first 100k steps,
# training from 5k steps; Adam where the paper has RMSProp. 500k steps, a tenth of the
# paper's, so that 4 seeds train on a 2-core CPU (benchmarks/RESULTS.md, "Pixels").
MINATAR = dict(
    network="cnn",
    hidden_sizes=(128,),
    num_envs=16,
    num_steps=1,
    num_updates=16,
    batch_size=32,
    buffer_size=100_000,
    learning_starts=5_000,
    target_update_period=1_000,
    learning_rate=2.5e-4,
    double=False,
    dueling=False,
    n_step=1,
    prioritized=None,
    total_timesteps=500_000,
    exploration=EpsilonGreedy(start=1.0, end=0.1, fraction=100_000 / 500_000),
    replay_obs_dtype="bool",  # MinAtar's grids are 0/1: a quarter of the memory, a cheaper sample
)
PRESETS = {
    # The defaults with the learning rate annealed to 0: at a constant rate some seeds
    # fall from 500 late in the run (benchmarks/RESULTS.md, "Presets on a fresh seed").
    "CartPole-v1": dict(anneal_lr=True),
    **{f"{game}-MinAtar": MINATAR for game in ("Asterix", "Breakout", "Freeway", "SpaceInvaders")},
    # rl-baselines3-zoo's DQN for MountainCar-v0 (hyperparams/dqn.yml: 256x256 layers,
    # learning rate 4e-3, batches of 128 from 10k transitions, 8 updates per 16 steps,
    # the target copied every 600 steps, epsilon to 0.07 over a fifth of the run) with
    # observation normalisation, gamma 0.99 and 8-step targets, found by a hand sweep from
    # there (benchmarks/RESULTS.md's learning table), at gymnax-blines' 250k-step budget.
    "MountainCar-v0": dict(
        normalize_observations=True,
        num_envs=4,
        num_steps=4,
        num_updates=8,
        batch_size=128,
        buffer_size=10_000,
        learning_starts=1_000,
        total_timesteps=250_000,
        hidden_sizes=(256, 256),
        learning_rate=4e-3,
        gamma=0.99,
        n_step=8,
        target_update_period=300,
        exploration=EpsilonGreedy(fraction=0.2, end=0.07),
    ),
}

RAINBOW = dict(
    double=True,
    dueling=True,
    n_step=3,
    prioritized=Prioritized(),
    head=value_heads.Categorical(),
    exploration=NoisyNets(),  # the noise explores: no random actions
)


# QR-DQN (Dabney et al., 2017) and IQN (Dabney et al., 2018) as DQN's defaults (double,
# dueling, 3-step, prioritized, epsilon-greedy) with their heads at their defaults.
QR_DQN = dict(head=value_heads.Quantile())
IQN = dict(head=value_heads.ImplicitQuantile())


def rainbow(env_id: str = "CartPole-v1", **overrides) -> Config:
    """The Rainbow preset: every extension on (double, dueling, 3-step, prioritized, C51,
    noisy nets), on top of ``preset(env_id)``."""
    return algorithm.preset(env_id, **{**RAINBOW, **overrides})


def qr_dqn(env_id: str = "CartPole-v1", **overrides) -> Config:
    """QR-DQN: ``preset(env_id)`` with the :class:`~jaxrl.value_heads.Quantile` head."""
    return algorithm.preset(env_id, **{**QR_DQN, **overrides})


def iqn(env_id: str = "CartPole-v1", **overrides) -> Config:
    """IQN: ``preset(env_id)`` with the :class:`~jaxrl.value_heads.ImplicitQuantile` head."""
    return algorithm.preset(env_id, **{**IQN, **overrides})


def r2d2(env_id: str = "CartPole-v1", **overrides):
    """Deprecated: R2D2 is its own algorithm; use ``jaxrl.algorithms.r2d2.preset(env_id,
    **overrides)`` (``python -m jaxrl train r2d2``)."""
    warnings.warn(
        "dqn.r2d2(env_id) is deprecated: use jaxrl.algorithms.r2d2.preset(env_id, ...) "
        "(on the command line: python -m jaxrl train r2d2)",
        DeprecationWarning,
        stacklevel=2,
    )
    from jaxrl import algorithms

    return algorithms.get("r2d2").preset(env_id, **overrides)


@struct.dataclass
class State:
    params: dict  # {"network": flax params, "obs_stats" with normalize_observations}: all ``act`` needs
    target_params: dict  # the target network's flax params
    opt_state: Any
    buffer: Any  # replay.ReplayState, prioritized.PrioritizedState or sequence.SequenceState (R2D2)
    env_state: Any  # batched env state [num_envs]
    obs: Any  # [num_envs, *obs_shape] ([num_envs, A, *obs_shape] with agents)
    timesteps: jax.Array  # int32 env steps so far
    updates: jax.Array  # int32 gradient updates so far
    carry: Any = ()  # the actors' memory for ``obs``, leaves [num_envs, ...]; () without memory


# ----------------------------------------------------------------------------- set-up


def env_spec(config: QLearningConfig) -> envs.EnvSpec:
    return envs.config_spec(config)


def replay_part(config: QLearningConfig) -> Prioritized | Uniform:
    """How replay samples: the ``prioritized`` part, or with ``prioritized=None`` the
    Config's ``uniform_part`` (:func:`jaxrl.buffers.prioritized.replay_priorities`)."""
    return replay_priorities(config.prioritized, config.uniform_part)


def check_whole_network(config: QLearningConfig, spec) -> None:
    """A whole Q-network (:class:`jaxrl.networks.Whole`) is called ``network(obs) -> q``,
    feed-forward, its own head: ``[..., A]`` values, or ``[..., A, outputs]`` for a
    distributional ``head``; not for a head that gives the network an input (IQN's
    fractions)."""
    if config.head.network_settings():
        raise ValueError(
            f"network: a whole network (jaxrl.networks.Whole) is called network(obs) -> q and cannot take the "
            f"quantile fractions taus that head={type(config.head).__name__} feeds the network; give a torso "
            "(network=...) and jaxrl builds IQN's embedding and heads, or use head=Quantile (QR-DQN)"
        )
    noisy = bool(config.exploration.network_settings())
    memory = getattr(config, "memory", "none") != "none"  # R2D2's
    networks.refuse_head_options({"memory": memory, "dueling": config.dueling, "noisy exploration": noisy})
    module = networks.user_module(config.network.network, spec)
    shape = networks.PROBE_DIMS + (spec.num_actions,) + ((config.head.outputs,) if config.head.outputs > 1 else ())
    outputs = f"[..., {spec.num_actions}" + (f", {config.head.outputs}]" if config.head.outputs > 1 else "]")
    networks.check_call(module, (networks.probe_batch(spec.observation),), [shape], f"network(obs) -> q {outputs}")


def make_network(config: QLearningConfig, memory: str = "none", memory_size: int = 128) -> QNetwork:
    """The Q-network: ``head.outputs`` per action, dueling and (by the ``exploration``
    part's :meth:`~jaxrl.exploration.NoisyNets.network_settings`) noisy as configured,
    with the ``head``'s settings (IQN's quantile embedding); a recurrent core of
    ``memory_size`` units after the torso with ``memory`` (R2D2's)."""
    spec = env_spec(config)
    if isinstance(config.network, networks.Whole):
        return networks.WholeQ(networks.user_module(config.network.network, spec))
    return QNetwork(
        num_actions=spec.num_actions,
        network=resolve_torso(config.network, spec),
        hidden_sizes=config.hidden_sizes,
        activation=config.activation,
        obs_ndim=spec.obs_ndim,
        dueling=config.dueling,
        num_atoms=config.head.outputs,
        memory=memory,
        memory_size=memory_size,
        **config.exploration.network_settings(),
        **config.head.network_settings(),
    )


def network_inputs(taus: jax.Array | None) -> dict:
    """The network call's extra inputs: ``{"taus": taus}`` for a head that draws
    quantile fractions (:meth:`jaxrl.value_heads.ImplicitQuantile.acting_fractions`),
    none for the others (``taus`` None)."""
    return {} if taus is None else {"taus": taus}


def init_network(config: QLearningConfig, rngs, obs, **recurrent):
    """The Q-network's initial params from ``rngs`` on observations ``obs``, with the
    ``head``'s deterministic acting fractions where it draws any."""
    _, taus = config.head.acting_fractions(None)
    return make_network(config).init(rngs, obs, **recurrent, **network_inputs(taus))


def make_optimizer(config: QLearningConfig) -> optax.GradientTransformation:
    num_updates = max((config.num_iterations - config.warmup_iterations) * config.num_updates, 1)

    def learning_rate(count):
        if not config.anneal_lr:
            return config.learning_rate
        return config.learning_rate * (1.0 - jnp.minimum(count, num_updates) / num_updates)

    return optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm),
        optax.inject_hyperparams(optax.adam)(learning_rate=learning_rate),
    )


def reset_envs(key: jax.Array, config: QLearningConfig):
    """``(rngs, obs, env_state)``: the network's init rngs and ``num_envs`` reset envs."""
    env, env_params = offpolicy.make_env(config)
    params_key, noise_key, env_key = jax.random.split(key, 3)
    obs, env_state = rollout.reset(env, env_params, env_key, config.num_envs)
    return {"params": params_key, "noise": noise_key}, obs, env_state


def initial_state(network_params, buffer, env_state, obs, carry, config: QLearningConfig) -> State:
    """A learner's state before its first step: the target a copy of the online network."""
    return State(
        params=offpolicy.init_params({"network": network_params}, config),
        target_params=network_params,
        opt_state=make_optimizer(config).init(network_params),
        buffer=buffer,
        env_state=env_state,
        obs=obs,
        timesteps=jnp.zeros((), jnp.int32),
        updates=jnp.zeros((), jnp.int32),
        carry=carry,
    )


def init(key: jax.Array, config: QLearningConfig) -> State:
    """Online and target networks, optimiser, an empty buffer and ``num_envs`` reset
    envs. The buffer stores actions shaped as :func:`act` returns them (``[N]``, or
    ``[N, A]`` for the agents of a multi-agent env, each agent its own replay lane)."""
    config.check_traced()
    rngs, obs, env_state = reset_envs(key, config)
    network_params = init_network(config, rngs, jax.tree.map(lambda x: x[:1], obs))
    params = offpolicy.init_params({"network": network_params}, config)
    action = jax.eval_shape(lambda: act(params, obs, (), rngs["noise"], config, deterministic=True)[0])
    action = jnp.zeros(action.shape, action.dtype)
    buffer = offpolicy.init_buffer(obs, action, config, replay_part(config).use_priorities)
    return initial_state(network_params, buffer, env_state, obs, (), config)


# ----------------------------------------------------------------------------- acting


def draw_noise(key: jax.Array, config: QLearningConfig, shape: tuple = ()) -> jax.Array:
    """Deprecated: ``jaxrl.exploration.NoisyNets().draw(key, make_network(config), shape)``,
    noisy nets' standard normal draws ``[*shape, noise_size]`` (``config.exploration.draw``
    draws the configured part's: None without noisy nets)."""
    warnings.warn(
        "dqn.draw_noise(key, config, shape) is deprecated: use "
        "jaxrl.exploration.NoisyNets().draw(key, dqn.make_network(config), shape)",
        DeprecationWarning,
        stacklevel=2,
    )
    return NoisyNets().draw(key, make_network(config), shape)


def network_out(network: QNetwork, network_params, obs, noise: jax.Array | None, taus=None, **recurrent):
    """The network's output (Q-values ``[B, A]``; a head's ``[B, A, outputs]``; IQN's
    pair ``(quantiles [B, A, N], taus)``); ``noise`` is one draw of the ``exploration``
    part (:meth:`jaxrl.exploration.NoisyNets.draw`), or None for the noise-free network;
    ``taus`` the quantile fractions ``[N]`` or ``[B, N]`` of a head that draws them
    (None for the others). ``recurrent``: R2D2's ``carry`` and ``reset``, with which it
    returns ``(out, carry)``."""
    if noise is not None:
        return network.apply(network_params, obs, noise=noise, **recurrent, **network_inputs(taus))
    return network.apply(network_params, obs, deterministic=True, **recurrent, **network_inputs(taus))


def acting_out(network: QNetwork, network_params, obs, config: QLearningConfig, noise_key=None, **recurrent):
    """:func:`network_out` at observations as the networks read them, with a fresh draw
    of the ``exploration`` part's network noise from ``noise_key`` (none if None) and,
    for a head that draws quantile fractions, its acting fractions from ``noise_key``
    (their midpoints if None: :meth:`jaxrl.value_heads.ImplicitQuantile.acting_fractions`)."""
    noise_key, taus = config.head.acting_fractions(noise_key)
    noise = None if noise_key is None else config.exploration.draw(noise_key, network)
    return network_out(network, network_params, obs, noise, taus, **recurrent)


def q_values(params: dict, obs: jax.Array, config: QLearningConfig, noise_key: jax.Array | None = None) -> jax.Array:
    """Action values ``[B, A]`` for raw observations ``[B, *obs_shape]`` (C51: the means)."""
    obs = offpolicy.observe(params, obs, config)
    return config.head.q_values(acting_out(make_network(config), params["network"], obs, config, noise_key))


def allowed(q: jax.Array, obs, config: QLearningConfig) -> jax.Array:
    """``q [..., A]`` with the actions ``obs["action_mask"]`` forbids at the lowest
    float (where the env's observations carry a mask; unchanged otherwise)."""
    if not env_spec(config).action_mask:
        return q
    return mask_actions(q, obs[envs.ACTION_MASK])


def initial_carry(config: QLearningConfig, batch_size: int):
    """A feed-forward Q-network's memory: ``()``."""
    return ()


def epsilon_greedy(q: jax.Array, obs, keys, config: QLearningConfig, deterministic: bool, epsilon):
    """Greedy actions in ``q [B, ...A]`` (never a masked one), each replaced with
    probability ``epsilon`` (a scalar or one per row, ``[B]``, shared by a row's
    agents) by a uniformly random allowed one; ``keys``: ``(explore_key, random_key)``."""
    explore_key, random_key = keys
    q = allowed(q, obs, config)
    greedy = jnp.argmax(q, axis=-1).astype(jnp.int32)
    if deterministic:
        return greedy
    if env_spec(config).action_mask:  # uniform over the allowed actions
        random_action = jax.random.categorical(random_key, allowed(jnp.zeros_like(q), obs, config)).astype(jnp.int32)
    else:
        random_action = jax.random.randint(random_key, greedy.shape, 0, q.shape[-1], jnp.int32)
    epsilon = jnp.asarray(epsilon)
    epsilon = epsilon.reshape(epsilon.shape + (1,) * (greedy.ndim - epsilon.ndim))  # a row's agents share it
    explore = jax.random.uniform(explore_key, greedy.shape) < epsilon
    return jnp.where(explore, random_action, greedy)


def acting(q_values: Callable) -> Callable:
    """The ``act`` of a Q-learner whose ``q_values(params, obs, carry, config, noise_key)
    -> (q [B, A], carry)`` (DQN's, R2D2's :func:`jaxrl.algorithms.r2d2.q_values`)."""

    def act(params: dict, obs, carry, key: jax.Array, config, deterministic: bool = False, epsilon=0.0):
        """``(action [B], carry)`` for observations ``[B, *obs_shape]`` and the policy's
        memory ``carry`` (``()`` without memory, passed through); the caller resets the
        returned carry where an episode ends. For a multi-agent env's agents: observations
        ``[B, A, *obs_shape]``, actions ``[B, A]``, all agents through one network call.

        :func:`epsilon_greedy` in the Q-values. Noisy nets draw fresh noise unless
        ``deterministic``, which also turns epsilon off."""
        noise_key, explore_key, random_key = jax.random.split(key, 3)
        q, carry = q_values(params, obs, carry, config, None if deterministic else noise_key)
        return epsilon_greedy(q, obs, (explore_key, random_key), config, deterministic, epsilon), carry

    return act


act = acting(lambda params, obs, carry, config, noise_key: (q_values(params, obs, config, noise_key), carry))


def epsilon(timesteps: jax.Array, config: QLearningConfig) -> jax.Array:
    """Exploration rate of each env lane ``[num_envs]`` after ``timesteps`` env steps:
    the ``exploration`` part's (zeros for noisy nets)."""
    return config.exploration.epsilons(timesteps, config.total_timesteps, config.num_envs)


def behaviour_of(act: Callable) -> Callable:
    """The collecting policy of a Q-learner that acts with ``act`` (:func:`act`'s
    signature): epsilon-greedy with each lane's :func:`epsilon` (with ``uniform``,
    epsilon 1: random actions, any memory still advancing), and the mean epsilon as the
    metric ``epsilon``."""

    def behaviour(state: State, config: QLearningConfig, uniform: bool):
        lane_epsilon = jnp.ones(config.num_envs, jnp.float32) if uniform else epsilon(state.timesteps, config)
        params = state.params
        policy = lambda obs, carry, k: act(params, obs, carry, k, config, epsilon=lane_epsilon)  # noqa: E731
        return policy, {"epsilon": jnp.mean(lane_epsilon)}

    return behaviour


# ----------------------------------------------------------------------------- learning


def replay_beta(state: State, config: QLearningConfig) -> jax.Array:
    """Prioritized replay's importance-sampling exponent now (0 with uniform replay)."""
    return replay_part(config).beta(state.timesteps / config.total_timesteps)


def sample(state: State, key: jax.Array, config: QLearningConfig, team: bool = False) -> dict:
    """A batch of :func:`jaxrl.algorithms.offpolicy.sample`: ``batch_size`` n-step
    transitions with importance-sampling ``weight`` (beta annealed over the run) and
    ``index``; with ``team``, every agent's lane of each sampled env step (leaves ``[B,
    A, ...]``). Observations come as the networks read them
    (:func:`jaxrl.algorithms.offpolicy.observe_batch`)."""
    batch = offpolicy.sample(state.buffer, key, config, replay_beta(state, config), team=team)
    return offpolicy.observe_batch(state.params, batch, config)


def taken_and_next(network_params, target_params, batch: dict, key: jax.Array, config: QLearningConfig):
    """``(out, next_out)`` on a batch from :func:`sample` (leaves ``[B, ...]``, or ``[B,
    A, ...]`` for a team): the online network's output at each taken action (the
    ``head``'s :meth:`at_action`: a Q-value; C51: logits ``[..., K]``), and the target
    network's at each next observation's action, which the online network picks with
    ``double`` (the target network otherwise), never a masked one; ``next_out``'s
    gradient is stopped.

    Noisy nets take one noise sample for the online network, at ``s`` and at ``s'``,
    and an independent one for the target network, as in Hessel et al.'s Rainbow, both
    drawn from ``key``.

    A head that draws quantile fractions (IQN) first takes its share of ``key``
    (:meth:`jaxrl.value_heads.ImplicitQuantile.learning_fractions`): fresh fractions per
    sample for the online network at ``s`` (``N``), the target network at ``s'``
    (``N'``), and the choice of the next action, whose own pass at ``s'`` averages
    ``K`` fractions (the online network's with ``double``, else the target's), as in
    Dabney et al. (2018)."""
    network, head = make_network(config), config.head
    key, (online_taus, target_taus, choice_taus) = head.learning_fractions(key, batch["reward"].shape)
    online_noise, target_noise = config.exploration.draw(key, network, (2,))
    out = head.at_action(network_out(network, network_params, batch["obs"], online_noise, online_taus), batch["action"])
    next_target = network_out(network, target_params, batch["next_obs"], target_noise, target_taus)
    if config.double:  # the online network picks the next action, the target evaluates it
        chooser = network_out(network, network_params, batch["next_obs"], online_noise, choice_taus)
    elif choice_taus is not None:  # the target network picks it at fractions of its own
        chooser = network_out(network, target_params, batch["next_obs"], target_noise, choice_taus)
    else:
        chooser = next_target
    next_action = jnp.argmax(allowed(head.q_values(chooser), batch["next_obs"], config), axis=-1)
    return out, jax.lax.stop_gradient(head.at_action(next_target, next_action))


def bootstrap_discount(batch: dict) -> jax.Array:
    """Each sample's bootstrap discount ``gamma^m (1 - terminated)``: zero only at
    termination, so truncated samples still bootstrap."""
    return batch["discount"] * (1.0 - batch["terminated"].astype(jnp.float32))


def weighted_td_loss(head, out: jax.Array, target: jax.Array, weight: jax.Array):
    """The ``head``'s TD loss of ``out`` against ``target``, weighted by the
    importance ``weight [B]`` and averaged: ``(loss, (metrics, priority_error [B]))``."""
    elementwise, priority_error, q = head.td_loss(out, target)
    loss = jnp.mean(weight * elementwise)
    metrics = {"loss": loss, "q_mean": jnp.mean(q), "td_abs": jnp.mean(jnp.abs(priority_error))}
    return loss, (metrics, jax.lax.stop_gradient(priority_error))


def loss_fn(network_params, target_params, batch: dict, key: jax.Array, config: QLearningConfig):
    """Weighted TD loss on a batch from :func:`sample`: the output of
    :func:`taken_and_next` against the ``head``'s target from ``reward`` and
    :func:`bootstrap_discount` (C51: the projected distribution).

    Returns ``(loss, (metrics, priority_error [B]))``; ``priority_error`` is the TD
    error (C51: the KL divergence from the projected target) that prioritized replay
    turns into priorities.
    """
    out, next_out = taken_and_next(network_params, target_params, batch, key, config)
    target = config.head.target(next_out, batch["reward"], bootstrap_discount(batch))
    return weighted_td_loss(config.head, out, target, batch["weight"])


def optimize(state: State, batch: dict, key: jax.Array, config: QLearningConfig, loss_fn: Callable):
    """One gradient step of ``loss_fn`` (:func:`loss_fn`'s signature) on ``batch``, then
    the target refresh every ``target_update_period`` updates (by ``tau``). Returns
    ``(state, metrics, priority_error)``; the priorities are the caller's to write."""
    network_params, opt_state, _, (metrics, priority_error) = optim.step(
        make_optimizer(config),
        loss_fn,
        state.params["network"],
        state.opt_state,
        state.target_params,
        batch,
        key,
        config,
    )
    num_updates = state.updates + 1
    refresh = num_updates % config.target_update_period == 0
    target_params = offpolicy.polyak(state.target_params, network_params, jnp.where(refresh, config.tau, 0.0))
    state = state.replace(
        params={**state.params, "network": network_params},
        target_params=target_params,
        opt_state=opt_state,
        updates=num_updates,
    )
    return state, metrics, priority_error


def write_priorities(state: State, index, priority_error: jax.Array, config: QLearningConfig) -> State:
    """With prioritized replay, the transitions at ``index`` get the priorities of
    ``priority_error`` (same shape); unchanged with uniform replay (:func:`replay_part`)."""
    return state.replace(buffer=replay_part(config).write_priorities(state.buffer, index, priority_error))


def sampled_errors(batch: dict, priority_error: jax.Array):
    """``(index, priority_error)`` of a batch's sampled transitions, an env's padding
    steps at zero (the least priority)."""
    if "valid" in batch:
        priority_error = priority_error * batch["valid"]
    return batch["index"], priority_error


def update(state: State, batch: dict, key: jax.Array, config: QLearningConfig):
    """One gradient step on ``batch`` (from :func:`sample`, :func:`optimize`) and, with
    prioritized replay, the new priorities of the sampled transitions (an env's padding
    steps get the least). ``key``: noisy nets' noise (see :func:`loss_fn`). Returns
    ``(state, metrics)``."""
    state, metrics, priority_error = optimize(state, batch, key, config, loss_fn)
    index, priority_error = sampled_errors(batch, priority_error)
    return write_priorities(state, index, priority_error, config), metrics


def learner_of(init: Callable, act: Callable, initial_carry: Callable, sample: Callable, update: Callable):
    """The :class:`jaxrl.algorithms.offpolicy.Learner` of a Q-learner of the family: its
    functions, the epsilon-greedy behaviour of ``act`` (:func:`behaviour_of`), and
    ``update`` for every update of an iteration alike."""

    def learn(state, batch: dict, key: jax.Array, index, config):
        return update(state, batch, key, config)

    return offpolicy.Learner(init, act, initial_carry, behaviour_of(act), sample, learn, LEARNER_METRICS)


# ----------------------------------------------------------------------------- training


learner = learner_of(init, act, initial_carry, sample, update)
behaviour, step, warmup_step, program = learner.behaviour, learner.step, learner.warmup_step, learner.program
algorithm = learner.algorithm(
    "dqn",
    Config,
    update,
    PRESETS,
    variants={"rainbow": RAINBOW, "qr_dqn": QR_DQN, "iqn": IQN},
    summary="Deep Q-networks with the Rainbow extensions (double, dueling, n-step, prioritized, C51, noisy), "
    "QR-DQN and IQN",
)
__getattr__ = algorithm.module_getattr(__name__)  # dqn.train, dqn.preset: the record's
