"""DDPG (Lillicrap et al., 2016) and, through three flags, TD3 (Fujimoto et al., 2018):
a deterministic actor and Q-critics for continuous actions, learned off-policy from a
device replay buffer.

TD3's changes are config fields of this one implementation: ``twin_critics`` (the
target takes the minimum of two target critics), ``policy_delay`` (the actor and the
target networks move once every ``policy_delay`` critic updates) and ``target_noise`` /
``target_noise_clip`` (target policy smoothing). :mod:`jaxrl.algorithms.td3` is this
module with TD3's defaults.

Actions: the actor's ``tanh`` output in ``[-1, 1]`` is mapped onto the env's Box
bounds; exploration adds Gaussian noise of ``exploration_noise`` times the half-range.
The buffer stores env actions; the critics see them mapped back to ``[-1, 1]``.

    config = ddpg.Config(env_id="Pendulum-v1")
    out = jax.jit(ddpg.train)(jax.random.key(0), config)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxrl import envs, evaluation, loop, offpolicy, optim, rollout
from jaxrl.config import freeze_mapping, require_int, require_network, require_range, static
from jaxrl.networks import Actor, ContinuousQ, ensemble
from jaxrl.types import TrainOutput

LEARNER_METRICS = ("critic_loss", "actor_loss", "q_mean")


@struct.dataclass
class Config(offpolicy.ReplaySchedule):
    """DDPG settings (TD3 with ``twin_critics=True, policy_delay=2, target_noise=0.2``).
    Static fields fix the program; the rest can be traced and vmapped.

    One iteration collects ``num_steps`` steps from each of ``num_envs`` envs, then
    runs ``num_updates`` critic updates (and ``num_updates / policy_delay`` actor
    updates) on batches of ``batch_size``.
    """

    ALGORITHM = "DDPG"  # named in error messages (not a field)

    # --- static: environment and program structure
    env_id: str = static("Pendulum-v1")
    env_kwargs: Any = static(())  # EnvParams overrides
    num_envs: int = static(4)
    num_steps: int = static(1)  # env steps per env per iteration
    num_updates: int = static(4)  # critic updates per iteration
    batch_size: int = static(256)
    buffer_size: int = static(100_000)  # transitions (rounded up to a multiple of num_envs)
    learning_starts: int = static(1_000)  # random-action env steps before the first update
    total_timesteps: int = static(20_000)
    n_step: int = static(1)  # n-step targets (stop at episode ends)
    network: str = static("mlp")
    hidden_sizes: tuple = static((64, 64))  # small nets suit classic control; (256, 256) for MuJoCo
    activation: str = static("relu")
    twin_critics: bool = static(False)
    policy_delay: int = static(1)  # critic updates per actor / target update
    num_evals: int = static(10)
    eval_episodes: int = static(10)
    num_reports: int = static(50)
    # --- traced hyper-parameters
    learning_rate: float = 1e-3  # actor and critic (Adam)
    gamma: float = 0.99
    tau: float = 0.005  # Polyak rate of the target networks
    exploration_noise: float = 0.1  # Gaussian std, in units of the half action range
    target_noise: float = 0.0  # TD3 target smoothing std (same units); 0 is DDPG
    target_noise_clip: float = 0.5

    def __post_init__(self):
        object.__setattr__(self, "env_kwargs", freeze_mapping(self.env_kwargs, "env_kwargs"))
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        self.check_schedule()
        require_int(self, "policy_delay", 1)
        if self.num_updates % self.policy_delay:
            raise ValueError(
                f"num_updates ({self.num_updates}) must be a multiple of policy_delay ({self.policy_delay}), "
                "so every iteration runs whole actor-update periods"
            )
        spec = offpolicy.require_box_actions(self, self.ALGORITHM)
        require_network(self, spec.obs_shape)
        if self.network != "mlp":
            raise ValueError(f"network must be 'mlp' for continuous-action critics, got {self.network!r}")


@struct.dataclass
class State:
    params: dict  # {"actor": flax params}: all ``act`` needs
    critic_params: Any  # the critics' flax params (leading [num_critics] axis)
    target_params: dict  # {"actor": ..., "critic": ...}
    opt_state: dict  # {"actor": ..., "critic": ...}
    buffer: Any  # replay.ReplayState
    env_state: Any  # batched env state [num_envs]
    obs: Any  # [num_envs, *obs_shape]
    timesteps: jax.Array  # int32 env steps so far
    updates: jax.Array  # int32 critic updates so far


# ----------------------------------------------------------------------------- set-up


def env_spec(config: Config) -> envs.EnvSpec:
    return envs.config_spec(config)


def make_actor(config: Config) -> Actor:
    spec = env_spec(config)
    return Actor(
        int(np.prod(spec.action_shape)),
        "deterministic",
        config.network,
        config.hidden_sizes,
        config.activation,
        len(spec.obs_shape),
    )


def make_critic(config: Config, num_critics: int | None = None):
    """Q-critics ``(obs [B, ...], unit action [B, A]) -> [num_critics, B]``; by default
    two with ``twin_critics``, else one."""
    num_critics = num_critics or (2 if config.twin_critics else 1)
    return ensemble(ContinuousQ, num_critics)(config.hidden_sizes, config.activation, len(env_spec(config).obs_shape))


def make_optimizer(config: Config) -> optax.GradientTransformation:
    return optax.inject_hyperparams(optax.adam)(learning_rate=config.learning_rate)


def _check_traced(config: Config) -> None:
    require_range(config, "learning_rate", 0.0, float("inf"), low_open=True)
    require_range(config, "gamma", 0.0, 1.0)
    require_range(config, "tau", 0.0, 1.0, low_open=True)
    for field in ("exploration_noise", "target_noise", "target_noise_clip"):
        require_range(config, field, 0.0, float("inf"))


def init(key: jax.Array, config: Config) -> State:
    """Actor, critics, their targets (copies), optimisers, an empty buffer and
    ``num_envs`` reset envs."""
    _check_traced(config)
    env, env_params = offpolicy.make_env(config)
    actor_key, critic_key, env_key = jax.random.split(key, 3)
    obs, env_state = rollout.reset(env, env_params, env_key, config.num_envs)
    action = jnp.zeros((config.num_envs,) + env_spec(config).action_shape, jnp.float32)
    actor_params = make_actor(config).init(actor_key, obs[:1])
    critic_params = make_critic(config).init(critic_key, obs[:1], action[:1])
    optimizer = make_optimizer(config)
    return State(
        params={"actor": actor_params},
        critic_params=critic_params,
        target_params={"actor": actor_params, "critic": critic_params},
        opt_state={"actor": optimizer.init(actor_params), "critic": optimizer.init(critic_params)},
        buffer=offpolicy.init_buffer(obs, action, config),
        env_state=env_state,
        obs=obs,
        timesteps=jnp.zeros((), jnp.int32),
        updates=jnp.zeros((), jnp.int32),
    )


# ----------------------------------------------------------------------------- acting


initial_carry = offpolicy.initial_carry


def act(params: dict, obs: jax.Array, carry, key: jax.Array, config: Config, deterministic: bool = False):
    """``(action [B, *action_shape], carry)`` for observations ``[B, *obs_shape]``: the
    actor's, plus clipped Gaussian exploration noise unless ``deterministic``. The actor
    has no memory: ``carry`` (:func:`initial_carry`: ``()``) is passed through."""
    spec = env_spec(config)
    unit = make_actor(config).apply(params["actor"], obs)
    if not deterministic:
        unit = jnp.clip(unit + config.exploration_noise * jax.random.normal(key, unit.shape), -1.0, 1.0)
    return spec.from_unit(unit.reshape(unit.shape[:1] + spec.action_shape)), carry


# ----------------------------------------------------------------------------- learning


def critic_target(target_params: dict, batch: dict, key: jax.Array, config: Config) -> jax.Array:
    """TD targets ``[B]``: ``reward + discount * (1 - terminated) * min_i Q'_i(s', a')``
    with ``a' = clip(actor'(s') + clip(target_noise * N(0, 1), +-target_noise_clip), -1, 1)``
    (no noise when ``target_noise`` is 0; one critic without ``twin_critics``)."""
    next_action = make_actor(config).apply(target_params["actor"], batch["next_obs"])
    noise = config.target_noise * jax.random.normal(key, next_action.shape)
    noise = jnp.clip(noise, -config.target_noise_clip, config.target_noise_clip)
    next_action = jnp.clip(next_action + noise, -1.0, 1.0)
    next_q = jnp.min(make_critic(config).apply(target_params["critic"], batch["next_obs"], next_action), axis=0)
    discount = batch["discount"] * (1.0 - batch["terminated"].astype(jnp.float32))
    return batch["reward"] + discount * next_q


def _unit_action(batch: dict, config: Config) -> jax.Array:
    action = env_spec(config).to_unit(batch["action"])
    return action.reshape(action.shape[:1] + (-1,))


def critic_loss(critic_params, target: jax.Array, batch: dict, config: Config):
    """Squared TD error of each critic against ``target [B]``, summed over critics.
    Returns ``(loss, q_mean)``."""
    q = make_critic(config).apply(critic_params, batch["obs"], _unit_action(batch, config))  # [C, B]
    return jnp.sum(jnp.mean(jnp.square(q - target), axis=-1)), jnp.mean(q)


def actor_loss(actor_params, critic_params, obs: jax.Array, config: Config) -> jax.Array:
    """``-mean Q_1(s, actor(s))``: the first critic judges the actor (as in TD3)."""
    action = make_actor(config).apply(actor_params, obs)
    first = jax.tree.map(lambda p: p[:1], critic_params)  # evaluating only it halves the critic work
    return -jnp.mean(make_critic(config, 1).apply(first, obs, action))


def update(state: State, batch: dict, key: jax.Array, config: Config, update_actor: bool | jax.Array = True):
    """One critic step on ``batch`` (from :func:`jaxrl.offpolicy.sample`) and, if
    ``update_actor`` (a bool or a scalar; a ``lax.cond``), one actor step and the Polyak
    update of both targets. Returns ``(state, metrics)``; ``actor_loss`` is NaN when the
    actor did not move."""
    optimizer = make_optimizer(config)
    target = critic_target(state.target_params, batch, key, config)
    critic_params, critic_opt, loss, q_mean = optim.step(
        optimizer, critic_loss, state.critic_params, state.opt_state["critic"], target, batch, config
    )

    def actor_step(actor_params, actor_opt, target_params):
        actor_params, actor_opt, value, _ = optim.step(
            optimizer,
            lambda *args: (actor_loss(*args), ()),
            actor_params,
            actor_opt,
            critic_params,
            batch["obs"],
            config,
        )
        online = {"actor": actor_params, "critic": critic_params}
        return actor_params, actor_opt, offpolicy.polyak(target_params, online, config.tau), value

    def skip(actor_params, actor_opt, target_params):
        return actor_params, actor_opt, target_params, jnp.full((), jnp.nan, jnp.float32)

    actor_params, actor_opt, target_params, actor_value = jax.lax.cond(
        update_actor, actor_step, skip, state.params["actor"], state.opt_state["actor"], state.target_params
    )
    state = state.replace(
        params={"actor": actor_params},
        critic_params=critic_params,
        target_params=target_params,
        opt_state={"actor": actor_opt, "critic": critic_opt},
        updates=state.updates + 1,
    )
    return state, {"critic_loss": loss, "actor_loss": actor_value, "q_mean": q_mean}


def step(state: State, key: jax.Array, config: Config):
    """One iteration: collect and store ``num_envs x num_steps`` exploring steps, then
    ``num_updates`` updates (the actor on every ``policy_delay``-th). Metrics are
    averaged over the updates."""

    def learn(state, batch, key, j):
        return update(state, batch, key, config, update_actor=(j + 1) % config.policy_delay == 0)

    return offpolicy.step(state, key, config, act, learn)


def warmup_step(state: State, key: jax.Array, config: Config):
    """An iteration before ``learning_starts``: uniformly random actions, no updates
    (learner metrics are NaN)."""
    return offpolicy.random_step(state, key, config, LEARNER_METRICS)


# ----------------------------------------------------------------------------- training


def evaluate(params: dict, key: jax.Array, config: Config) -> evaluation.EvalResult:
    """Returns of ``eval_episodes`` episodes of the noise-free actor."""
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
