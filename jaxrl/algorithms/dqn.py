"""Deep Q-Networks (Mnih et al., 2015) and the Rainbow extensions (Hessel et al., 2018),
as config flags on one implementation.

Each iteration collects ``num_steps`` steps from each of ``num_envs`` envs with an
epsilon-greedy policy, appends them to a device replay buffer and runs ``num_updates``
gradient updates on sampled batches; the replay ratio is
``num_updates * batch_size / (num_envs * num_steps)`` samples per env step. The first
``learning_starts`` steps act uniformly at random and do not update.

Flags: ``double`` (van Hasselt et al., 2016), ``dueling`` (Wang et al., 2016), ``n_step``
returns, ``prioritized`` replay (Schaul et al., 2016), ``distributional`` C51 (Bellemare
et al., 2017), ``noisy`` nets (Fortunato et al., 2018), ``epsilon_per_env`` (Ape-X's
per-actor epsilons, Horgan et al., 2018). ``rainbow(env_id)`` turns them all on.

``memory="gru"`` or ``"lstm"`` makes it R2D2 (Kapturowski et al., 2019): a recurrent
core between the Q-network's torso and head, the actors' memory kept in the state and
stored with every step in a prioritized sequence replay (:mod:`jaxrl.buffers.sequence`),
and a learner that re-runs the online and target networks over each sampled window of
``windows.length`` steps from its stored memory, warming it up over the first
``windows.burn_in`` steps, with n-step double-Q targets, optionally value-rescaled.
``r2d2(env_id)`` is that preset.

``multi_agent=True`` trains the agents of a multi-agent env (:class:`jaxrl.envs.multiagent.AgentBatch`:
agents as a batch axis) with one shared Q-network told each agent's one-hot id.
Replay lanes are then agents: each env step's ``[N, A]`` agent-transitions are stored
as ``N * A`` lanes (lane ``n * A + a``). ``mixer="none"`` is independent Q-learning
(IQL: every agent a DQN on its own reward, :mod:`jaxrl.algorithms.iql`);
``mixer="vdn"`` is value decomposition (VDN, Sunehag et al., 2018,
:mod:`jaxrl.algorithms.vdn`): the loss samples whole env steps (every agent's lane)
and trains ``Q_tot = sum_a Q_a`` toward the team's target. ::

    config = dqn.Config(env_id="CartPole-v1")
    out = jax.jit(dqn.train)(jax.random.key(0), config)
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxrl import envs, networks, optim, returns, rollout
from jaxrl.algorithms import offpolicy, requirements
from jaxrl.buffers import prioritized, sequence
from jaxrl.buffers.sequence import Windows
from jaxrl.config import freeze_mapping, require_choice, require_int, require_network, require_range, static
from jaxrl.distributions import mask_actions
from jaxrl.networks import QNetwork

LEARNER_METRICS = ("loss", "q_mean", "td_abs")
MIXERS = ("none", "vdn")  # how a multi-agent config combines the agents' values


@struct.dataclass
class Config(offpolicy.ReplaySchedule):
    """DQN settings. Static fields fix the program; the rest can be traced and vmapped.

    The defaults solve CartPole-v1 in 100k steps. They turn on double Q-learning,
    the dueling head, 3-step returns and prioritized replay (uniform-replay DQN forgets
    how to recover from rare failures once it balances, and collapses on CartPole);
    ``double=False, dueling=False, n_step=1, prioritized=False`` is the DQN of Mnih et
    al. ``rainbow(env_id)`` adds C51 and noisy nets.

    With ``memory`` on (R2D2, see ``r2d2(env_id)``) replay holds ``windows``:
    ``windows.length`` steps starting every ``windows.period`` steps of each env,
    ``batch_size`` counts windows, and the loss trains the steps after the first
    ``burn_in`` whose ``n_step`` targets lie inside the window.

    With ``multi_agent`` replay holds agent-transitions: ``buffer_size`` counts them
    (``num_envs * A`` lanes), ``batch_size`` counts agent-transitions (IQL) or env steps
    of every agent (VDN), and ``learning_starts`` / ``total_timesteps`` count env steps.
    """

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
    network: str = static("mlp")  # "mlp" or "cnn" (MinAtar)
    hidden_sizes: tuple = static((128, 128))
    activation: str = static("relu")
    target_update_period: int = static(100)  # updates between target refreshes (by tau)
    loss: str = static("huber")  # "huber" or "mse"; C51 uses cross-entropy
    double: bool = static(True)
    dueling: bool = static(True)
    n_step: int = static(3)
    prioritized: bool = static(True)
    distributional: bool = static(False)
    num_atoms: int = static(51)
    noisy: bool = static(False)
    noisy_sigma: float = static(0.5)
    epsilon_per_env: bool = static(False)  # lane i: apex_epsilon ** (1 + apex_alpha * i / (N - 1))
    memory: str = static("none")  # "gru" or "lstm": a recurrent core after the torso (R2D2)
    memory_size: int = static(64)  # the recurrent core's units
    windows: Windows = Windows()  # with memory: replayed windows (length, burn-in, period)
    value_rescale: bool = static(False)  # learn h(Q) with R2D2's invertible rescaling h
    # --- static: several agents (IQL / VDN; see jaxrl.envs.multiagent.AgentBatch)
    multi_agent: bool = static(False)  # a multi-agent env's agents as a batch axis, one replay lane each
    mixer: str = static("none")  # with multi_agent: "none" (IQL) or "vdn" (Q_tot = sum of the agents' Q)
    anneal_lr: bool = static(False)  # linearly to 0 over the updates
    normalize_observations: bool = static(False)  # running stats in params; replay keeps raw observations
    scale_rewards: bool = static(False)  # divide rewards by the running std of the discounted return
    num_evals: int = static(10)
    eval_episodes: int = static(10)
    num_reports: int = static(50)
    # --- traced hyper-parameters
    learning_rate: float = 1e-3
    gamma: float = 0.99
    tau: float = 1.0  # 1: hard copy every target_update_period
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    exploration_fraction: float = 0.2  # of total_timesteps to anneal epsilon over
    apex_epsilon: float = 0.4
    apex_alpha: float = 7.0
    max_grad_norm: float = 10.0
    per_alpha: float = 0.6
    per_beta_start: float = 0.4  # annealed linearly to per_beta_end
    per_beta_end: float = 1.0
    per_eps: float = 1e-6
    v_min: float = 0.0  # C51 support
    v_max: float = 100.0
    priority_eta: float = 0.9  # a window's priority: eta * max |td| + (1 - eta) * mean |td|
    rescale_eps: float = 1e-3  # h's linear term

    def __post_init__(self):
        object.__setattr__(self, "env_kwargs", freeze_mapping(self.env_kwargs, "env_kwargs"))
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        self.check_schedule()
        offpolicy.check_normalization(self)
        require_int(self, "target_update_period", 1)
        require_int(self, "num_atoms", 2)
        require_choice(self, "loss", ("huber", "mse"))
        self.check_agents()
        spec = env_spec(self)  # with multi_agent, AgentBatch refuses a single-agent env
        requirements.refuse_multi_discrete(spec, self.env_id, "dqn")
        if not spec.discrete:
            raise ValueError(
                f"DQN needs a discrete action space; env_id {self.env_id!r} has a continuous (Box) "
                f"action space of shape {spec.action_shape} (use SAC, TD3 or DDPG)"
            )
        require_network(self, spec.obs_ndim)
        self.check_memory()
        agent_steps = self.iteration_steps * envs.config_num_agents(self)
        if self.multi_agent and self.buffer_size < agent_steps:
            raise ValueError(
                f"buffer_size ({self.buffer_size}) counts agent-transitions with multi_agent=True and must hold "
                f"one iteration's num_envs * num_steps * agents = {agent_steps}"
            )

    def check_agents(self) -> None:
        """ValueErrors for multi-agent settings that cannot work (before the env is made)."""
        require_choice(self, "multi_agent", (True, False))
        require_choice(self, "mixer", MIXERS)
        if not self.multi_agent:
            if self.mixer != "none":
                raise ValueError(f"mixer={self.mixer!r} mixes several agents' values: it needs multi_agent=True")
            return
        if self.memory != "none":
            raise ValueError(
                f"memory={self.memory!r} is not supported with multi_agent=True (R2D2's sequence replay "
                "is not laid out in agent lanes)"
            )
        if self.mixer == "vdn" and self.distributional:
            raise ValueError(
                "mixer='vdn' does not support distributional=True: a sum of the agents' categorical (C51) "
                "distributions is no categorical distribution on C51's support"
            )
        if self.mixer == "vdn" and self.value_rescale:
            raise ValueError("mixer='vdn' does not support value_rescale=True: a sum of h(Q_a) is not h(Q_tot)")

    @property
    def agent_view(self) -> tuple | None:
        """How :func:`jaxrl.envs.make_config_env` views a multi-agent env: ``(agent_id,
        global_state)`` for :class:`jaxrl.envs.multiagent.AgentBatch` (one shared network
        told each agent's one-hot id); None for one agent."""
        return (True, False) if self.multi_agent else None

    def check_memory(self) -> None:
        """ValueErrors for recurrent settings that cannot work."""
        require_choice(self, "memory", networks.MEMORY_KINDS)
        if self.value_rescale and self.distributional:
            raise ValueError("value_rescale does not apply to distributional (C51) targets")
        if self.memory == "none":
            return
        if self.distributional:
            raise ValueError(f"memory={self.memory!r} does not support distributional=True (C51)")
        offpolicy.check_sequence_replay(self, bootstrap_steps=self.n_step - 1)


PRESETS = {
    "CartPole-v1": {},
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
        exploration_fraction=0.2,
        epsilon_end=0.07,
    ),
}

