"""Proximal Policy Optimization (Schulman et al., 2017, arXiv:1707.06347).

Clipped surrogate objective with GAE(lambda) advantages, optional value clipping,
entropy bonus, global-norm gradient clipping, learning-rate annealing, advantage
normalisation and optional observation normalisation; discrete (categorical) and
continuous (diagonal Gaussian) actions. One iteration collects ``num_steps`` steps from
``num_envs`` envs and runs ``num_epochs`` passes of ``num_minibatches`` minibatches.

    config = ppo.Config(env_id="CartPole-v1")
    out = jax.jit(ppo.train)(jax.random.key(0), config)
    out.metrics["eval_return"]   # [num_iterations], NaN where no evaluation ran
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import envs, evaluation, loop, returns, rollout
from jaxrl.config import freeze_mapping, require_int, require_network, require_range, static
from jaxrl.distributions import Categorical, Normal
from jaxrl.networks import ActorCritic
from jaxrl.types import Trajectory, TrainOutput


@struct.dataclass
class Config:
    """PPO settings. Static fields fix the program; the rest can be traced and vmapped.

    The defaults are PureJaxRL's CartPole configuration; ``preset(env_id)`` gives
    tuned settings for other tasks (e.g. Pendulum-v1).
    """

    # --- static: environment and program structure
    env_id: str = static("CartPole-v1")
    env_kwargs: Any = static(())             # EnvParams overrides, e.g. {"max_steps_in_episode": 200}
    num_envs: int = static(4)
    num_steps: int = static(128)             # rollout length per env per iteration
    total_timesteps: int = static(500_000)
    num_epochs: int = static(4)
    num_minibatches: int = static(4)
    network: str = static("mlp")             # "mlp" or "cnn" (MinAtar)
    hidden_sizes: tuple = static((64, 64))
    activation: str = static("tanh")
    anneal_lr: bool = static(True)           # linearly to 0 over the run
    normalize_advantages: bool = static(True)
    clip_value_loss: bool = static(True)
    normalize_observations: bool = static(False)  # running stats kept in params
    scale_rewards: bool = static(False)      # divide rewards by running return std
    log_std_init: float = static(0.0)        # continuous actions only
    num_evals: int = static(10)              # deterministic evaluations over the run
    eval_episodes: int = static(10)
    num_reports: int = static(50)            # progress reports to host sinks over the run
    # --- traced hyper-parameters
    learning_rate: float = 2.5e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5

    def __post_init__(self):
        object.__setattr__(self, "env_kwargs", freeze_mapping(self.env_kwargs, "env_kwargs"))
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        for field in ("num_envs", "num_steps", "num_epochs", "num_minibatches", "eval_episodes"):
            require_int(self, field, 1)
        for field in ("num_evals", "num_reports"):
            require_int(self, field, 0)
        require_int(self, "total_timesteps", self.num_envs * self.num_steps)
        if (self.num_envs * self.num_steps) % self.num_minibatches:
            raise ValueError(
                f"num_minibatches ({self.num_minibatches}) must divide the batch "
                f"num_envs * num_steps = {self.num_envs * self.num_steps}"
            )
        require_network(self, env_spec(self).obs_shape)

    @property
    def num_iterations(self) -> int:
        return self.total_timesteps // (self.num_envs * self.num_steps)


PRESETS = {
    "CartPole-v1": {},
    "Pendulum-v1": dict(
        num_envs=16, num_steps=64, total_timesteps=300_000, num_epochs=10, num_minibatches=8,
        learning_rate=1e-3, gamma=0.95, gae_lambda=0.95, ent_coef=0.0, normalize_observations=True,
        scale_rewards=True, clip_value_loss=False, log_std_init=-0.5,
    ),
}


def preset(env_id: str, **overrides) -> Config:
    """A Config with settings tuned for ``env_id`` (the defaults where none are known)."""
    return Config(env_id=env_id, **{**PRESETS.get(env_id, {}), **overrides})


@struct.dataclass
class State:
    params: dict            # {"network": flax params, "obs_stats": RunningStats}
    opt_state: Any
    env_state: Any          # batched env state [num_envs]
    obs: Any                # [num_envs, *obs_shape] observation to act on next
    timesteps: jax.Array    # int32 env steps taken so far


# ----------------------------------------------------------------------------- set-up


def env_spec(config: Config) -> envs.EnvSpec:
    return envs.config_spec(config)


def make_env(config: Config):
    """The training env (episode statistics, action clipping, optional reward scaling)."""
    env, env_params = envs.make(config.env_id, **dict(config.env_kwargs))
    env = envs.EpisodeStatistics(envs.ClipAction(env))
    if config.scale_rewards:
        env = envs.ScaleReward(env, gamma=config.gamma)
    return env, env_params


def make_network(config: Config) -> ActorCritic:
    spec = env_spec(config)
    return ActorCritic(
        action_dim=spec.num_actions if spec.discrete else spec.action_shape[0],
        discrete=spec.discrete,
        network=config.network,
        hidden_sizes=config.hidden_sizes,
        activation=config.activation,
        obs_ndim=len(spec.obs_shape),
        log_std_init=config.log_std_init,
    )


def make_optimizer(config: Config) -> optax.GradientTransformation:
    num_updates = config.num_iterations * config.num_epochs * config.num_minibatches

    def learning_rate(count):
        if not config.anneal_lr:
            return config.learning_rate
        return config.learning_rate * (1.0 - jnp.minimum(count, num_updates) / num_updates)

    return optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm),
        optax.inject_hyperparams(optax.adam)(learning_rate=learning_rate, eps=1e-5),
    )


def _check_traced(config: Config) -> None:
    require_range(config, "learning_rate", 0.0, float("inf"), low_open=True)
    require_range(config, "gamma", 0.0, 1.0)
    require_range(config, "gae_lambda", 0.0, 1.0)
    require_range(config, "clip_eps", 0.0, float("inf"), low_open=True)
    require_range(config, "max_grad_norm", 0.0, float("inf"), low_open=True)
    for field in ("ent_coef", "vf_coef"):
        require_range(config, field, 0.0, float("inf"))


def init(key: jax.Array, config: Config) -> State:
    """Network, optimiser and ``num_envs`` freshly reset envs."""
    _check_traced(config)
    env, env_params = make_env(config)
    spec = env_spec(config)
    network_key, env_key = jax.random.split(key)
    dummy_obs = jnp.zeros((1,) + spec.obs_shape, jnp.float32)
    params = {
        "network": make_network(config).init(network_key, dummy_obs),
        "obs_stats": envs.running_stats_init(spec.obs_shape),
    }
    obs, env_state = rollout.reset(env, env_params, env_key, config.num_envs)
    return State(
        params=params,
        opt_state=make_optimizer(config).init(params["network"]),
        env_state=env_state,
        obs=obs,
        timesteps=jnp.zeros((), jnp.int32),
    )


# ----------------------------------------------------------------------------- acting


def _policy_and_value(params: dict, obs: jax.Array, config: Config):
    """``(distribution, value [B])`` for raw observations ``[B, *obs_shape]``."""
    if config.normalize_observations:
        obs = envs.normalize(params["obs_stats"], obs)
    policy_out, value = make_network(config).apply(params["network"], obs)
    if env_spec(config).discrete:
        return Categorical(policy_out), value
    mean, log_std = policy_out
    return Normal(mean, jnp.broadcast_to(jnp.exp(log_std), mean.shape)), value


def act(params: dict, obs: jax.Array, key: jax.Array, config: Config, deterministic: bool = False) -> jax.Array:
    """Actions ``[B, ...]`` for raw observations ``[B, *obs_shape]``.

    Samples from the policy, or takes its mode if ``deterministic``; continuous actions
    are clipped to the action bounds."""
    distribution, _ = _policy_and_value(params, obs, config)
    action = distribution.mode() if deterministic else distribution.sample(key)
    spec = env_spec(config)
    if not spec.discrete:
        action = jnp.clip(action, spec.action_low, spec.action_high)
    return action


# ----------------------------------------------------------------------------- learning


def loss_fn(network_params, obs_stats, batch: dict, config: Config):
    """PPO loss on a minibatch of flat ``[B, ...]`` arrays; returns ``(loss, metrics)``."""
    params = {"network": network_params, "obs_stats": obs_stats}
    distribution, value = _policy_and_value(params, batch["obs"], config)
    log_prob = distribution.log_prob(batch["action"])
    log_ratio = log_prob - batch["log_prob"]
    ratio = jnp.exp(log_ratio)
    advantage = batch["advantage"]
    if config.normalize_advantages:
        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
    clipped_ratio = jnp.clip(ratio, 1.0 - config.clip_eps, 1.0 + config.clip_eps)
    policy_loss = -jnp.mean(jnp.minimum(ratio * advantage, clipped_ratio * advantage))

    value_error = jnp.square(value - batch["target"])
    if config.clip_value_loss:
        clipped_value = batch["value"] + jnp.clip(value - batch["value"], -config.clip_eps, config.clip_eps)
        value_error = jnp.maximum(value_error, jnp.square(clipped_value - batch["target"]))
    value_loss = 0.5 * jnp.mean(value_error)

    entropy = jnp.mean(distribution.entropy())
    loss = policy_loss + config.vf_coef * value_loss - config.ent_coef * entropy
    metrics = {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "approx_kl": jnp.mean((ratio - 1.0) - log_ratio),
        "clip_fraction": jnp.mean(jnp.abs(ratio - 1.0) > config.clip_eps),
    }
    return loss, metrics


def compute_targets(params: dict, trajectory: Trajectory, config: Config):
    """GAE advantages and value targets ``[T, N]``, bootstrapping from ``next_obs``."""
    _, value_next = _policy_and_value(params, trajectory.next_obs, config)
    advantage = returns.gae(
        trajectory.reward, trajectory.extras["value"], value_next,
        trajectory.terminated, trajectory.truncated, config.gamma, config.gae_lambda,
    )
    return advantage, advantage + trajectory.extras["value"]


def update(state: State, trajectory: Trajectory, key: jax.Array, config: Config):
    """``num_epochs`` passes of minibatch updates on one on-policy trajectory ``[T, N]``.

    The trajectory's ``extras`` must hold the behaviour ``log_prob`` and ``value``.
    Returns ``(state, metrics)`` with metrics averaged over all minibatches.
    """
    advantage, target = compute_targets(state.params, trajectory, config)
    batch = {
        "obs": trajectory.obs, "action": trajectory.action, "log_prob": trajectory.extras["log_prob"],
        "value": trajectory.extras["value"], "advantage": advantage, "target": target,
    }
    batch_size = config.num_envs * config.num_steps
    batch = jax.tree.map(lambda x: x.reshape((batch_size,) + x.shape[2:]), batch)
    optimizer = make_optimizer(config)
    obs_stats = state.params["obs_stats"]
    grad_fn = jax.grad(loss_fn, has_aux=True)

    def minibatch_step(carry, minibatch):
        network_params, opt_state = carry
        grads, metrics = grad_fn(network_params, obs_stats, minibatch, config)
        updates, opt_state = optimizer.update(grads, opt_state, network_params)
        return (optax.apply_updates(network_params, updates), opt_state), metrics

    def epoch(carry, epoch_key):
        # Shuffle by one permutation, then reshape into minibatches.
        permutation = jax.random.permutation(epoch_key, batch_size)
        minibatches = jax.tree.map(
            lambda x: x[permutation].reshape((config.num_minibatches, -1) + x.shape[1:]), batch
        )
        return jax.lax.scan(minibatch_step, carry, minibatches)

    (network_params, opt_state), metrics = jax.lax.scan(
        epoch, (state.params["network"], state.opt_state), jax.random.split(key, config.num_epochs)
    )
    metrics = jax.tree.map(jnp.mean, metrics)
    metrics["learning_rate"] = opt_state[1].hyperparams["learning_rate"]
    state = state.replace(params={**state.params, "network": network_params}, opt_state=opt_state)
    return state, metrics


def step(state: State, key: jax.Array, config: Config):
    """One iteration: collect ``num_steps x num_envs`` steps, then :func:`update`."""
    env, env_params = make_env(config)
    collect_key, update_key = jax.random.split(key)

    def policy(obs, policy_key):
        distribution, value = _policy_and_value(state.params, obs, config)
        action = distribution.sample(policy_key)
        return action, {"log_prob": distribution.log_prob(action), "value": value}

    trajectory, env_state, obs = rollout.collect(
        env, env_params, policy, state.env_state, state.obs, collect_key, config.num_steps
    )
    state = state.replace(env_state=env_state, obs=obs, timesteps=state.timesteps + config.num_envs * config.num_steps)
    state, metrics = update(state, trajectory, update_key, config)
    if config.normalize_observations:
        # After the update, so that update saw the statistics the data was collected with.
        flat_obs = trajectory.obs.reshape((-1,) + trajectory.obs.shape[2:])
        obs_stats = envs.running_stats_update(state.params["obs_stats"], flat_obs)
        state = state.replace(params={**state.params, "obs_stats": obs_stats})
    metrics.update(rollout.episode_metrics(trajectory), timesteps=state.timesteps)
    return state, metrics


# ----------------------------------------------------------------------------- training


def evaluate(params: dict, key: jax.Array, config: Config) -> evaluation.EvalResult:
    """Deterministic returns of ``eval_episodes`` episodes on the (unscaled) env."""
    return evaluation.evaluate_config(act, params, key, config)


def train(key: jax.Array, config: Config) -> TrainOutput:
    """``init`` then ``num_iterations`` of :func:`step` in one ``lax.scan``.

    Metrics leaves are ``[num_iterations]``: those of :func:`step`, plus
    ``eval_return`` / ``eval_length`` (NaN except at the ``num_evals`` evaluation points).
    """
    init_key, run_key = jax.random.split(key)
    state, metrics = loop.iterate(
        lambda state, key, index: step(state, key, config), functools.partial(evaluate, config=config),
        init(init_key, config), run_key, 0, config.num_iterations,
        config.num_iterations, config.num_evals, config.num_reports,
    )
    return TrainOutput(state, metrics)
