"""DDPG (Lillicrap et al., 2016): a deterministic actor and Q-critics for continuous
actions, learned off-policy from a device replay buffer.

:mod:`jaxrl.algorithms.td3` is this module's code with TD3's Config (Fujimoto et al.,
2018): the fields ``twin_critics`` (the target takes the minimum of two target critics),
``policy_delay`` (the actor and the target networks move once every ``policy_delay``
critic updates) and ``target_noise`` / ``target_noise_clip`` (target policy smoothing).
DDPG's Config holds them as constants (one critic, no delay, no smoothing), so the code
below reads them the same way for both.

Actions: the actor's ``tanh`` output in ``[-1, 1]`` is mapped onto the env's Box
bounds; ``exploration`` adds noise in units of the half-range, independent per step
(:class:`jaxrl.exploration.Gaussian`) or an Ornstein-Uhlenbeck process carried between
steps (:class:`jaxrl.exploration.OrnsteinUhlenbeck`). The buffer stores env actions; the
critics see them mapped back to ``[-1, 1]``.

Observations are arrays or dicts / tuples of arrays (goal-conditioned tasks, images
beside vectors): ``network="mlp"`` flattens and concatenates the leaves; ``"cnn"``
(MinAtar), ``"nature_cnn"`` and ``"impala_cnn"`` send each image leaf through its own
convolutions (:func:`jaxrl.networks.torso`). The actor and every critic have their own
encoder; a critic concatenates the action to its encoder's features, then dense layers.

``memory="gru"`` or ``"lstm"`` makes it recurrent DDPG / TD3 on the window path of
recurrent SAC (:mod:`jaxrl.algorithms.actor_critic`) with a deterministic actor: the
actor and the critics each have their own recurrent encoder (the Q heads share the
critics'), both memories advance while acting and are stored with every step in a
sequence replay (:mod:`jaxrl.buffers.sequence`, uniform over windows), and the learner
re-runs the actor, the critics and both targets over each window of ``windows.length``
steps from the stored memories, the first ``windows.burn_in`` steps only warming them
up, with one-step targets bootstrapped through truncation from the final observation. ::

    config = ddpg.Config(env_id="Pendulum-v1")
    out = jax.jit(ddpg.train)(jax.random.key(0), config)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import envs, optim
from jaxrl.algorithms import actor_critic, offpolicy
from jaxrl.algorithms.actor_critic import data_path
from jaxrl.config import choose_part
from jaxrl.exploration import Gaussian, OrnsteinUhlenbeck

LEARNER_METRICS = ("critic_loss", "actor_loss", "q_mean")
EXPLORATIONS = {"gaussian": Gaussian, "ou": OrnsteinUhlenbeck}  # the shorthands ``exploration`` takes
NOISE = "noise"  # the carry's entry for exploration noise that has a state


@struct.dataclass
class Config(actor_critic.Config):
    """DDPG settings (:class:`jaxrl.algorithms.actor_critic.Config`'s fields and
    ``exploration``). Static fields fix the program; the rest can be traced and vmapped.

    ``exploration`` is a :class:`jaxrl.exploration.Gaussian` or
    :class:`~jaxrl.exploration.OrnsteinUhlenbeck` (or the shorthand ``"gaussian"`` /
    ``"ou"``, its defaults). TD3's fields are constants here (one critic, every update
    moves the actor, no target smoothing): :class:`jaxrl.algorithms.td3.Config` makes
    them fields.
    """

    ALGORITHM = "DDPG"
    twin_critics = False
    policy_delay = 1
    target_noise = 0.0
    target_noise_clip = 0.5

    exploration: Gaussian | OrnsteinUhlenbeck = Gaussian()  # action noise, in units of the half action range

    def __post_init__(self):
        choose_part(self, "exploration", EXPLORATIONS)
        super().__post_init__()


PRESETS = {}


@struct.dataclass
class State:
    params: dict  # {"actor": flax params, "obs_stats" with normalize_observations}: all ``act`` needs
    critic_params: Any  # the critics' flax params (leading [num_critics] axis)
    target_params: dict  # {"actor": ..., "critic": ...}
    opt_state: dict  # {"actor": ..., "critic": ...}
    buffer: Any  # replay.ReplayState
    env_state: Any  # batched env state [num_envs]
    obs: Any  # [num_envs, *obs_shape]
    timesteps: jax.Array  # int32 env steps so far
    updates: jax.Array  # int32 critic updates so far
    carry: Any = ()  # {"actor", "critic"} memories, "noise" (OU) for ``obs``, leaves [num_envs, ...]; () without


# ----------------------------------------------------------------------------- set-up


def _action_dim(config: Config) -> int:
    return math.prod(envs.config_spec(config).action_shape)


def make_actor(config: Config):
    """The deterministic actor: the ``network`` torso (:func:`jaxrl.networks.torso`) on
    the observation (any pytree of leaves), a ``tanh`` head; with ``memory`` a
    :class:`jaxrl.networks.RecurrentActor` (:attr:`jaxrl.algorithms.actor_critic.DataPath.actor`)."""
    return data_path(config).actor(_action_dim(config), "deterministic", config)


def make_critic(config: Config, num_critics: int | None = None):
    """Q-critics ``(obs [B, ...], unit action [B, A]) -> [num_critics, B]``; by default
    two with ``twin_critics``, else one: each encodes the observation (the ``network``'s
    convolutions for image leaves; flattened for ``"mlp"``), concatenates the action and
    applies dense layers. With ``memory`` a :class:`jaxrl.networks.RecurrentContinuousQ`
    (one encoder, a ``network`` torso and a core, the Q heads on its output)."""
    return data_path(config).critic(num_critics or (2 if config.twin_critics else 1), config)


def init(key: jax.Array, config: Config) -> State:
    """Actor, critics, their targets (copies), optimisers, an empty buffer,
    ``num_envs`` reset envs and their policy state (:func:`initial_carry`)."""
    config.check_traced()
    action = jnp.zeros((config.num_envs,) + envs.config_spec(config).action_shape, jnp.float32)
    carry = initial_carry(config, config.num_envs)
    fields = actor_critic.start(key, config, make_actor(config), make_critic(config), action, carry)
    online = {"actor": fields["params"]["actor"], "critic": fields["critic_params"]}
    optimizer = actor_critic.make_optimizer(config)
    opt_state = {name: optimizer.init(params) for name, params in online.items()}
    return State(target_params=online, opt_state=opt_state, **fields)


# ----------------------------------------------------------------------------- acting


def initial_carry(config: Config, batch_size: int):
    """The policy's state before an episode, for ``batch_size`` envs: with ``memory`` the
    ``{"actor", "critic"}`` memories (:func:`jaxrl.algorithms.offpolicy.initial_carry`), with
    Ornstein-Uhlenbeck ``exploration`` its noise ``"noise"`` (zeros ``[batch_size,
    action_dim]``), so that the rollout resets both where an episode ends; ``()`` without
    either."""
    noise = config.exploration.initial_carry(batch_size, _action_dim(config))
    return actor_critic.with_entry(offpolicy.initial_carry(config, batch_size), NOISE, noise)


def ou_noise(noise: jax.Array, key: jax.Array, config: Config) -> jax.Array:
    """Deprecated: ``config.exploration.step(noise, key)``
    (:meth:`jaxrl.exploration.OrnsteinUhlenbeck.step`)."""
    warnings.warn(
        "ddpg.ou_noise is deprecated: use config.exploration.step(noise, key) "
        "(jaxrl.exploration.OrnsteinUhlenbeck); it goes in the next release",
        DeprecationWarning,
        stacklevel=2,
    )
    return config.exploration.step(noise, key)


def policy(actor_params, inputs, config: Config) -> jax.Array:
    """The actor's unit actions ``[..., A]`` in ``[-1, 1]`` at ``inputs``: observations
    ``[B, ...]``, or with ``memory`` the actor's encoder features ``[..., memory_size]``."""
    return data_path(config).head(make_actor(config), actor_params, inputs)