RAINBOW = dict(
    double=True,
    dueling=True,
    n_step=3,
    prioritized=True,
    distributional=True,
    noisy=True,
    epsilon_start=0.0,
    epsilon_end=0.0,  # noisy nets explore
)


R2D2 = dict(
    memory="lstm",
    double=True,
    dueling=True,
    prioritized=True,
    value_rescale=True,
    epsilon_per_env=True,  # Ape-X / R2D2 actors: a fixed epsilon per env lane
    per_alpha=0.9,
    per_beta_start=0.6,
    per_beta_end=0.6,
)


def rainbow(env_id: str = "CartPole-v1", **overrides) -> Config:
    """The Rainbow preset: every flag on (double, dueling, 3-step, prioritized, C51,
    noisy nets, no epsilon-greedy), on top of ``preset(env_id)``."""
    return algorithm.preset(env_id, **{**RAINBOW, **overrides})


def r2d2(env_id: str = "CartPole-v1", **overrides) -> Config:
    """The R2D2 preset (Kapturowski et al., 2019): an LSTM Q-network with the dueling
    head, double Q-learning, n-step targets with value rescaling, prioritized sequence
    replay with burn-in and per-env epsilons, on top of ``preset(env_id)``; the window
    sizes are the Config's defaults, shorter than the paper's Atari ones."""
    return algorithm.preset(env_id, **{**R2D2, **overrides})


