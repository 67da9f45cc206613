"""Soft actor-critic (Haarnoja et al., 2018): a stochastic actor that maximises return
plus ``alpha`` times its entropy, twin Q-critics with Polyak-averaged targets, and
automatic tuning of ``alpha`` toward a target entropy.

Continuous actions: a tanh-squashed Gaussian mapped onto the env's Box bounds (the
log-density carries the tanh correction). ``discrete=True``: a categorical policy and
critics that output every action's value (Christodoulou, 2019), with exact
expectations over actions in place of samples.

    config = sac.Config(env_id="Pendulum-v1")
    out = jax.jit(sac.train)(jax.random.key(0), config)
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxrl import envs, evaluation, loop, offpolicy, optim, rollout
from jaxrl.config import freeze_mapping, require_network, require_range, static
from jaxrl.distributions import Categorical, TanhNormal
from jaxrl.networks import Actor, ContinuousQ, QNetwork, ensemble
from jaxrl.types import TrainOutput

LEARNER_METRICS = ("critic_loss", "actor_loss", "alpha_loss", "q_mean", "alpha", "entropy")


@struct.dataclass
class Config(offpolicy.ReplaySchedule):
    """SAC settings. Static fields fix the program; the rest can be traced and vmapped.

    One iteration collects ``num_steps`` steps from each of ``num_envs`` envs, then
    runs ``num_updates`` updates (critics, actor, temperature, targets) on batches of
    ``batch_size``.
    """

    # --- static: environment and program structure
    env_id: str = static("Pendulum-v1")
    env_kwargs: Any = static(())  # EnvParams overrides
    discrete: bool = static(False)  # categorical policy for Discrete action spaces
    num_envs: int = static(4)
    num_steps: int = static(1)  # env steps per env per iteration
    num_updates: int = static(4)  # gradient updates per iteration
    batch_size: int = static(256)
    buffer_size: int = static(100_000)  # transitions (rounded up to a multiple of num_envs)
    learning_starts: int = static(1_000)  # random-action env steps before the first update
    total_timesteps: int = static(20_000)
    n_step: int = static(1)  # n-step targets (the entropy bonus of the last step only)
    network: str = static("mlp")  # "cnn" (MinAtar) only with discrete=True
    hidden_sizes: tuple = static((64, 64))  # small nets suit classic control; (256, 256) for MuJoCo
    activation: str = static("relu")
    autotune: bool = static(True)  # learn alpha; False keeps it at ``alpha``
    num_evals: int = static(10)
    eval_episodes: int = static(10)
    num_reports: int = static(50)
    # --- traced hyper-parameters
    learning_rate: float = 1e-3  # actor, critics and temperature (Adam)
    gamma: float = 0.99
    tau: float = 0.005  # Polyak rate of the target critics
    alpha: float = 0.2  # the fixed temperature, or the initial one with autotune
    target_entropy: Any = None  # None: -|A| (continuous), 0.5 log |A| (discrete)

    def __post_init__(self):
        object.__setattr__(self, "env_kwargs", freeze_mapping(self.env_kwargs, "env_kwargs"))
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        self.check_schedule()
        spec = envs.config_spec(self)
        if self.discrete and not spec.discrete:
            raise ValueError(
                f"discrete=True needs a Discrete action space; env_id {self.env_id!r} has a "
                f"continuous (Box) action space of shape {spec.action_shape}"
            )
        if not self.discrete:
            if spec.discrete:
                raise ValueError(
                    f"env_id {self.env_id!r} has {spec.num_actions} discrete actions: "
                    "set discrete=True for SAC's categorical policy"
                )
            offpolicy.require_box_actions(self, "SAC")
        require_network(self, spec.obs_shape)
        if self.network != "mlp" and not self.discrete:
            raise ValueError(f"network must be 'mlp' for continuous-action critics, got {self.network!r}")


@struct.dataclass
class State:
    params: dict  # {"actor": flax params}: all ``act`` needs
    critic_params: Any  # twin critics' flax params (leading [2] axis)
    target_params: dict  # {"critic": ...}
    log_alpha: jax.Array  # float32 scalar: log of the entropy temperature
    opt_state: dict  # {"actor": ..., "critic": ..., "alpha": ...}
    buffer: Any  # replay.ReplayState
    env_state: Any  # batched env state [num_envs]
    obs: Any  # [num_envs, *obs_shape]
    timesteps: jax.Array  # int32 env steps so far
    updates: jax.Array  # int32 gradient updates so far


# ----------------------------------------------------------------------------- set-up


def env_spec(config: Config) -> envs.EnvSpec:
    return envs.config_spec(config)


def _action_dim(config: Config) -> int:
    spec = env_spec(config)
    return spec.num_actions if config.discrete else int(np.prod(spec.action_shape))


def make_actor(config: Config) -> Actor:
    return Actor(
        _action_dim(config),
        "categorical" if config.discrete else "gaussian",
        config.network,
        config.hidden_sizes,
        config.activation,
        len(env_spec(config).obs_shape),
    )


def make_critic(config: Config):
    """Twin critics: ``(obs, unit action [B, A]) -> [2, B]``, or with ``discrete``
    ``obs -> [2, B, num_actions]``."""
    obs_ndim = len(env_spec(config).obs_shape)
    if config.discrete:
        return ensemble(QNetwork, 2)(
            _action_dim(config), config.network, config.hidden_sizes, config.activation, obs_ndim
        )
    return ensemble(ContinuousQ, 2)(config.hidden_sizes, config.activation, obs_ndim)


def make_optimizer(config: Config) -> optax.GradientTransformation:
    return optax.inject_hyperparams(optax.adam)(learning_rate=config.learning_rate)


def target_entropy(config: Config) -> jax.Array:
    """``config.target_entropy``, or by default ``-|A|`` for continuous actions and
    ``0.5 log(num_actions)`` (half the uniform policy's entropy) for discrete ones."""
    if config.target_entropy is not None:
        return jnp.asarray(config.target_entropy, jnp.float32)
    if config.discrete:
        return jnp.asarray(0.5 * math.log(_action_dim(config)), jnp.float32)
    return jnp.asarray(-float(_action_dim(config)), jnp.float32)


def _check_traced(config: Config) -> None:
    require_range(config, "learning_rate", 0.0, float("inf"), low_open=True)
    require_range(config, "gamma", 0.0, 1.0)
    require_range(config, "tau", 0.0, 1.0, low_open=True)
    require_range(config, "alpha", 0.0, float("inf"), low_open=True)
    if config.target_entropy is not None:
        require_range(config, "target_entropy", -float("inf"), float("inf"))


def init(key: jax.Array, config: Config) -> State:
    """Actor, twin critics and their targets, the temperature, optimisers, an empty
    buffer and ``num_envs`` reset envs."""
    _check_traced(config)
    env, env_params = offpolicy.make_env(config)
    actor_key, critic_key, env_key = jax.random.split(key, 3)
    obs, env_state = rollout.reset(env, env_params, env_key, config.num_envs)
    spec = env_spec(config)
    if config.discrete:
        action = jnp.zeros(config.num_envs, jnp.int32)
        critic_params = make_critic(config).init(critic_key, obs[:1])
    else:
        action = jnp.zeros((config.num_envs,) + spec.action_shape, jnp.float32)
        critic_params = make_critic(config).init(critic_key, obs[:1], action[:1].reshape(1, -1))
    actor_params = make_actor(config).init(actor_key, obs[:1])
    log_alpha = jnp.log(jnp.asarray(config.alpha, jnp.float32))
    optimizer = make_optimizer(config)
    return State(
        params={"actor": actor_params},
        critic_params=critic_params,
        target_params={"critic": critic_params},
        log_alpha=log_alpha,
        opt_state={
            "actor": optimizer.init(actor_params),
            "critic": optimizer.init(critic_params),
            "alpha": optimizer.init(log_alpha),
        },
        buffer=offpolicy.init_buffer(obs, action, config),
        env_state=env_state,
        obs=obs,
        timesteps=jnp.zeros((), jnp.int32),
        updates=jnp.zeros((), jnp.int32),
    )


# ----------------------------------------------------------------------------- acting


def policy_distribution(actor_params, obs: jax.Array, config: Config):
    """The policy at ``obs [B, ...]``: a :class:`Categorical` over actions, or a
    :class:`TanhNormal` over unit actions ``[B, A]`` in ``(-1, 1)``."""
    out = make_actor(config).apply(actor_params, obs)
    if config.discrete:
        return Categorical(out)
    loc, log_std = out
    return TanhNormal(loc, jnp.exp(log_std))


initial_carry = offpolicy.initial_carry


def act(params: dict, obs: jax.Array, carry, key: jax.Array, config: Config, deterministic: bool = False):
    """``(action, carry)`` for observations ``[B, *obs_shape]``: the action sampled from
    the policy, or its mode when ``deterministic`` (``tanh`` of the mean; the most likely
    action), int32 ``[B]`` with ``discrete``, else ``[B, *action_shape]`` within the
    bounds. The actor has no memory: ``carry`` (:func:`initial_carry`: ``()``) is
    passed through."""
    dist = policy_distribution(params["actor"], obs, config)
    action = dist.mode() if deterministic else dist.sample(key)
    if config.discrete:
        return action, carry
    spec = env_spec(config)
    return spec.from_unit(action.reshape(action.shape[:1] + spec.action_shape)), carry


# ----------------------------------------------------------------------------- learning


def _soft_values(actor_params, critic_params, obs, key, config: Config):
    """``(E_pi[min_i Q_i(s, a)], E_pi[log pi(a|s)])``, each ``[B]``: one reparameterised
    sample for continuous actions, the exact sum over actions for discrete ones."""
    dist = policy_distribution(actor_params, obs, config)
    if config.discrete:
        q = jnp.min(make_critic(config).apply(critic_params, obs), axis=0)  # [B, A]
        probs, log_probs = dist.probs(), jax.nn.log_softmax(dist.logits)
        return jnp.sum(probs * q, axis=-1), jnp.sum(probs * log_probs, axis=-1)
    action, log_prob = dist.sample_and_log_prob(key)
    return jnp.min(make_critic(config).apply(critic_params, obs, action), axis=0), log_prob


def critic_target(
    actor_params, target_critic_params, alpha: jax.Array, batch: dict, key: jax.Array, config: Config
) -> jax.Array:
    """Soft TD targets ``[B]``: ``reward + discount * (1 - terminated) * V(s')`` with
    ``V(s') = E_{a' ~ pi}[min_i Q'_i(s', a') - alpha log pi(a'|s')]``."""
    next_q, next_log_prob = _soft_values(actor_params, target_critic_params, batch["next_obs"], key, config)
    discount = batch["discount"] * (1.0 - batch["terminated"].astype(jnp.float32))
    return batch["reward"] + discount * (next_q - alpha * next_log_prob)


def critic_loss(critic_params, target: jax.Array, batch: dict, config: Config):
    """Squared error of both critics against ``target [B]``, summed over critics.
    Returns ``(loss, q_mean)``."""
    if config.discrete:
        q = make_critic(config).apply(critic_params, batch["obs"])  # [2, B, A]
        one_hot = jax.nn.one_hot(batch["action"], q.shape[-1], dtype=q.dtype)
        q = jnp.sum(q * one_hot, axis=-1)
    else:
        action = env_spec(config).to_unit(batch["action"])
        q = make_critic(config).apply(critic_params, batch["obs"], action.reshape(action.shape[:1] + (-1,)))
    return jnp.sum(jnp.mean(jnp.square(q - target), axis=-1)), jnp.mean(q)


def actor_loss(actor_params, critic_params, alpha: jax.Array, obs: jax.Array, key: jax.Array, config: Config):
    """``mean(alpha log pi(a|s) - min_i Q_i(s, a))`` over ``obs``. Returns
    ``(loss, entropy)``, the entropy estimate ``-mean log pi`` (exact for discrete)."""
    q, log_prob = _soft_values(actor_params, critic_params, obs, key, config)
    return jnp.mean(alpha * log_prob - q), -jnp.mean(log_prob)


def alpha_loss(log_alpha: jax.Array, entropy: jax.Array, config: Config) -> jax.Array:
    """``log_alpha * (entropy - target_entropy)``: alpha falls while the policy's
    entropy is above the target and rises below it."""
    return log_alpha * (jax.lax.stop_gradient(entropy) - target_entropy(config))


def update(state: State, batch: dict, key: jax.Array, config: Config):
    """One step of the critics, then the actor (against the updated critics), then the
    temperature (with ``autotune``), then the Polyak update of the target critics.
    ``batch`` comes from :func:`jaxrl.offpolicy.sample`. Returns ``(state, metrics)``."""
    target_key, actor_key = jax.random.split(key)
    optimizer = make_optimizer(config)
    alpha = jnp.exp(state.log_alpha)
    target = critic_target(state.params["actor"], state.target_params["critic"], alpha, batch, target_key, config)
    critic_params, critic_opt, c_loss, q_mean = optim.step(
        optimizer, critic_loss, state.critic_params, state.opt_state["critic"], target, batch, config
    )
    actor_params, actor_opt, a_loss, entropy = optim.step(
        optimizer,
        actor_loss,
        state.params["actor"],
        state.opt_state["actor"],
        critic_params,
        alpha,
        batch["obs"],
        actor_key,
        config,
    )

    t_loss, grad = jax.value_and_grad(alpha_loss)(state.log_alpha, entropy, config)
    log_alpha, alpha_opt = state.log_alpha, state.opt_state["alpha"]
    if config.autotune:
        updates, alpha_opt = optimizer.update(grad, alpha_opt, log_alpha)
        log_alpha = optax.apply_updates(log_alpha, updates)

    state = state.replace(
        params={"actor": actor_params},
        critic_params=critic_params,
        target_params={"critic": offpolicy.polyak(state.target_params["critic"], critic_params, config.tau)},
        log_alpha=log_alpha,
        opt_state={"actor": actor_opt, "critic": critic_opt, "alpha": alpha_opt},
        updates=state.updates + 1,
    )
    metrics = {
        "critic_loss": c_loss,
        "actor_loss": a_loss,
        "alpha_loss": t_loss,
        "q_mean": q_mean,
        "alpha": alpha,
        "entropy": entropy,
    }
    return state, metrics


def step(state: State, key: jax.Array, config: Config):
    """One iteration: collect and store ``num_envs x num_steps`` steps sampled from the
    policy, then ``num_updates`` updates. Metrics are averaged over the updates."""
    return offpolicy.step(state, key, config, act, lambda state, batch, key, _: update(state, batch, key, config))


def warmup_step(state: State, key: jax.Array, config: Config):
    """An iteration before ``learning_starts``: uniformly random actions, no updates
    (learner metrics are NaN)."""
    return offpolicy.random_step(state, key, config, LEARNER_METRICS)


# ----------------------------------------------------------------------------- training


def evaluate(params: dict, key: jax.Array, config: Config) -> evaluation.EvalResult:
    """Returns of ``eval_episodes`` episodes of the deterministic policy (its mode)."""
    return evaluation.evaluate_config(act, initial_carry, params, key, config)


def program(config: Config) -> loop.Program:
    """The run as a :class:`jaxrl.loop.Program` (for :mod:`jaxrl.runner`'s chunked training)."""
    return offpolicy.program(init, step, warmup_step, evaluate, config)


def train(key: jax.Array, config: Config) -> TrainOutput:
    """``init``, then ``num_iterations`` iterations in one scan: :func:`warmup_step` for
    the first ``warmup_iterations``, :func:`step` after. Metric leaves are
    ``[num_iterations]``, with ``eval_return`` / ``eval_length`` NaN except at the
    ``num_evals`` evaluation points."""
    return loop.train(program(config), key)