def act(params: dict, obs: jax.Array, carry, key: jax.Array, config: Config, deterministic: bool = False):
    """``(action [B, *action_shape], carry)`` for observations ``[B, *obs_shape]``: the
    actor's, plus exploration noise unless ``deterministic`` (Gaussian, or the next step of
    the Ornstein-Uhlenbeck noise in ``carry["noise"]``), clipped to the bounds. Without
    memory or OU noise ``carry`` (:func:`initial_carry`: ``()``) is passed through.

    With ``memory``, ``carry`` is :func:`initial_carry`'s dict: ``act`` advances
    ``carry["actor"]`` and passes ``carry["critic"]`` through (training's own collection,
    :func:`jaxrl.algorithms.actor_critic.behaviour`, also advances the critic's memory)."""
    obs = offpolicy.observe(params, obs, config)
    inputs, carry = data_path(config).encode(make_actor(config), params["actor"], obs, carry, "actor")
    unit = policy(params["actor"], inputs, config)
    if not deterministic:
        unit, noise = config.exploration.perturb(unit, actor_critic.entry(carry, NOISE), key)
        unit, carry = jnp.clip(unit, -1.0, 1.0), actor_critic.with_entry(carry, NOISE, noise)
    return actor_critic.env_action(unit, config), carry


# ----------------------------------------------------------------------------- learning


def q_values(critic_params, inputs, action: jax.Array, config: Config, num_critics: int | None = None):
    """The critics' values ``[num_critics, ...]`` of unit actions ``[..., A]`` at
    ``inputs``: observations ``[B, ...]``, or with ``memory`` the critics' encoder
    features ``[..., memory_size]``."""
    return data_path(config).head(make_critic(config, num_critics), critic_params, inputs, action)