@struct.dataclass
class State:
    params: dict  # {"network": flax params, "obs_stats" with normalize_observations}: all ``act`` needs
    target_params: dict  # the target network's flax params
    opt_state: Any
    buffer: Any  # replay.ReplayState, prioritized.PrioritizedState or (memory) sequence.SequenceState
    env_state: Any  # batched env state [num_envs]
    obs: Any  # [num_envs, *obs_shape] ([num_envs, A, *obs_shape] with multi_agent)
    timesteps: jax.Array  # int32 env steps so far
    updates: jax.Array  # int32 gradient updates so far
    carry: Any = ()  # the actors' memory for ``obs``, leaves [num_envs, ...]; () without memory


# ----------------------------------------------------------------------------- set-up


def env_spec(config: Config) -> envs.EnvSpec:
    return envs.config_spec(config)


def make_network(config: Config) -> QNetwork:
    spec = env_spec(config)
    return QNetwork(
        num_actions=spec.num_actions,
        network=config.network,
        hidden_sizes=config.hidden_sizes,
        activation=config.activation,
        obs_ndim=spec.obs_ndim,
        dueling=config.dueling,
        noisy=config.noisy,
        num_atoms=config.num_atoms if config.distributional else 1,
        noisy_sigma=config.noisy_sigma,
        memory=config.memory,
        memory_size=config.memory_size,
    )


