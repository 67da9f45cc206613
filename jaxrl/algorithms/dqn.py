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

    config = dqn.Config(env_id="CartPole-v1")
    out = jax.jit(dqn.train)(jax.random.key(0), config)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxrl import envs, evaluation, loop, offpolicy, optim, returns, rollout
from jaxrl.buffers import prioritized
from jaxrl.config import freeze_mapping, require_choice, require_int, require_network, require_range, static
from jaxrl.networks import QNetwork
from jaxrl.types import TrainOutput

LEARNER_METRICS = ("loss", "q_mean", "td_abs")


@struct.dataclass
class Config(offpolicy.ReplaySchedule):
    """DQN settings. Static fields fix the program; the rest can be traced and vmapped.

    The defaults solve CartPole-v1 in 100k steps. They turn on double Q-learning,
    the dueling head, 3-step returns and prioritized replay (uniform-replay DQN forgets
    how to recover from rare failures once it balances, and collapses on CartPole);
    ``double=False, dueling=False, n_step=1, prioritized=False`` is the DQN of Mnih et
    al. ``rainbow(env_id)`` adds C51 and noisy nets.
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
    anneal_lr: bool = static(False)  # linearly to 0 over the updates
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

    def __post_init__(self):
        object.__setattr__(self, "env_kwargs", freeze_mapping(self.env_kwargs, "env_kwargs"))
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        self.check_schedule()
        require_int(self, "target_update_period", 1)
        require_int(self, "num_atoms", 2)
        require_choice(self, "loss", ("huber", "mse"))
        spec = env_spec(self)
        if not spec.discrete:
            raise ValueError(
                f"DQN needs a discrete action space; env_id {self.env_id!r} has a continuous (Box) "
                f"action space of shape {spec.action_shape} (use SAC, TD3 or DDPG)"
            )
        require_network(self, spec.obs_shape)


PRESETS = {"CartPole-v1": {}}

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


VARIANTS = {"rainbow": RAINBOW}  # named flag sets (the CLI's --variant)


def preset(env_id: str, **overrides) -> Config:
    """A Config with settings tuned for ``env_id`` (the defaults where none are known)."""
    return Config(env_id=env_id, **{**PRESETS.get(env_id, {}), **overrides})


def rainbow(env_id: str = "CartPole-v1", **overrides) -> Config:
    """The Rainbow preset: every flag on (double, dueling, 3-step, prioritized, C51,
    noisy nets, no epsilon-greedy), on top of ``preset(env_id)``."""
    return preset(env_id, **{**RAINBOW, **overrides})


@struct.dataclass
class State:
    params: dict  # {"network": flax params}: all ``act`` needs
    target_params: dict  # the target network's flax params
    opt_state: Any
    buffer: Any  # replay.ReplayState or prioritized.PrioritizedState
    env_state: Any  # batched env state [num_envs]
    obs: Any  # [num_envs, *obs_shape]
    timesteps: jax.Array  # int32 env steps so far
    updates: jax.Array  # int32 gradient updates so far


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
        obs_ndim=len(spec.obs_shape),
        dueling=config.dueling,
        noisy=config.noisy,
        num_atoms=config.num_atoms if config.distributional else 1,
        noisy_sigma=config.noisy_sigma,
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
    for field in (
        "gamma",
        "epsilon_start",
        "epsilon_end",
        "apex_epsilon",
        "per_alpha",
        "per_beta_start",
        "per_beta_end",
    ):
        require_range(config, field, 0.0, 1.0)
    if not isinstance(config.v_min, jax.core.Tracer) and not isinstance(config.v_max, jax.core.Tracer):
        if not np.all(np.asarray(config.v_min) < np.asarray(config.v_max)):
            raise ValueError(f"v_min ({config.v_min}) must be below v_max ({config.v_max})")


def init(key: jax.Array, config: Config) -> State:
    """Online and target networks, optimiser, an empty buffer and ``num_envs`` reset envs."""
    _check_traced(config)
    env, env_params = offpolicy.make_env(config)
    params_key, noise_key, env_key = jax.random.split(key, 3)
    obs, env_state = rollout.reset(env, env_params, env_key, config.num_envs)
    network_params = make_network(config).init(
        {"params": params_key, "noise": noise_key}, jax.tree.map(lambda x: x[:1], obs)
    )
    return State(
        params={"network": network_params},
        target_params=network_params,
        opt_state=make_optimizer(config).init(network_params),
        buffer=offpolicy.init_buffer(obs, jnp.zeros(config.num_envs, jnp.int32), config, config.prioritized),
        env_state=env_state,
        obs=obs,
        timesteps=jnp.zeros((), jnp.int32),
        updates=jnp.zeros((), jnp.int32),
    )


# ----------------------------------------------------------------------------- acting


def support(config: Config) -> jax.Array:
    """The C51 atoms ``[num_atoms]``, evenly spaced on ``[v_min, v_max]``."""
    return jnp.linspace(config.v_min, config.v_max, config.num_atoms)


def draw_noise(key: jax.Array, config: Config, shape: tuple = ()) -> jax.Array:
    """Noisy nets' standard normal draws ``[*shape, noise_size]``: ``prod(shape)``
    noise samples for the whole network, in one RNG call."""
    return jax.random.normal(key, shape + (make_network(config).noise_size(),))


def _network_out(network_params, obs, noise: jax.Array | None, config: Config) -> jax.Array:
    """Q-values ``[B, A]`` or C51 logits ``[B, A, K]``; ``noise`` is one sample of
    :func:`draw_noise`, or None for the noise-free network."""
    network = make_network(config)
    if config.noisy and noise is not None:
        return network.apply(network_params, obs, noise=noise)
    return network.apply(network_params, obs, deterministic=True)


def _q_values(out: jax.Array, config: Config) -> jax.Array:
    if config.distributional:
        return jnp.sum(jax.nn.softmax(out, axis=-1) * support(config), axis=-1)
    return out


def q_values(params: dict, obs: jax.Array, config: Config, noise_key: jax.Array | None = None) -> jax.Array:
    """Action values ``[B, A]`` for observations ``[B, *obs_shape]`` (C51: the means)."""
    noise = None if noise_key is None or not config.noisy else draw_noise(noise_key, config)
    return _q_values(_network_out(params["network"], obs, noise, config), config)


def act(
    params: dict,
    obs: jax.Array,
    key: jax.Array,
    config: Config,
    deterministic: bool = False,
    epsilon: jax.Array | float = 0.0,
) -> jax.Array:
    """Actions ``[B]`` for observations ``[B, *obs_shape]``.

    Greedy in the Q-values; with probability ``epsilon`` (a scalar or one per row) a
    uniformly random action instead. Noisy nets draw fresh noise unless
    ``deterministic``, which also turns epsilon off."""
    noise_key, explore_key, random_key = jax.random.split(key, 3)
    q = q_values(params, obs, config, None if deterministic else noise_key)
    greedy = jnp.argmax(q, axis=-1).astype(jnp.int32)
    if deterministic:
        return greedy
    random_action = jax.random.randint(random_key, greedy.shape, 0, q.shape[-1], jnp.int32)
    explore = jax.random.uniform(explore_key, greedy.shape) < epsilon
    return jnp.where(explore, random_action, greedy)


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
    """A batch of :func:`jaxrl.offpolicy.sample`: ``batch_size`` n-step transitions
    with importance-sampling ``weight`` (beta annealed over the run) and ``index``."""
    progress = jnp.clip(state.timesteps / config.total_timesteps, 0.0, 1.0)
    beta = config.per_beta_start + progress * (config.per_beta_end - config.per_beta_start)
    return offpolicy.sample(state.buffer, key, config, beta)


def loss_fn(network_params, target_params, batch: dict, key: jax.Array, config: Config):
    """Weighted TD loss on a batch from :func:`sample`.

    Noisy nets take one noise sample for the online network, at ``s`` and at ``s'``
    (where double Q-learning picks the next action with it), and an independent one for
    the target network, as in Hessel et al.'s Rainbow, both drawn from ``key``.

    Returns ``(loss, (metrics, priority_error [B]))``; ``priority_error`` is the TD
    error (C51: the KL divergence from the projected target) that prioritized replay
    turns into priorities.
    """
    online_noise, target_noise = draw_noise(key, config, (2,)) if config.noisy else (None, None)
    rows = jnp.arange(config.batch_size)
    out = _network_out(network_params, batch["obs"], online_noise, config)[rows, batch["action"]]
    next_target = _network_out(target_params, batch["next_obs"], target_noise, config)
    if config.double:  # the online network picks the next action, the target evaluates it
        next_online = _network_out(network_params, batch["next_obs"], online_noise, config)
        next_action = jnp.argmax(_q_values(next_online, config), axis=-1)
    else:
        next_action = jnp.argmax(_q_values(next_target, config), axis=-1)
    next_out = jax.lax.stop_gradient(next_target[rows, next_action])
    discount = batch["discount"] * (1.0 - batch["terminated"].astype(jnp.float32))

    if config.distributional:
        target = returns.categorical_projection(jax.nn.softmax(next_out), batch["reward"], discount, support(config))
        log_probs = jax.nn.log_softmax(out)
        elementwise = -jnp.sum(target * log_probs, axis=-1)
        priority_error = elementwise + jnp.sum(jax.scipy.special.xlogy(target, target), axis=-1)
        q_taken = jnp.sum(jnp.exp(log_probs) * support(config), axis=-1)
    else:
        q_taken = out
        priority_error = batch["reward"] + discount * next_out - q_taken
        if config.loss == "huber":
            elementwise = optax.huber_loss(priority_error)
        else:
            elementwise = 0.5 * jnp.square(priority_error)
    loss = jnp.mean(batch["weight"] * elementwise)
    metrics = {"loss": loss, "q_mean": jnp.mean(q_taken), "td_abs": jnp.mean(jnp.abs(priority_error))}
    return loss, (metrics, jax.lax.stop_gradient(priority_error))


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
    if config.prioritized:
        buffer = prioritized.update_priorities(buffer, batch["index"], priority_error, config.per_alpha, config.per_eps)
    state = state.replace(
        params={"network": network_params},
        target_params=target_params,
        opt_state=opt_state,
        buffer=buffer,
        updates=num_updates,
    )
    return state, metrics


def _collect(state: State, key: jax.Array, config: Config, lane_epsilon: jax.Array):
    """``num_steps`` epsilon-greedy steps from every env, stored in the buffer."""

    def policy(obs, policy_key):
        return act(state.params, obs, policy_key, config, epsilon=lane_epsilon), {}

    state, metrics = offpolicy.collect(state, policy, key, config)
    metrics["epsilon"] = jnp.mean(lane_epsilon)
    return state, metrics


def step(state: State, key: jax.Array, config: Config):
    """One iteration: collect and store ``num_envs x num_steps`` steps, then
    ``num_updates`` sampled updates. Metrics are averaged over the updates."""
    collect_key, update_key = jax.random.split(key)
    state, metrics = _collect(state, collect_key, config, epsilon(state.timesteps, config))

    def one_update(state, key, j):
        sample_key, loss_key = jax.random.split(key)
        return update(state, sample(state, sample_key, config), loss_key, config)

    state, learner_metrics = offpolicy.run_updates(state, one_update, update_key, config.num_updates)
    metrics.update(learner_metrics)
    return state, metrics


def warmup_step(state: State, key: jax.Array, config: Config):
    """An iteration before ``learning_starts``: uniformly random actions, no updates
    (learner metrics are NaN)."""
    state, metrics = _collect(state, key, config, jnp.ones(config.num_envs, jnp.float32))
    metrics.update(offpolicy.nan_metrics(LEARNER_METRICS))
    return state, metrics


# ----------------------------------------------------------------------------- training


def evaluate(params: dict, key: jax.Array, config: Config) -> evaluation.EvalResult:
    """Greedy (noise-free) returns of ``eval_episodes`` episodes."""
    return evaluation.evaluate_config(act, params, key, config)


def program(config: Config) -> loop.Program:
    """The run as a :class:`jaxrl.loop.Program` (for :mod:`jaxrl.runner`'s chunked training)."""
    return offpolicy.program(init, step, warmup_step, evaluate, config)


def train(key: jax.Array, config: Config) -> TrainOutput:
    """``init``, then ``num_iterations`` iterations in one scan: :func:`warmup_step` for
    the first ``warmup_iterations``, :func:`step` after. Metric leaves are
    ``[num_iterations]``, with ``eval_return`` / ``eval_length`` NaN except at the
    ``num_evals`` evaluation points."""
    return loop.train(program(config), key)
