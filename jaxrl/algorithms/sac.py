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
Model-Free RL Can Be a Strong Baseline for Many POMDPs"): the actor and the critics each
have their own recurrent encoder (a torso and a core; the twin Q heads share the
critic's), both memories advance while acting and are stored with every step in a
sequence replay (:mod:`jaxrl.buffers.sequence`, uniform over windows), and the learner
re-runs the actor, the critics and the target critics over each window of
``windows.length`` steps from the stored memories, the first ``windows.burn_in`` steps only
warming them up, with one-step soft targets bootstrapped through truncation from the
final observation.

``use_sde=True`` explores with generalized state-dependent exploration (gSDE; Raffin,
Kober & Stulp, 2021, :class:`jaxrl.distributions.StateDependentNoise`): the Gaussian's
scale comes from the actor's last hidden features ``z(s)`` and a learned ``[F, A]``
log-std, and acting adds ``z(s) @ theta`` before the squash, with a noise matrix
``theta`` per env kept in the policy's carry (``carry["sde"]``), drawn at each episode's
first step and every ``sde_sample_freq`` steps. ::

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

from jaxrl import envs, networks, optim, rollout
from jaxrl.algorithms import offpolicy, requirements
from jaxrl.buffers.sequence import Windows
from jaxrl.config import freeze_mapping, require_choice, require_int, require_network, require_range, static
from jaxrl.distributions import (
    Categorical,
    StateDependentNoise,
    TanhNormal,
    mask_actions,
    sde_initial_carry,
    sde_next_matrix,
)
from jaxrl.networks import Actor, ContinuousQ, QNetwork, RecurrentActor, RecurrentContinuousQ, ensemble

LEARNER_METRICS = ("critic_loss", "actor_loss", "alpha_loss", "q_mean", "alpha", "entropy")


@struct.dataclass
class Config(offpolicy.ReplaySchedule):
    """SAC settings. Static fields fix the program; the rest can be traced and vmapped.

    One iteration collects ``num_steps`` steps from each of ``num_envs`` envs, then
    runs ``num_updates`` updates (critics, actor, temperature, targets) on batches of
    ``batch_size``.

    With ``memory`` on (continuous actions, ``n_step=1``) replay holds ``windows``:
    ``windows.length`` steps starting every ``windows.period`` steps of each env,
    ``batch_size`` counts windows, and the losses train every step after the first
    ``burn_in``.
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
    network: str = static("mlp")  # or "cnn" (MinAtar), "nature_cnn", "impala_cnn": image leaves through convolutions
    hidden_sizes: tuple = static((64, 64))  # small nets suit classic control; (256, 256) for MuJoCo
    activation: str = static("relu")
    autotune: bool = static(True)  # learn alpha; False keeps it at ``alpha``
    use_sde: bool = static(False)  # gSDE exploration (continuous actions): noise z(s) @ theta
    sde_sample_freq: int = static(0)  # with use_sde: steps between draws of theta; 0: once per episode
    memory: str = static("none")  # "gru" or "lstm": a recurrent core in the actor and in the critics
    memory_size: int = static(64)  # each recurrent core's units
    windows: Windows = Windows()  # with memory: replayed windows (length, burn-in, period)
    normalize_observations: bool = static(False)  # running stats in params; replay keeps raw observations
    scale_rewards: bool = static(False)  # divide rewards by the running std of the discounted return
    num_evals: int = static(10)
    eval_episodes: int = static(10)
    num_reports: int = static(50)
    # --- traced hyper-parameters
    learning_rate: float = 1e-3  # actor, critics and temperature (Adam)
    gamma: float = 0.99
    tau: float = 0.005  # Polyak rate of the target critics
    alpha: float = 0.2  # the fixed temperature, or the initial one with autotune
    target_entropy: Any = None  # None: -|A| (continuous), 0.5 log |A| (discrete)
    # With use_sde: the initial log-std of theta's entries (Stable-Baselines3's gSDE default).
    sde_log_std_init: float = -2.0

    def __post_init__(self):
        object.__setattr__(self, "env_kwargs", freeze_mapping(self.env_kwargs, "env_kwargs"))
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        self.check_schedule()
        offpolicy.check_normalization(self)
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
            offpolicy.require_box_actions(self, "SAC")
        require_network(self, spec.obs_ndim)
        require_choice(self, "memory", networks.MEMORY_KINDS)
        if self.memory != "none":
            if self.discrete:
                raise ValueError(f"memory={self.memory!r} needs continuous actions; discrete=True has no recurrent SAC")
            if self.n_step != 1:
                raise ValueError(f"memory={self.memory!r} trains one-step targets: n_step must be 1, got {self.n_step}")
            offpolicy.check_sequence_replay(self, bootstrap_steps=0)
        require_choice(self, "use_sde", (True, False))
        require_int(self, "sde_sample_freq", 0)
        if self.use_sde and self.discrete:
            raise ValueError("use_sde=True needs continuous actions; discrete=True has a categorical policy")
        if not self.use_sde and self.sde_sample_freq != 0:
            raise ValueError(f"sde_sample_freq={self.sde_sample_freq} applies with use_sde=True")


PRESETS = {
    # rl-baselines3-zoo's SAC for MountainCarContinuous-v0 (hyperparams/sac.yml: gSDE, a
    # fixed temperature 0.1, 32 updates of 512 after every 32 steps of one env, gamma
    # 0.9999, tau 0.01, 64x64 layers), the noise matrix drawn every 32 steps as
    # Stable-Baselines3 draws it at each rollout: benchmarks/investigations/gsde.md.
    "MountainCarContinuous-v0": dict(
        use_sde=True,
        sde_sample_freq=32,
        sde_log_std_init=-3.67,
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


# ----------------------------------------------------------------------------- set-up


def env_spec(config: Config) -> envs.EnvSpec:
    return envs.config_spec(config)


def _action_dim(config: Config) -> int:
    spec = env_spec(config)
    return spec.num_actions if config.discrete else int(np.prod(spec.action_shape))


def _actor_kind(config: Config) -> str:
    if config.discrete:
        return "categorical"
    return "state_dependent" if config.use_sde else "gaussian"


def make_actor(config: Config) -> Actor | RecurrentActor:
    """The policy network: the ``network`` torso (:func:`jaxrl.networks.torso`) on the
    observation (any pytree of leaves), a Gaussian (with ``use_sde`` its mean, features
    and gSDE log-std) or (``discrete``) categorical head; with ``memory`` a
    :class:`RecurrentActor`."""
    obs_ndim = env_spec(config).obs_ndim
    if config.memory != "none":
        return RecurrentActor(
            _action_dim(config),
            _actor_kind(config),
            config.network,
            config.hidden_sizes,
            config.activation,
            obs_ndim,
            config.memory,
            config.memory_size,
        )
    return Actor(
        _action_dim(config),
        _actor_kind(config),
        config.network,
        config.hidden_sizes,
        config.activation,
        obs_ndim,
    )


def make_critic(config: Config):
    """Twin critics: ``(obs, unit action [B, A]) -> [2, B]``, or with ``discrete``
    ``obs -> [2, B, num_actions]`` (a ``network`` torso, then a linear head). A
    continuous critic encodes the observation (the ``network``'s convolutions for image
    leaves; flattened for ``"mlp"``), concatenates the action and applies dense layers.
    With ``memory`` a :class:`RecurrentContinuousQ` (one encoder, twin heads)."""
    obs_ndim = env_spec(config).obs_ndim
    if config.memory != "none":
        return RecurrentContinuousQ(
            config.hidden_sizes, config.activation, obs_ndim, config.memory, config.memory_size, 2, config.network
        )
    if config.discrete:
        return ensemble(QNetwork, 2)(
            _action_dim(config), config.network, config.hidden_sizes, config.activation, obs_ndim
        )
    return ensemble(ContinuousQ, 2)(config.hidden_sizes, config.activation, obs_ndim, config.network)


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
    require_range(config, "sde_log_std_init", -float("inf"), float("inf"))
    if config.target_entropy is not None:
        require_range(config, "target_entropy", -float("inf"), float("inf"))


def init(key: jax.Array, config: Config) -> State:
    """Actor, twin critics and their targets, the temperature, optimisers, an empty
    buffer, ``num_envs`` reset envs and (with ``memory``) their initial memories."""
    _check_traced(config)
    env, env_params = offpolicy.make_env(config)
    actor_key, critic_key, env_key = jax.random.split(key, 3)
    obs, env_state = rollout.reset(env, env_params, env_key, config.num_envs)
    spec = env_spec(config)
    carry = initial_carry(config, config.num_envs)
    if config.discrete:
        action = jnp.zeros(config.num_envs, jnp.int32)
    else:
        action = jnp.zeros((config.num_envs,) + spec.action_shape, jnp.float32)
    if config.memory != "none":  # sequences of one step
        one = initial_carry(config, 1)
        unit = action[None, :1].reshape(1, 1, -1)
        critic_params = make_critic(config).init(critic_key, spec.zeros((1, 1)), unit, one["critic"])
        actor_params = make_actor(config).init(actor_key, spec.zeros((1, 1)), one["actor"])
        buffer = offpolicy.init_sequence_buffer(obs, action, carry, config)
    else:
        one_obs = spec.zeros((1,))
        critic_inputs = (one_obs,) if config.discrete else (one_obs, action[:1].reshape(1, -1))
        critic_params = make_critic(config).init(critic_key, *critic_inputs)
        actor_params = make_actor(config).init(actor_key, one_obs)
        buffer = offpolicy.init_buffer(obs, action, config)
    if config.use_sde:
        actor_params = networks.fill_param(actor_params, networks.SDE_LOG_STD, config.sde_log_std_init)
    log_alpha = jnp.log(jnp.asarray(config.alpha, jnp.float32))
    optimizer = make_optimizer(config)
    return State(
        params=offpolicy.init_params({"actor": actor_params}, config),
        critic_params=critic_params,
        target_params={"critic": critic_params},
        log_alpha=log_alpha,
        opt_state={
            "actor": optimizer.init(actor_params),
            "critic": optimizer.init(critic_params),
            "alpha": optimizer.init(log_alpha),
        },
        buffer=buffer,
        env_state=env_state,
        obs=obs,
        timesteps=jnp.zeros((), jnp.int32),
        updates=jnp.zeros((), jnp.int32),
        carry=carry,
    )


# ----------------------------------------------------------------------------- acting


def policy_distribution(actor_params, obs: jax.Array, config: Config):
    """The policy at ``obs [B, ...]``: a :class:`Categorical` over actions, or a
    :class:`TanhNormal` over unit actions ``[B, A]`` in ``(-1, 1)`` (with ``use_sde``, of
    the state-dependent scale of :class:`jaxrl.distributions.StateDependentNoise`). With
    ``memory``, ``obs`` is the actor's encoder output ``[..., memory_size]``
    (:func:`jaxrl.algorithms.offpolicy.window_features`) and the distribution has its leading dims.
    Where observations carry an action mask (``obs["action_mask"]``, discrete actions),
    masked actions have probability 0."""
    return policy_distribution_and_noise(actor_params, obs, config)[0]


def policy_distribution_and_noise(actor_params, obs: jax.Array, config: Config):
    """:func:`policy_distribution` and, with ``use_sde``, the
    :class:`jaxrl.distributions.StateDependentNoise` of its scale (the actor's features
    at ``obs``); None without."""
    if config.memory != "none":
        out = make_actor(config).apply(actor_params, obs, method="policy")
    else:
        out = make_actor(config).apply(actor_params, obs)
    if config.discrete:
        if env_spec(config).action_mask:
            out = mask_actions(out, obs[envs.ACTION_MASK])
        return Categorical(out), None
    if config.use_sde:
        loc, features, sde_log_std = out
        noise = StateDependentNoise(features, sde_log_std)
        return TanhNormal(loc, noise.scale()), noise
    loc, log_std = out
    return TanhNormal(loc, jnp.exp(log_std)), None


def q_values(critic_params, obs: jax.Array, action: jax.Array | None, config: Config) -> jax.Array:
    """Both critics' values ``[2, B]`` of unit actions ``[B, A]`` at ``obs [B, ...]`` (with
    ``memory``: at the critics' encoder output ``[..., memory_size]``, values ``[2, ...]``),
    or with ``discrete`` every action's ``[2, B, num_actions]`` (``action`` unused)."""
    if config.discrete:
        return make_critic(config).apply(critic_params, obs)
    if config.memory != "none":
        return make_critic(config).apply(critic_params, obs, action, method="values")
    return make_critic(config).apply(critic_params, obs, action)


def initial_carry(config: Config, batch_size: int):
    """The policy's state before an episode, for ``batch_size`` envs, all zeros: with
    ``memory`` the ``{"actor", "critic"}`` memories (:func:`jaxrl.algorithms.offpolicy.initial_carry`),
    with ``use_sde`` the gSDE state ``"sde"`` (:func:`jaxrl.distributions.sde_initial_carry`:
    noise matrices ``[batch_size, F, A]``, ``F`` the actor's features, and their step
    counters), so that the rollout resets both where an episode ends; ``()`` without
    either."""
    carry = offpolicy.initial_carry(config, batch_size)
    if not config.use_sde:
        return carry
    num_features = config.memory_size if config.memory != "none" else config.hidden_sizes[-1]
    sde = sde_initial_carry(batch_size, num_features, _action_dim(config))
    return {**carry, "sde": sde} if carry else {"sde": sde}


def act(params: dict, obs: jax.Array, carry, key: jax.Array, config: Config, deterministic: bool = False):
    """``(action, carry)`` for observations ``[B, *obs_shape]``: the action sampled from
    the policy, or its mode when ``deterministic`` (``tanh`` of the mean; the most likely
    action), int32 ``[B]`` with ``discrete``, else ``[B, *action_shape]`` within the
    bounds. Without memory or gSDE ``carry`` (:func:`initial_carry`: ``()``) is passed
    through.

    With ``use_sde`` the sampled action is ``tanh(mean + z(s) @ theta)``, ``theta`` the
    env's noise matrix in ``carry["sde"]``, drawn afresh where its step counter is 0
    (:func:`jaxrl.distributions.sde_next_matrix`); ``deterministic`` leaves that state
    alone.

    With ``memory``, ``carry`` is :func:`initial_carry`'s dict: ``params`` holds only the
    actor, so ``act`` advances ``carry["actor"]`` and passes ``carry["critic"]`` through;
    training's own collection (:func:`collect`) also advances the critic's memory, which
    the replay needs and acting does not."""
    inputs = obs = offpolicy.observe(params, obs, config)
    if config.memory != "none":
        actor = make_actor(config)
        features, actor_carry = offpolicy.encode(actor, params["actor"], offpolicy.add_time(obs), carry["actor"])
        inputs, carry = features[0], {**carry, "actor": actor_carry}
    dist, noise = policy_distribution_and_noise(params["actor"], inputs, config)
    if deterministic:
        action = dist.mode()
    elif config.use_sde:
        matrix, sde = sde_next_matrix(carry["sde"], key, config.sde_sample_freq)
        action, carry = jnp.tanh(dist.loc + noise.noise(matrix)), {**carry, "sde": sde}
    else:
        action = dist.sample(key)
    if config.discrete:
        return action, carry
    spec = env_spec(config)
    return spec.from_unit(action.reshape(action.shape[:1] + spec.action_shape)), carry


# ----------------------------------------------------------------------------- learning


def _soft_values(actor_params, critic_params, actor_in, critic_in, key, config: Config):
    """``(E_pi[min_i Q_i(s, a)], E_pi[log pi(a|s)])``, each ``[B]`` (with ``memory``
    ``[T, B]``): one reparameterised sample for continuous actions, the exact sum over
    actions for discrete ones. ``actor_in`` / ``critic_in``: the observations, or with
    ``memory`` each network's encoder features."""
    dist = policy_distribution(actor_params, actor_in, config)
    if config.discrete:
        q = jnp.min(q_values(critic_params, critic_in, None, config), axis=0)  # [B, A]
        probs, log_probs = dist.probs(), jax.nn.log_softmax(dist.logits)
        return jnp.sum(probs * q, axis=-1), jnp.sum(probs * log_probs, axis=-1)
    action, log_prob = dist.sample_and_log_prob(key)
    return jnp.min(q_values(critic_params, critic_in, action, config), axis=0), log_prob


def critic_target(
    actor_params, target_critic_params, alpha: jax.Array, batch: dict, key: jax.Array, config: Config
) -> jax.Array:
    """Soft TD targets ``[B]``: ``reward + discount * (1 - terminated) * V(s')`` with
    ``V(s') = E_{a' ~ pi}[min_i Q'_i(s', a') - alpha log pi(a'|s')]``.

    With ``memory``, ``batch`` holds windows (:func:`jaxrl.algorithms.offpolicy.sample_windows`) and the targets are
    ``[L - burn_in, B]``, time-major over the trained steps: ``V`` at ``next_obs[t]``
    from the actor's and the target critics' memories after step ``t``
    (:func:`jaxrl.algorithms.offpolicy.window_features`), so truncated episodes bootstrap from their final
    observation."""
    if config.memory == "none":
        steps, actor_in, critic_in = batch, batch["next_obs"], batch["next_obs"]
    else:
        steps = offpolicy.window_steps(batch, config)
        _, actor_in = offpolicy.window_features(make_actor(config), actor_params, batch, "actor", config, next_obs=True)
        _, critic_in = offpolicy.window_features(
            make_critic(config), target_critic_params, batch, "critic", config, next_obs=True
        )
    next_q, next_log_prob = _soft_values(actor_params, target_critic_params, actor_in, critic_in, key, config)
    discount = steps["discount"] * (1.0 - steps["terminated"].astype(jnp.float32))
    return steps["reward"] + discount * (next_q - alpha * next_log_prob)


def critic_loss(critic_params, target: jax.Array, batch: dict, config: Config):
    """Squared error of both critics against ``target [B]`` (with ``memory`` ``[L -
    burn_in, B]``, the critics re-run over the windows), averaged over the batch and
    summed over critics. Returns ``(loss, q_mean)``."""
    if config.discrete:
        q = q_values(critic_params, batch["obs"], None, config)  # [2, B, A]
        one_hot = jax.nn.one_hot(batch["action"], q.shape[-1], dtype=q.dtype)
        q = jnp.sum(q * one_hot, axis=-1)
    else:
        steps, inputs = batch, batch["obs"]
        if config.memory != "none":
            steps = offpolicy.window_steps(batch, config)
            inputs, _ = offpolicy.window_features(make_critic(config), critic_params, batch, "critic", config)
        action = env_spec(config).to_unit(steps["action"])
        action = action.reshape(action.shape[: action.ndim - len(env_spec(config).action_shape)] + (-1,))
        q = q_values(critic_params, inputs, action, config)
    error = jnp.square(q - target)
    if "valid" in batch:  # offpolicy.sample's weight is 0 on an env's padding steps (memory refuses such envs)
        error = error * batch["weight"]
    return jnp.sum(jnp.mean(error, axis=tuple(range(1, q.ndim)))), jnp.mean(q)


def actor_loss(actor_params, critic_params, alpha: jax.Array, obs, key: jax.Array, config: Config):
    """``mean(alpha log pi(a|s) - min_i Q_i(s, a))`` over ``obs`` (with ``memory``, a
    batch of windows: the actor and the critics re-run over them, the mean over the
    trained steps). Returns ``(loss, entropy)``, the entropy estimate ``-mean log pi``
    (exact for discrete)."""
    actor_in = critic_in = obs
    if config.memory != "none":
        actor_in, _ = offpolicy.window_features(make_actor(config), actor_params, obs, "actor", config)
        critic_in, _ = offpolicy.window_features(make_critic(config), critic_params, obs, "critic", config)
    q, log_prob = _soft_values(actor_params, critic_params, actor_in, critic_in, key, config)
    return jnp.mean(alpha * log_prob - q), -jnp.mean(log_prob)


def alpha_loss(log_alpha: jax.Array, entropy: jax.Array, config: Config) -> jax.Array:
    """``log_alpha * (entropy - target_entropy)``: alpha falls while the policy's
    entropy is above the target and rises below it."""
    return log_alpha * (jax.lax.stop_gradient(entropy) - target_entropy(config))


def update(state: State, batch: dict, key: jax.Array, config: Config):
    """One step of the critics, then the actor (against the updated critics), then the
    temperature (with ``autotune``), then the Polyak update of the target critics.
    ``batch`` comes from :func:`jaxrl.algorithms.offpolicy.sample` (with ``memory``,
    :func:`jaxrl.algorithms.offpolicy.sample_windows`). Returns ``(state, metrics)``."""
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
        batch["obs"] if config.memory == "none" else batch,
        actor_key,
        config,
    )

    t_loss, grad = jax.value_and_grad(alpha_loss)(state.log_alpha, entropy, config)
    log_alpha, alpha_opt = state.log_alpha, state.opt_state["alpha"]
    if config.autotune:
        updates, alpha_opt = optimizer.update(grad, alpha_opt, log_alpha)
        log_alpha = optax.apply_updates(log_alpha, updates)

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


learner = offpolicy.Learner(
    init,
    act,
    initial_carry,
    offpolicy.actor_critic_behaviour(act, make_critic),
    offpolicy.actor_critic_sample,
    learn,
    LEARNER_METRICS,
)
step, warmup_step, program = learner.step, learner.warmup_step, learner.program
algorithm = learner.algorithm(
    "sac",
    Config,
    update,
    PRESETS,
    summary="Soft actor-critic: entropy-regularised actor, twin critics",
)
__getattr__ = algorithm.module_getattr(__name__)  # sac.train, sac.preset: the record's