def make_optimizer(config: Config) -> optax.GradientTransformation:
    num_updates = max((config.num_iterations - config.warmup_iterations) * config.num_updates, 1)

    def learning_rate(count):
        if not config.anneal_lr:
            return config.learning_rate
        return config.learning_rate * (1.0 - jnp.minimum(count, num_updates) / num_updates)

    return optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm),
        optax.inject_hyperparams(optax.adam)(learning_rate=learning_rate),
    )


def _check_traced(config: Config) -> None:
    require_range(config, "learning_rate", 0.0, float("inf"), low_open=True)
    require_range(config, "tau", 0.0, 1.0, low_open=True)
    require_range(config, "exploration_fraction", 0.0, 1.0, low_open=True)
    require_range(config, "max_grad_norm", 0.0, float("inf"), low_open=True)
    require_range(config, "per_eps", 0.0, float("inf"), low_open=True)
    require_range(config, "apex_alpha", 0.0, float("inf"))
    require_range(config, "rescale_eps", 0.0, float("inf"))
    for field in (
        "gamma",
        "epsilon_start",
        "epsilon_end",
        "apex_epsilon",
        "per_alpha",
        "per_beta_start",
        "per_beta_end",
        "priority_eta",
    ):
        require_range(config, field, 0.0, 1.0)
    if not isinstance(config.v_min, jax.core.Tracer) and not isinstance(config.v_max, jax.core.Tracer):
        if not np.all(np.asarray(config.v_min) < np.asarray(config.v_max)):
            raise ValueError(f"v_min ({config.v_min}) must be below v_max ({config.v_max})")


def init(key: jax.Array, config: Config) -> State:
    """Online and target networks, optimiser, an empty buffer, ``num_envs`` reset envs
    and (with ``memory``) the actors' initial memory."""
    _check_traced(config)
    env, env_params = offpolicy.make_env(config)
    params_key, noise_key, env_key = jax.random.split(key, 3)
    obs, env_state = rollout.reset(env, env_params, env_key, config.num_envs)
    rngs = {"params": params_key, "noise": noise_key}
    one_obs = jax.tree.map(lambda x: x[:1], obs)
    carry = initial_carry(config, config.num_envs)
    agents = (envs.config_num_agents(config),) if config.multi_agent else ()
    action = jnp.zeros((config.num_envs, *agents), jnp.int32)
    if config.memory == "none":
        network_params = make_network(config).init(rngs, one_obs)
        buffer = offpolicy.init_buffer(obs, action, config, config.prioritized)
    else:  # a sequence of one step
        network_params = make_network(config).init(
            rngs, jax.tree.map(lambda x: x[None], one_obs), carry=initial_carry(config, 1)
        )
        buffer = offpolicy.init_sequence_buffer(obs, action, carry, config)
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


# ----------------------------------------------------------------------------- acting


def support(config: Config) -> jax.Array:
    """The C51 atoms ``[num_atoms]``, evenly spaced on ``[v_min, v_max]``."""
    return jnp.linspace(config.v_min, config.v_max, config.num_atoms)


def draw_noise(key: jax.Array, config: Config, shape: tuple = ()) -> jax.Array:
    """Noisy nets' standard normal draws ``[*shape, noise_size]``: ``prod(shape)``
    noise samples for the whole network, in one RNG call."""
    return jax.random.normal(key, shape + (make_network(config).noise_size(),))


def _network_out(network_params, obs, noise: jax.Array | None, config: Config, carry=(), reset=None):
    """Q-values ``[B, A]`` or C51 logits ``[B, A, K]``; ``noise`` is one sample of
    :func:`draw_noise`, or None for the noise-free network. With ``memory``: ``obs
    [T, B, ...]`` entered with ``carry``, ``reset [T, B]`` or None; returns ``(out [T,
    B, ...], carry)``."""
    network = make_network(config)
    if config.noisy and noise is not None:
        return network.apply(network_params, obs, noise=noise, carry=carry, reset=reset)
    return network.apply(network_params, obs, deterministic=True, carry=carry, reset=reset)


def _q_values(out: jax.Array, config: Config) -> jax.Array:
    if config.distributional:
        return jnp.sum(jax.nn.softmax(out, axis=-1) * support(config), axis=-1)
    return out


