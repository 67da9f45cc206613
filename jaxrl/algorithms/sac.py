"""Soft actor-critic (Haarnoja et al., 2018): a stochastic actor that maximises return
plus ``alpha`` times its entropy, twin Q-critics with Polyak-averaged targets, and
automatic tuning of ``alpha`` toward a target entropy.

Continuous actions: a tanh-squashed Gaussian mapped onto the env's Box bounds (the
log-density carries the tanh correction). ``discrete=True``: a categorical policy and
critics that output every action's value (Christodoulou, 2019), with exact
expectations over actions in place of samples; where observations carry an action mask
(``obs["action_mask"]``), masked actions have probability 0 and are never sampled, in
warm-up too.

Observations are arrays or dicts / tuples of arrays (goal-conditioned tasks, images
beside vectors): ``network="mlp"`` flattens and concatenates the leaves; ``"cnn"``
(MinAtar), ``"nature_cnn"`` and ``"impala_cnn"`` send each image leaf through its own
convolutions (:func:`jaxrl.networks.torso`). The actor and every critic have their own
encoder; a continuous critic concatenates the action to its encoder's features, then
dense layers.

``memory="gru"`` or ``"lstm"`` makes it recurrent SAC (as in Ni et al., 2022, "Recurrent
Model-Free RL Can Be a Strong Baseline for Many POMDPs") on the window path it shares
with DDPG and TD3 (:mod:`jaxrl.algorithms.actor_critic`): the actor and the critics each
have their own recurrent encoder (a torso and a core; the twin Q heads share the
critic's), both memories advance while acting and are stored with every step in a
sequence replay (:mod:`jaxrl.buffers.sequence`, uniform over windows), and the learner
re-runs the actor, the critics and the target critics over each window of
``windows.length`` steps from the stored memories, the first ``windows.burn_in`` steps only
warming them up, with one-step soft targets bootstrapped through truncation from the
final observation.

``sde=GSDE(...)`` (:class:`jaxrl.exploration.GSDE`) explores with generalized
state-dependent exploration (gSDE; Raffin, Kober & Stulp, 2021,
:class:`jaxrl.distributions.StateDependentNoise`): the Gaussian's scale comes from the
actor's last hidden features ``z(s)`` and a learned ``[F, A]`` log-std (initialised at
``sde.log_std_init``), and acting adds ``z(s) @ theta`` before the squash, with a noise
matrix ``theta`` per env kept in the policy's carry (``carry["sde"]``), drawn at each
episode's first step and every ``sde.sample_freq`` steps. ::

    config = sac.Config(env_id="Pendulum-v1")
    out = jax.jit(sac.train)(jax.random.key(0), config)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import envs, networks, optim
from jaxrl.algorithms import actor_critic, offpolicy, requirements
from jaxrl.algorithms.actor_critic import data_path
from jaxrl.config import choose_part, require_range, static
from jaxrl.distributions import Categorical, TanhNormal, mask_actions
from jaxrl.exploration import GSDE, policy_exploration
from jaxrl.networks import QNetwork, ensemble, resolve_torso

LEARNER_METRICS = ("critic_loss", "actor_loss", "alpha_loss", "q_mean", "alpha", "entropy")
SDE = "sde"  # the carry's entry for gSDE's noise matrices


@struct.dataclass
class Config(actor_critic.Config):
    """SAC settings (:class:`jaxrl.algorithms.actor_critic.Config`'s fields and SAC's
    own). Static fields fix the program; the rest can be traced and vmapped.

    One iteration collects ``num_steps`` steps from each of ``num_envs`` envs, then
    runs ``num_updates`` updates (critics, actor, temperature, targets) on batches of
    ``batch_size``. ``memory`` needs continuous actions; so does ``sde``, a
    :class:`jaxrl.exploration.GSDE` or None.
    """

    ALGORITHM = "SAC"

    discrete: bool = static(False)  # categorical policy for Discrete action spaces
    autotune: bool = static(True)  # learn alpha; False keeps it at ``alpha``
    sde: GSDE | None = None  # gSDE exploration (noise z(s) @ theta); None: the Gaussian's own noise
    alpha: float = 0.2  # the fixed temperature, or the initial one with autotune
    target_entropy: Any = None  # None: -|A| (continuous), 0.5 log |A| (discrete)

    def __post_init__(self):
        choose_part(self, "sde", {"gsde": GSDE}, optional=True)
        super().__post_init__()

    def check_actions(self) -> envs.EnvSpec:
        """The env's spec; ValueError unless its actions are Discrete with ``discrete``
        (then without ``memory`` or ``sde``), else a Box with finite bounds."""
        spec = envs.config_spec(self)
        requirements.refuse_multi_discrete(spec, self.env_id, "sac")
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
            return offpolicy.require_box_actions(self, self.ALGORITHM)
        if self.memory != "none":
            raise ValueError(f"memory={self.memory!r} needs continuous actions; discrete=True has no recurrent SAC")
        if self.sde is not None:
            raise ValueError("sde (gSDE) needs continuous actions; discrete=True has a categorical policy")
        return spec

    def check_traced(self) -> None:
        super().check_traced()
        require_range(self, "alpha", 0.0, float("inf"), low_open=True)
        if self.target_entropy is not None:
            require_range(self, "target_entropy", -float("inf"), float("inf"))


PRESETS = {
    # rl-baselines3-zoo's SAC for MountainCarContinuous-v0 (hyperparams/sac.yml: gSDE, a
    # fixed temperature 0.1, 32 updates of 512 after every 32 steps of one env, gamma
    # 0.9999, tau 0.01, 64x64 layers), the noise matrix drawn every 32 steps as
    # Stable-Baselines3 draws it at each rollout: benchmarks/investigations/gsde.md.
    "MountainCarContinuous-v0": dict(
        sde=GSDE(sample_freq=32, log_std_init=-3.67),
        hidden_sizes=(64, 64),
        learning_rate=3e-4,
        buffer_size=50_000,
        batch_size=512,
        autotune=False,
        alpha=0.1,
        num_envs=1,
        num_steps=32,
        num_updates=32,
        gamma=0.9999,
        tau=0.01,
        learning_starts=0,
        total_timesteps=50_000,
    ),
}


@struct.dataclass
class State:
    params: dict  # {"actor": flax params, "obs_stats" with normalize_observations}: all ``act`` needs
    critic_params: Any  # twin critics' flax params (leading [2] axis)
    target_params: dict  # {"critic": ...}
    log_alpha: jax.Array  # float32 scalar: log of the entropy temperature
    opt_state: dict  # {"actor": ..., "critic": ..., "alpha": ...}
    buffer: Any  # replay.ReplayState
    env_state: Any  # batched env state [num_envs]
    obs: Any  # [num_envs, *obs_shape]
    timesteps: jax.Array  # int32 env steps so far
    updates: jax.Array  # int32 gradient updates so far
    carry: Any = ()  # initial_carry's policy state for ``obs``, leaves [num_envs, ...]; () without any


# ----------------------------------------------------------------------------- the policy kind, chosen once


class PolicyKind(NamedTuple):
    """What differs between SAC's continuous (tanh-Gaussian) and discrete (categorical)
    policies: :func:`policy_kind` picks one from ``discrete``, once, and the losses and
    :func:`act` call its functions without asking which it is."""

    action_dim: Callable  # (spec) -> the unit action's entries, or the number of actions
    actor: Callable  # (config) -> the policy network (make_actor)
    critic: Callable  # (config) -> the twin critics (make_critic)
    default_target_entropy: Callable  # (action_dim) -> the target entropy unless config.target_entropy sets it
    zero_actions: Callable  # (config) -> num_envs actions as the replay stores them
    critic_reads_action: bool  # whether a critic reads an action beside the observation
    distribution: Callable  # (actor out, inputs, config) -> (distribution, gSDE noise or None)
    q_values: Callable  # (critic_params, inputs, action, config) -> the critics' values (q_values)
    soft_values: Callable  # (dist, critic_params, critic_in, key, config) -> (E_pi[min_i Q_i], E_pi[log pi])
    taken_action_values: Callable  # (config) -> critic_loss's q_of_action (None: continuous actions')
    env_action: Callable  # (action, config) -> the env's action


def _gaussian_actor(config: Config):
    return data_path(config).actor(_action_dim(config), policy_exploration(config.sde).actor_kind, config)


def _tanh_gaussian(out, inputs, config: Config):
    return policy_exploration(config.sde).distribution(out, TanhNormal)


def _sampled_soft_values(dist, critic_params, critic_in, key: jax.Array, config: Config):
    """One reparameterised sample of the policy."""
    action, log_prob = dist.sample_and_log_prob(key)
    return jnp.min(q_values(critic_params, critic_in, action, config), axis=0), log_prob


TANH_GAUSSIAN = PolicyKind(
    action_dim=lambda spec: math.prod(spec.action_shape),
    actor=_gaussian_actor,
    critic=lambda config: data_path(config).critic(2, config),
    default_target_entropy=lambda action_dim: -float(action_dim),
    zero_actions=lambda config: jnp.zeros((config.num_envs,) + envs.config_spec(config).action_shape, jnp.float32),
    critic_reads_action=True,
    distribution=_tanh_gaussian,
    q_values=lambda critic_params, inputs, action, config: data_path(config).head(
        make_critic(config), critic_params, inputs, action
    ),
    soft_values=_sampled_soft_values,
    taken_action_values=lambda config: None,
    env_action=actor_critic.env_action,
)


def _categorical_critic(config: Config):
    if isinstance(config.network, networks.Whole):
        return actor_critic.whole_critics(2, _action_dim(config), True, config)
    spec = envs.config_spec(config)
    network, hidden_sizes, activation = resolve_torso(config.network, spec), config.hidden_sizes, config.activation
    obs_ndim = spec.obs_ndim
    return ensemble(QNetwork, 2)(_action_dim(config), network, hidden_sizes, activation, obs_ndim)


def _categorical(out, inputs, config: Config):
    if envs.config_spec(config).action_mask:
        out = mask_actions(out, inputs[envs.ACTION_MASK])
    return Categorical(out), None


def _exact_soft_values(dist, critic_params, critic_in, key: jax.Array, config: Config):
    """The exact sums over actions."""
    q = jnp.min(q_values(critic_params, critic_in, None, config), axis=0)  # [B, A]
    probs, log_probs = dist.probs(), jax.nn.log_softmax(dist.logits)
    return jnp.sum(probs * q, axis=-1), jnp.sum(probs * log_probs, axis=-1)


def _categorical_taken_action_values(config: Config):
    def q_of_action(critic_params, inputs, action):
        q = q_values(critic_params, inputs, None, config)  # [2, B, A]
        return jnp.sum(q * jax.nn.one_hot(action, q.shape[-1], dtype=q.dtype), axis=-1)

    return q_of_action


CATEGORICAL = PolicyKind(
    action_dim=lambda spec: spec.num_actions,
    actor=lambda config: data_path(config).actor(_action_dim(config), "categorical", config),
    critic=_categorical_critic,
    default_target_entropy=lambda action_dim: 0.5 * math.log(action_dim),  # half the uniform policy's
    zero_actions=lambda config: jnp.zeros(config.num_envs, jnp.int32),
    critic_reads_action=False,
    distribution=_categorical,
    q_values=lambda critic_params, inputs, action, config: data_path(config).head(
        make_critic(config), critic_params, inputs
    ),
    soft_values=_exact_soft_values,
    taken_action_values=_categorical_taken_action_values,
    env_action=lambda action, config: action,
)


def policy_kind(config: Config) -> PolicyKind:
    """:data:`CATEGORICAL` with ``discrete``, else :data:`TANH_GAUSSIAN`: the one place
    SAC asks."""
    return CATEGORICAL if config.discrete else TANH_GAUSSIAN


# ----------------------------------------------------------------------------- set-up


def _action_dim(config: Config) -> int:
    return policy_kind(config).action_dim(envs.config_spec(config))


def make_actor(config: Config):
    """The policy network: the ``network`` torso (:func:`jaxrl.networks.torso`) on the
    observation (any pytree of leaves), a Gaussian (with ``sde`` its mean, features
    and gSDE log-std) or (``discrete``) categorical head; with ``memory`` a
    :class:`jaxrl.networks.RecurrentActor` (:attr:`jaxrl.algorithms.actor_critic.DataPath.actor`)."""
    return policy_kind(config).actor(config)


def make_critic(config: Config):
    """Twin critics: ``(obs, unit action [B, A]) -> [2, B]``, or with ``discrete``
    ``obs -> [2, B, num_actions]`` (a ``network`` torso, then a linear head). A
    continuous critic encodes the observation (the ``network``'s convolutions for image
    leaves; flattened for ``"mlp"``), concatenates the action and applies dense layers.
    With ``memory`` a :class:`jaxrl.networks.RecurrentContinuousQ` (one encoder, twin heads)."""
    return policy_kind(config).critic(config)


def target_entropy(config: Config) -> jax.Array:
    """``config.target_entropy``, or by default ``-|A|`` for continuous actions and
    ``0.5 log(num_actions)`` (half the uniform policy's entropy) for discrete ones."""
    if config.target_entropy is not None:
        return jnp.asarray(config.target_entropy, jnp.float32)
    return jnp.asarray(policy_kind(config).default_target_entropy(_action_dim(config)), jnp.float32)


def init(key: jax.Array, config: Config) -> State:
    """Actor, twin critics and their targets, the temperature, optimisers, an empty
    buffer, ``num_envs`` reset envs and their policy state (:func:`initial_carry`)."""
    config.check_traced()
    kind, carry = policy_kind(config), initial_carry(config, config.num_envs)
    action = kind.zero_actions(config)
    fields = actor_critic.start(
        key, config, make_actor(config), make_critic(config), action, carry, kind.critic_reads_action
    )
    actor_params = policy_exploration(config.sde).initial_params(fields["params"]["actor"])
    fields["params"], critic_params = {**fields["params"], "actor": actor_params}, fields["critic_params"]
    log_alpha = jnp.log(jnp.asarray(config.alpha, jnp.float32))
    optimizer = actor_critic.make_optimizer(config)
    return State(
        target_params={"critic": critic_params},
        log_alpha=log_alpha,
        opt_state={
            "actor": optimizer.init(actor_params),
            "critic": optimizer.init(critic_params),
            "alpha": optimizer.init(log_alpha),
        },
        **fields,
    )


# ----------------------------------------------------------------------------- acting


def policy_distribution(actor_params, inputs, config: Config):
    """The policy at ``inputs``: a :class:`Categorical` over actions, or a
    :class:`TanhNormal` over unit actions ``[B, A]`` in ``(-1, 1)`` (with ``sde``, of
    the state-dependent scale of :class:`jaxrl.distributions.StateDependentNoise`).
    ``inputs`` are observations ``[B, ...]``, or with ``memory`` the actor's encoder
    features ``[..., memory_size]`` (:func:`jaxrl.algorithms.offpolicy.window_features`),
    and the distribution has their leading dims. Where observations carry an action mask
    (``obs["action_mask"]``, discrete actions), masked actions have probability 0."""
    return policy_distribution_and_noise(actor_params, inputs, config)[0]


def policy_distribution_and_noise(actor_params, inputs, config: Config):
    """:func:`policy_distribution` and, with ``sde``, the
    :class:`jaxrl.distributions.StateDependentNoise` of its scale (the actor's features
    at ``inputs``); None without."""
    out = data_path(config).head(make_actor(config), actor_params, inputs)
    return policy_kind(config).distribution(out, inputs, config)


def q_values(critic_params, inputs, action: jax.Array | None, config: Config) -> jax.Array:
    """Both critics' values ``[2, B]`` of unit actions ``[B, A]`` at ``inputs``:
    observations ``[B, ...]`` (with ``memory``: the critics' encoder features ``[...,
    memory_size]``, values ``[2, ...]``), or with ``discrete`` every action's ``[2, B,
    num_actions]`` (``action`` unused)."""
    return policy_kind(config).q_values(critic_params, inputs, action, config)


def initial_carry(config: Config, batch_size: int):
    """The policy's state before an episode, for ``batch_size`` envs, all zeros: with
    ``memory`` the ``{"actor", "critic"}`` memories (:func:`jaxrl.algorithms.offpolicy.initial_carry`),
    with ``sde`` the gSDE state ``"sde"`` (:meth:`jaxrl.exploration.GSDE.initial_carry`:
    noise matrices ``[batch_size, F, A]``, ``F`` the actor's features, and their step
    counters), so that the rollout resets both where an episode ends; ``()`` without
    either."""
    carry, exploration = offpolicy.initial_carry(config, batch_size), policy_exploration(config.sde)
    features = make_actor(config).num_features if exploration.state_dependent_std else 0  # only gSDE's noise reads them
    sde = exploration.initial_carry(batch_size, features, _action_dim(config))
    return actor_critic.with_entry(carry, SDE, sde)


def act(params: dict, obs: jax.Array, carry, key: jax.Array, config: Config, deterministic: bool = False):
    """``(action, carry)`` for observations ``[B, *obs_shape]``: the action sampled from
    the policy, or its mode when ``deterministic`` (``tanh`` of the mean; the most likely
    action), int32 ``[B]`` with ``discrete``, else ``[B, *action_shape]`` within the
    bounds. Without memory or gSDE ``carry`` (:func:`initial_carry`: ``()``) is passed
    through.

    With ``sde`` the sampled action is ``tanh(mean + z(s) @ theta)``, ``theta`` the
    env's noise matrix in ``carry["sde"]``, drawn afresh where its step counter is 0
    (:meth:`jaxrl.exploration.GSDE.next_matrix`); ``deterministic`` leaves that state
    alone.

    With ``memory``, ``carry`` is :func:`initial_carry`'s dict: ``params`` holds only the
    actor, so ``act`` advances ``carry["actor"]`` and passes ``carry["critic"]`` through;
    training's own collection (:func:`jaxrl.algorithms.actor_critic.behaviour`) also
    advances the critic's memory, which the replay needs and acting does not."""
    obs = offpolicy.observe(params, obs, config)
    inputs, carry = data_path(config).encode(make_actor(config), params["actor"], obs, carry, "actor")
    dist, noise = policy_distribution_and_noise(params["actor"], inputs, config)
    exploration = policy_exploration(config.sde)
    action, sde = exploration.act(dist, noise, actor_critic.entry(carry, SDE), key, deterministic)
    return policy_kind(config).env_action(action, config), actor_critic.with_entry(carry, SDE, sde)


# ----------------------------------------------------------------------------- learning


def _soft_values(actor_params, critic_params, actor_in, critic_in, key, config: Config):
    """``(E_pi[min_i Q_i(s, a)], E_pi[log pi(a|s)])``, each ``[B]`` (with ``memory``
    ``[T, B]``): one reparameterised sample for continuous actions, the exact sum over
    actions for discrete ones. ``actor_in`` / ``critic_in``: the observations, or with
    ``memory`` each network's encoder features."""
    dist = policy_distribution(actor_params, actor_in, config)
    return policy_kind(config).soft_values(dist, critic_params, critic_in, key, config)


def critic_target(
    actor_params, target_critic_params, alpha: jax.Array, batch: dict, key: jax.Array, config: Config
) -> jax.Array:
    """Soft TD targets ``[B]``: ``reward + discount * (1 - terminated) * V(s')`` with
    ``V(s') = E_{a' ~ pi}[min_i Q'_i(s', a') - alpha log pi(a'|s')]``.

    With ``memory``, ``batch`` holds windows (:func:`jaxrl.algorithms.offpolicy.sample_windows`)
    and the targets are ``[L - burn_in, B]``, time-major over the trained steps: ``V`` at
    ``next_obs[t]`` from the actor's and the target critics' memories after step ``t``
    (:func:`jaxrl.algorithms.offpolicy.window_features`), so truncated episodes bootstrap
    from their final observation."""
    actor_in, critic_in = actor_critic.inputs(
        make_actor(config), actor_params, make_critic(config), target_critic_params, batch, config, next_obs=True
    )
    next_q, next_log_prob = _soft_values(actor_params, target_critic_params, actor_in, critic_in, key, config)
    return actor_critic.td_target(data_path(config).steps(batch, config), next_q - alpha * next_log_prob)


def critic_loss(critic_params, target: jax.Array, batch: dict, config: Config):
    """Squared error of both critics against ``target [B]`` (with ``memory`` ``[L -
    burn_in, B]``, the critics re-run over the windows), averaged over the batch and
    summed over critics (:func:`jaxrl.algorithms.actor_critic.critic_loss`). Returns
    ``(loss, q_mean)``."""
    critic = make_critic(config)
    return actor_critic.critic_loss(
        critic, critic_params, target, batch, config, policy_kind(config).taken_action_values(config)
    )


def actor_loss(actor_params, critic_params, alpha: jax.Array, batch: dict, key: jax.Array, config: Config):
    """``mean(alpha log pi(a|s) - min_i Q_i(s, a))`` over the batch's ``obs`` (with
    ``memory``, windows: the actor and the critics re-run over them, the mean over the
    trained steps). Returns ``(loss, entropy)``, the entropy estimate ``-mean log pi``
    (exact for discrete)."""
    actor_in, critic_in = actor_critic.inputs(
        make_actor(config), actor_params, make_critic(config), critic_params, batch, config
    )
    q, log_prob = _soft_values(actor_params, critic_params, actor_in, critic_in, key, config)
    return jnp.mean(alpha * log_prob - q), -jnp.mean(log_prob)


def alpha_loss(log_alpha: jax.Array, entropy: jax.Array, config: Config) -> jax.Array:
    """``log_alpha * (entropy - target_entropy)``: alpha falls while the policy's
    entropy is above the target and rises below it."""
    return log_alpha * (jax.lax.stop_gradient(entropy) - target_entropy(config))


def update(state: State, batch: dict, key: jax.Array, config: Config):
    """One step of the critics, then the actor (against the updated critics), then the
    temperature (with ``autotune``), then the Polyak update of the target critics.
    ``batch`` comes from :func:`jaxrl.algorithms.actor_critic.sample` (transitions, or
    with ``memory`` windows). Returns ``(state, metrics)``."""
    target_key, actor_key = jax.random.split(key)
    optimizer = actor_critic.make_optimizer(config)
    alpha = jnp.exp(state.log_alpha)
    target = critic_target(state.params["actor"], state.target_params["critic"], alpha, batch, target_key, config)
    critic_params, critic_opt, c_loss, q_mean = actor_critic.critic_step(state, critic_loss, target, batch, config)
    actor_params, actor_opt, a_loss, entropy = optim.step(
        optimizer,
        actor_loss,
        state.params["actor"],
        state.opt_state["actor"],
        critic_params,
        alpha,
        batch,
        actor_key,
        config,
    )

    log_alpha, alpha_opt, t_loss = optim.step_if(
        config.autotune, optimizer, alpha_loss, state.log_alpha, state.opt_state["alpha"], entropy, config
    )

    state = state.replace(
        params={**state.params, "actor": actor_params},
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


def learn(state: State, batch: dict, key: jax.Array, index, config: Config):
    """:func:`update`, every update of an iteration alike."""
    return update(state, batch, key, config)


learner = actor_critic.learner(init, act, initial_carry, make_critic, learn, LEARNER_METRICS)
step, warmup_step, program = learner.step, learner.warmup_step, learner.program
algorithm = learner.algorithm(
    "sac",
    Config,
    update,
    PRESETS,
    summary="Soft actor-critic: entropy-regularised actor, twin critics",
)
__getattr__ = algorithm.module_getattr(__name__)  # sac.train, sac.preset: the record's