def critic_target(target_params: dict, batch: dict, key: jax.Array, config: Config) -> jax.Array:
    """TD targets ``[B]``: ``reward + discount * (1 - terminated) * min_i Q'_i(s', a')``
    with ``a' = clip(actor'(s') + clip(target_noise * N(0, 1), +-target_noise_clip), -1, 1)``
    (no noise when ``target_noise`` is 0; one critic without ``twin_critics``).

    With ``memory``, ``batch`` holds windows (:func:`jaxrl.algorithms.offpolicy.sample_windows`)
    and the targets are ``[L - burn_in, B]``, time-major over the trained steps: ``a'``
    and ``Q'`` at ``next_obs[t]`` from the target actor's and the target critics'
    memories after step ``t``, so truncated episodes bootstrap from their final
    observation."""
    actor, critic = make_actor(config), make_critic(config)
    actor_in, critic_in = actor_critic.inputs(
        actor, target_params["actor"], critic, target_params["critic"], batch, config, next_obs=True
    )
    next_action = policy(target_params["actor"], actor_in, config)
    noise = config.target_noise * jax.random.normal(key, next_action.shape)
    noise = jnp.clip(noise, -config.target_noise_clip, config.target_noise_clip)
    next_action = jnp.clip(next_action + noise, -1.0, 1.0)
    next_q = jnp.min(q_values(target_params["critic"], critic_in, next_action, config), axis=0)
    return actor_critic.td_target(data_path(config).steps(batch, config), next_q)


def critic_loss(critic_params, target: jax.Array, batch: dict, config: Config):
    """Squared TD error of each critic against ``target [B]`` (with ``memory`` ``[L -
    burn_in, B]``, the critics re-run over the windows), averaged over the batch and
    summed over critics (:func:`jaxrl.algorithms.actor_critic.critic_loss`). Returns
    ``(loss, q_mean)``."""
    return actor_critic.critic_loss(make_critic(config), critic_params, target, batch, config)


def actor_loss(actor_params, critic_params, batch: dict, config: Config) -> jax.Array:
    """``-mean Q_1(s, actor(s))`` over the batch's ``obs``: the first critic judges the
    actor (as in TD3). With ``memory``, ``batch`` holds windows: the actor and the
    critics re-run over them, the mean over the trained steps."""
    actor_in, critic_in = actor_critic.inputs(
        make_actor(config), actor_params, make_critic(config), critic_params, batch, config
    )
    # Evaluating only the first critic halves the critic work (a recurrent encoder is shared).
    first = data_path(config).leading_critics(critic_params, 1)
    return -jnp.mean(q_values(first, critic_in, policy(actor_params, actor_in, config), config, 1))


def update(
    state: State,
    batch: dict,
    key: jax.Array,
    config: Config,
    update_actor: bool | jax.Array = True,
    actor_objective: Callable | None = None,
):
    """One critic step on ``batch`` (:func:`jaxrl.algorithms.actor_critic.sample`'s:
    transitions, or with ``memory`` windows) and, if ``update_actor`` (a bool or a
    scalar; a ``lax.cond``), one actor step and the Polyak update of both targets.
    ``actor_objective`` replaces :func:`actor_loss` (same arguments; TD3+BC adds its
    behaviour-cloning term). Returns ``(state, metrics)``; ``actor_loss`` is NaN when
    the actor did not move."""
    optimizer = actor_critic.make_optimizer(config)
    target = critic_target(state.target_params, batch, key, config)
    critic_params, critic_opt, loss, q_mean = actor_critic.critic_step(state, critic_loss, target, batch, config)

    def actor_step(actor_params, actor_opt, target_params):
        actor_params, actor_opt, value, _ = optim.step(
            optimizer,
            lambda *args: ((actor_objective or actor_loss)(*args), ()),
            actor_params,
            actor_opt,
            critic_params,
            batch,
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
        params={**state.params, "actor": actor_params},
        critic_params=critic_params,
        target_params=target_params,
        opt_state={"actor": actor_opt, "critic": critic_opt},
        updates=state.updates + 1,
    )
    return state, {"critic_loss": loss, "actor_loss": actor_value, "q_mean": q_mean}


def learn(state: State, batch: dict, key: jax.Array, index, config: Config):
    """:func:`update`, the actor (and the targets) moving on every ``policy_delay``-th."""
    return update(state, batch, key, config, update_actor=(index + 1) % config.policy_delay == 0)


learner = actor_critic.learner(init, act, initial_carry, make_critic, learn, LEARNER_METRICS)
step, warmup_step, program = learner.step, learner.warmup_step, learner.program
algorithm = learner.algorithm(
    "ddpg",
    Config,
    update,
    PRESETS,
    summary="DDPG: a deterministic actor and Q-critics on replay",
)
__getattr__ = algorithm.module_getattr(__name__)  # ddpg.train, ddpg.preset: the record's