def q_values(params: dict, obs: jax.Array, config: Config, noise_key: jax.Array | None = None) -> jax.Array:
    """Action values ``[B, A]`` for raw observations ``[B, *obs_shape]`` (C51: the means)."""
    noise = None if noise_key is None or not config.noisy else draw_noise(noise_key, config)
    return _q_values(_network_out(params["network"], offpolicy.observe(params, obs, config), noise, config), config)


def recurrent_q_values(params: dict, obs, carry, config: Config, noise_key: jax.Array | None = None):
    """``(q [B, A], carry)``: the recurrent network's action values for observations
    ``[B, *obs_shape]`` entered with the memory ``carry`` (leaves ``[B, ...]``), and
    the memory after them."""
    noise = None if noise_key is None or not config.noisy else draw_noise(noise_key, config)
    obs = jax.tree.map(lambda x: x[None], offpolicy.observe(params, obs, config))
    out, carry = _network_out(params["network"], obs, noise, config, carry)
    return out[0], carry


def allowed(q: jax.Array, obs, config: Config) -> jax.Array:
    """``q [..., A]`` with the actions ``obs["action_mask"]`` forbids at the lowest
    float (where the env's observations carry a mask; unchanged otherwise)."""
    if not env_spec(config).action_mask:
        return q
    return mask_actions(q, obs[envs.ACTION_MASK])


def initial_carry(config: Config, batch_size: int):
    """The Q-network's memory before an episode's first step, for ``batch_size`` envs:
    zeros, leaves ``[batch_size, memory_size]``; ``()`` without memory."""
    return networks.initial_carry(config.memory, config.memory_size, batch_size)


def act(
    params: dict,
    obs: jax.Array,
    carry,
    key: jax.Array,
    config: Config,
    deterministic: bool = False,
    epsilon: jax.Array | float = 0.0,
):
    """``(action [B], carry)`` for observations ``[B, *obs_shape]`` and the memory
    ``carry`` (:func:`initial_carry`: leaves ``[B, ...]``, ``()`` without memory, which
    is passed through). The caller resets the returned carry where an episode ends.
    With ``multi_agent``: observations ``[B, A, *obs_shape]``, actions ``[B, A]``, all
    agents through one network call.

    Greedy in the Q-values; with probability ``epsilon`` (a scalar or one per row,
    ``[B]``, shared by a row's agents) a uniformly random action instead. Noisy nets
    draw fresh noise unless ``deterministic``, which also turns epsilon off."""
    noise_key, explore_key, random_key = jax.random.split(key, 3)
    noise_key = None if deterministic else noise_key
    if config.memory == "none":
        q = q_values(params, obs, config, noise_key)
    else:
        q, carry = recurrent_q_values(params, obs, carry, config, noise_key)
    q = allowed(q, obs, config)
    greedy = jnp.argmax(q, axis=-1).astype(jnp.int32)
    if deterministic:
        return greedy, carry
    if env_spec(config).action_mask:  # uniform over the allowed actions
        random_action = jax.random.categorical(random_key, allowed(jnp.zeros_like(q), obs, config)).astype(jnp.int32)
    else:
        random_action = jax.random.randint(random_key, greedy.shape, 0, q.shape[-1], jnp.int32)
    epsilon = jnp.asarray(epsilon)
    epsilon = epsilon.reshape(epsilon.shape + (1,) * (greedy.ndim - epsilon.ndim))  # a row's agents share it
    explore = jax.random.uniform(explore_key, greedy.shape) < epsilon
    return jnp.where(explore, random_action, greedy), carry


def epsilon(timesteps: jax.Array, config: Config) -> jax.Array:
    """Exploration rate of each env lane ``[num_envs]`` after ``timesteps`` env steps:
    the linear schedule, or Ape-X's fixed per-lane values with ``epsilon_per_env``."""
    if config.epsilon_per_env:
        lane = jnp.arange(config.num_envs) / max(config.num_envs - 1, 1)
        return config.apex_epsilon ** (1.0 + config.apex_alpha * lane)
    progress = jnp.clip(timesteps / (config.exploration_fraction * config.total_timesteps), 0.0, 1.0)
    value = config.epsilon_start + progress * (config.epsilon_end - config.epsilon_start)
    return jnp.full((config.num_envs,), value, jnp.float32)


# ----------------------------------------------------------------------------- learning


def sample(state: State, key: jax.Array, config: Config) -> dict:
    """A batch of :func:`jaxrl.algorithms.offpolicy.sample`: ``batch_size`` n-step transitions
    with importance-sampling ``weight`` (beta annealed over the run) and ``index``.

    With ``mixer="vdn"``: ``batch_size`` env steps, each with every agent's lane
    (:func:`jaxrl.algorithms.offpolicy.sample` with ``team``): leaves ``[B, A, ...]``, ``index``
    ``[B, A]``, ``weight [B]`` the sampled lane's.

    With ``memory``: ``batch_size`` windows of :func:`jaxrl.buffers.sequence.sample`,
    the transition fields with leaves ``[B, L, ...]`` except ``carry``, the memory
    entering each window's first step (leaves ``[B, ...]``), plus ``weight [B]`` and
    ``index``.

    Observations come as the networks read them (:func:`jaxrl.algorithms.offpolicy.observe_batch`)."""
    progress = jnp.clip(state.timesteps / config.total_timesteps, 0.0, 1.0)
    beta = config.per_beta_start + progress * (config.per_beta_end - config.per_beta_start)
    if config.memory == "none":
        batch = offpolicy.sample(state.buffer, key, config, beta, team=config.mixer == "vdn")
    else:
        windows = sequence.sample(state.buffer, key, config.batch_size, beta)
        batch = {**windows.data, "carry": windows.carry, "weight": windows.weights, "index": windows.index}
    return offpolicy.observe_batch(state.params, batch, config)


def at_action(out: jax.Array, action: jax.Array, config: Config) -> jax.Array:
    """The entries of ``action [...]`` in the network's ``out``: Q-values ``[...,
    n_actions] -> [...]``, C51 logits ``[..., n_actions, K] -> [..., K]``."""
    if config.distributional:
        return jnp.take_along_axis(out, action[..., None, None], axis=-2)[..., 0, :]
    return jnp.take_along_axis(out, action[..., None], axis=-1)[..., 0]


def taken_and_next(network_params, target_params, batch: dict, key: jax.Array, config: Config):
    """``(out, next_out)`` on a batch from :func:`sample` (leaves ``[B, ...]``, or ``[B,
    A, ...]`` with ``mixer="vdn"``): the online network's output (Q-value; C51: logits
    ``[..., K]``) at each taken action, and the target network's at each next
    observation's action, which the online network picks with ``double`` (the target
    network otherwise), never a masked one; ``next_out``'s gradient is stopped.

    Noisy nets take one noise sample for the online network, at ``s`` and at ``s'``,
    and an independent one for the target network, as in Hessel et al.'s Rainbow, both
    drawn from ``key``."""
    online_noise, target_noise = draw_noise(key, config, (2,)) if config.noisy else (None, None)
    out = at_action(_network_out(network_params, batch["obs"], online_noise, config), batch["action"], config)
    next_target = _network_out(target_params, batch["next_obs"], target_noise, config)
    if config.double:  # the online network picks the next action, the target evaluates it
        chooser = _network_out(network_params, batch["next_obs"], online_noise, config)
    else:
        chooser = next_target
    next_action = jnp.argmax(allowed(_q_values(chooser, config), batch["next_obs"], config), axis=-1)
    return out, jax.lax.stop_gradient(at_action(next_target, next_action, config))


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


def loss_fn(network_params, target_params, batch: dict, key: jax.Array, config: Config):
    """Weighted TD loss on a batch from :func:`sample`: the output of
    :func:`taken_and_next` against ``reward + discount * (1 - terminated) * next_out``
    (C51: the projected distribution). With ``mixer="vdn"`` the TD error is the team's,
    of :func:`vdn_values`, and the metric ``q_mean`` is ``Q_tot``'s mean.

    Returns ``(loss, (metrics, priority_error [B]))``; ``priority_error`` is the TD
    error (C51: the KL divergence from the projected target; with ``memory``, each
    window's :func:`sequence_loss_fn` priority) that prioritized replay turns into
    priorities.
    """
    if config.memory != "none":
        return sequence_loss_fn(network_params, target_params, batch, key, config)
    out, next_out = taken_and_next(network_params, target_params, batch, key, config)
    discount = batch["discount"] * (1.0 - batch["terminated"].astype(jnp.float32))

    if config.distributional:
        target = returns.categorical_projection(jax.nn.softmax(next_out), batch["reward"], discount, support(config))
        log_probs = jax.nn.log_softmax(out)
        elementwise = -jnp.sum(target * log_probs, axis=-1)
        priority_error = elementwise + jnp.sum(jax.scipy.special.xlogy(target, target), axis=-1)
        q_taken = jnp.sum(jnp.exp(log_probs) * support(config), axis=-1)
    else:
        q_taken = out
        if config.mixer == "vdn":
            agent_weight = batch["valid"].astype(jnp.float32) if "valid" in batch else jnp.ones_like(out)
            q_taken, target = vdn_values(out, next_out, batch["reward"], discount, agent_weight)
        elif config.value_rescale:  # the network learns h(Q): unrescale, back up, rescale
            next_value = returns.value_unrescale(next_out, config.rescale_eps)
            target = returns.value_rescale(batch["reward"] + discount * next_value, config.rescale_eps)
        else:
            target = batch["reward"] + discount * next_out
        priority_error = target - q_taken
        if config.loss == "huber":
            elementwise = optax.huber_loss(priority_error)
        else:
            elementwise = 0.5 * jnp.square(priority_error)
    loss = jnp.mean(batch["weight"] * elementwise)
    metrics = {"loss": loss, "q_mean": jnp.mean(q_taken), "td_abs": jnp.mean(jnp.abs(priority_error))}
    return loss, (metrics, jax.lax.stop_gradient(priority_error))


def unroll(network_params, obs, next_obs, carry, reset: jax.Array, noise: jax.Array | None, config: Config):
    """The recurrent Q-network over windows, time-major, one step at a time.

    Args:
      obs: ``[T, B, *obs_shape]``; ``carry`` the memory entering step 0 (leaves ``[B,
        ...]``); ``reset [T, B]`` True where step ``t`` begins an episode.
      next_obs: ``[T, B, *obs_shape]`` the observation each step reached (the final one
        where an episode ended), or None to skip it.
      noise: one sample of :func:`draw_noise` for every step, or None.
    Returns ``(out [T, B, A], next_out [T, B, A] or None, carry)``: ``next_out[t]`` is
    the network on ``next_obs[t]`` with the memory after step ``t``, before any reset.
    """
    add_time = lambda tree: jax.tree.map(lambda x: x[None], tree)  # noqa: E731

    def one_step(carry, inputs):
        obs_t, next_obs_t, reset_t = inputs
        out_t, carry = _network_out(network_params, add_time(obs_t), noise, config, carry, reset_t[None])
        if next_obs_t is None:
            return carry, (out_t[0], None)
        next_out_t, _ = _network_out(network_params, add_time(next_obs_t), noise, config, carry)
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
        name: jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), batch[name])
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
    next_online = allowed(next_online, train["next_obs"], config)  # the argmax never picks a masked action
    return q, jax.lax.stop_gradient(next_online), jax.lax.stop_gradient(next_target), train


def sequence_loss_fn(network_params, target_params, batch: dict, key: jax.Array, config: Config):
    """R2D2's loss on a batch of windows from :func:`sample` (``memory`` on).

    :func:`sequence_q_values`, then n-step double-Q targets
    (:func:`jaxrl.returns.double_q_n_step_targets`, value-rescaled with
    ``value_rescale``), bootstrapped through truncation from ``next_obs`` and stopped at
    termination. Each window's loss is the mean Huber (or squared) TD error over its
    :func:`trained_steps`, weighted by its importance weight. Noisy nets: one noise
    sample for the online network and one for the target, for every step.

    Returns ``(loss, (metrics, priority [B]))`` with ``priority`` the window's
    :func:`jaxrl.buffers.sequence.sequence_priority` of ``|td|`` on its trained steps.
    """
    online_noise, target_noise = draw_noise(key, config, (2,)) if config.noisy else (None, None)
    q, next_online, next_target, train = sequence_q_values(
        network_params, target_params, batch, online_noise, target_noise, config
    )
    q_taken = jnp.take_along_axis(q, train["action"][..., None], axis=-1)[..., 0]  # [T, B]
    target = returns.double_q_n_step_targets(
        train["reward"],
        next_online,
        next_target,
        train["terminated"],
        train["truncated"],
        config.gamma,
        config.n_step,
        config.rescale_eps if config.value_rescale else None,
    )
    td = target - q_taken
    elementwise = optax.huber_loss(td) if config.loss == "huber" else 0.5 * jnp.square(td)
    mask = trained_steps(config)[:, None]  # [T, 1]
    count = jnp.sum(mask)
    per_window = jnp.sum(jnp.where(mask, elementwise, 0.0), axis=0) / count  # [B]
    loss = jnp.mean(batch["weight"] * per_window)
    mask_bt = jnp.broadcast_to(mask.T, td.T.shape)
    priority = sequence.sequence_priority(td.T, mask_bt, config.priority_eta)
    metrics = {
        "loss": loss,
        "q_mean": jnp.sum(jnp.where(mask, q_taken, 0.0)) / (count * config.batch_size),
        "td_abs": jnp.sum(jnp.where(mask, jnp.abs(td), 0.0)) / (count * config.batch_size),
    }
    return loss, (metrics, jax.lax.stop_gradient(priority))


def update(state: State, batch: dict, key: jax.Array, config: Config):
    """One gradient step on ``batch`` (from :func:`sample`), then the target refresh
    every ``target_update_period`` updates and, with prioritized replay, the new
    priorities of the sampled transitions. ``key``: noisy nets' noise (see
    :func:`loss_fn`). Returns ``(state, metrics)``."""
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
    buffer = state.buffer
    index = batch["index"]
    if "valid" in batch:  # an env's padding steps get the least priority (VDN: steps no agent acted in)
        valid = jnp.any(batch["valid"], axis=-1) if config.mixer == "vdn" else batch["valid"]
        priority_error = priority_error * valid
    # VDN: every agent's lane of the sampled env step gets the team's error, so a step is
    # drawn A times as often as one lane, which the sampled lane's importance weight
    # (computed against A times as many lanes as steps) corrects exactly.
    if config.mixer == "vdn":
        priority_error = jnp.broadcast_to(priority_error[:, None], index.lane.shape).reshape(-1)
        index = jax.tree.map(jnp.ravel, index)
    if config.prioritized and config.memory == "none":
        buffer = prioritized.update_priorities(buffer, index, priority_error, config.per_alpha, config.per_eps)
    elif config.prioritized:  # without, every window keeps the first max priority: uniform replay
        buffer = sequence.update_priorities(buffer, batch["index"], priority_error, config.per_alpha, config.per_eps)
    state = state.replace(
        params={**state.params, "network": network_params},
        target_params=target_params,
        opt_state=opt_state,
        buffer=buffer,
        updates=num_updates,
    )
    return state, metrics


def behaviour(state: State, config: Config, uniform: bool):
    """The collecting policy: epsilon-greedy with each lane's :func:`epsilon` (with
    ``uniform``, epsilon 1: random actions, the memory still advancing), and the mean
    epsilon as the metric ``epsilon``."""
    lane_epsilon = jnp.ones(config.num_envs, jnp.float32) if uniform else epsilon(state.timesteps, config)
    params = state.params
    policy = lambda obs, carry, k: act(params, obs, carry, k, config, epsilon=lane_epsilon)  # noqa: E731
    return policy, {"epsilon": jnp.mean(lane_epsilon)}


def learn(state: State, batch: dict, key: jax.Array, index, config: Config):
    """:func:`update`, every update of an iteration alike."""
    return update(state, batch, key, config)


# ----------------------------------------------------------------------------- training


learner = offpolicy.Learner(init, act, initial_carry, behaviour, sample, learn, LEARNER_METRICS)
step, warmup_step, program = learner.step, learner.warmup_step, learner.program
algorithm = learner.algorithm(
    "dqn",
    Config,
    update,
    PRESETS,
    variants={"rainbow": RAINBOW, "r2d2": R2D2},
    summary="Deep Q-networks with the Rainbow extensions (double, dueling, n-step, prioritized, C51, noisy)",
)
__getattr__ = algorithm.module_getattr(__name__)  # dqn.train, dqn.preset: the record's
