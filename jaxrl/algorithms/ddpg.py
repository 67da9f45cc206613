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

Observations are arrays or dicts / tuples of arrays (goal-conditioned tasks, images
beside vectors): ``network="mlp"`` flattens and concatenates the leaves; ``"cnn"``
(MinAtar), ``"nature_cnn"`` and ``"impala_cnn"`` send each image leaf through its own
convolutions (:func:`jaxrl.networks.torso`). The actor and every critic have their own
encoder; a critic concatenates the action to its encoder's features, then dense layers.

``memory="gru"`` or ``"lstm"`` makes it recurrent DDPG / TD3, the sequence learner of
recurrent SAC (:mod:`jaxrl.algorithms.sac`) with a deterministic actor: the actor and
the critics each have their own recurrent encoder (the Q heads share the critics'),
both memories advance while acting and are stored with every step in a sequence replay
(:mod:`jaxrl.buffers.sequence`, uniform over windows), and the learner re-runs the
actor, the critics and both targets over each window of ``windows.length`` steps from
the stored memories, the first ``windows.burn_in`` steps only warming them up, with one-step
targets bootstrapped through truncation from the final observation. ::

    config = ddpg.Config(env_id="Pendulum-v1")
    out = jax.jit(ddpg.train)(jax.random.key(0), config)
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
from jaxrl.algorithms import offpolicy
from jaxrl.buffers.sequence import Windows
from jaxrl.config import freeze_mapping, require_choice, require_int, require_network, require_range, static
from jaxrl.networks import Actor, ContinuousQ, RecurrentActor, RecurrentContinuousQ, ensemble

EXPLORATIONS = ("gaussian", "ou")
LEARNER_METRICS = ("critic_loss", "actor_loss", "q_mean")


@struct.dataclass
class Config(offpolicy.ReplaySchedule):
    """DDPG settings (TD3 with ``twin_critics=True, policy_delay=2, target_noise=0.2``).
    Static fields fix the program; the rest can be traced and vmapped.

    One iteration collects ``num_steps`` steps from each of ``num_envs`` envs, then
    runs ``num_updates`` critic updates (and ``num_updates / policy_delay`` actor
    updates) on batches of ``batch_size``.

    With ``memory`` on (``n_step=1``) replay holds ``windows`` of
    ``windows.length`` steps starting every ``windows.period`` steps of each env, ``batch_size`` counts windows,
    and the losses train every step after the first ``burn_in``.
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
    network: str = static("mlp")  # or "cnn" (MinAtar), "nature_cnn", "impala_cnn": image leaves through convolutions
    hidden_sizes: tuple = static((64, 64))  # small nets suit classic control; (256, 256) for MuJoCo
    activation: str = static("relu")
    twin_critics: bool = static(False)
    policy_delay: int = static(1)  # critic updates per actor / target update
    memory: str = static("none")  # "gru" or "lstm": a recurrent core in the actor and in the critics
    memory_size: int = static(64)  # each recurrent core's units
    windows: Windows = Windows()  # with memory: replayed windows (length, burn-in, period)
    normalize_observations: bool = static(False)  # running stats in params; replay keeps raw observations
    scale_rewards: bool = static(False)  # divide rewards by the running std of the discounted return
    num_evals: int = static(10)
    eval_episodes: int = static(10)
    num_reports: int = static(50)
    # --- traced hyper-parameters
    learning_rate: float = 1e-3  # actor and critic (Adam)
    gamma: float = 0.99
    tau: float = 0.005  # Polyak rate of the target networks
    exploration: str = static("gaussian")  # "gaussian": independent noise per step; "ou": Ornstein-Uhlenbeck
    exploration_noise: float = 0.1  # the noise's std (OU: its sigma), in units of the half action range
    ou_theta: float = 0.15  # OU: the pull toward 0 per unit of time
    ou_dt: float = 0.01  # OU: the time one env step takes (theta * dt: the noise's decay per step)
    target_noise: float = 0.0  # TD3 target smoothing std (same units); 0 is DDPG
    target_noise_clip: float = 0.5

    def __post_init__(self):
        object.__setattr__(self, "env_kwargs", freeze_mapping(self.env_kwargs, "env_kwargs"))
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        self.check_schedule()
        offpolicy.check_normalization(self)
        require_int(self, "policy_delay", 1)
        if self.num_updates % self.policy_delay:
            raise ValueError(
                f"num_updates ({self.num_updates}) must be a multiple of policy_delay ({self.policy_delay}), "
                "so every iteration runs whole actor-update periods"
            )
        require_choice(self, "exploration", EXPLORATIONS)
        spec = offpolicy.require_box_actions(self, self.ALGORITHM)
        require_network(self, spec.obs_ndim)
        require_choice(self, "memory", networks.MEMORY_KINDS)
        if self.memory != "none":
            if self.n_step != 1:
                raise ValueError(f"memory={self.memory!r} trains one-step targets: n_step must be 1, got {self.n_step}")
            offpolicy.check_sequence_replay(self, bootstrap_steps=0)


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
    carry: Any = ()  # {"actor", "critic"} memories for ``obs``, leaves [num_envs, ...]; () without memory


# ----------------------------------------------------------------------------- set-up


def env_spec(config: Config) -> envs.EnvSpec:
    return envs.config_spec(config)


def make_actor(config: Config) -> Actor | RecurrentActor:
    """The deterministic actor: the ``network`` torso (:func:`jaxrl.networks.torso`) on
    the observation (any pytree of leaves), a ``tanh`` head; with ``memory`` a
    :class:`RecurrentActor`."""
    spec = env_spec(config)
    layout = (config.network, config.hidden_sizes, config.activation, spec.obs_ndim)
    if config.memory != "none":
        return RecurrentActor(
            int(np.prod(spec.action_shape)), "deterministic", *layout, config.memory, config.memory_size
        )
    return Actor(int(np.prod(spec.action_shape)), "deterministic", *layout)


def make_critic(config: Config, num_critics: int | None = None):
    """Q-critics ``(obs [B, ...], unit action [B, A]) -> [num_critics, B]``; by default
    two with ``twin_critics``, else one: each encodes the observation (the ``network``'s
    convolutions for image leaves; flattened for ``"mlp"``), concatenates the action and
    applies dense layers. With ``memory`` a :class:`RecurrentContinuousQ` (one encoder, a
    ``network`` torso and a core, the Q heads on its output)."""
    num_critics = num_critics or (2 if config.twin_critics else 1)
    obs_ndim = env_spec(config).obs_ndim
    if config.memory != "none":
        return RecurrentContinuousQ(
            config.hidden_sizes,
            config.activation,
            obs_ndim,
            config.memory,
            config.memory_size,
            num_critics,
            config.network,
        )
    return ensemble(ContinuousQ, num_critics)(config.hidden_sizes, config.activation, obs_ndim, config.network)


def make_optimizer(config: Config) -> optax.GradientTransformation:
    return optax.inject_hyperparams(optax.adam)(learning_rate=config.learning_rate)


def _check_traced(config: Config) -> None:
    require_range(config, "learning_rate", 0.0, float("inf"), low_open=True)
    require_range(config, "gamma", 0.0, 1.0)
    require_range(config, "tau", 0.0, 1.0, low_open=True)
    for field in ("ou_theta", "ou_dt"):
        require_range(config, field, 0.0, float("inf"), low_open=True)
    for field in ("exploration_noise", "target_noise", "target_noise_clip"):
        require_range(config, field, 0.0, float("inf"))


def init(key: jax.Array, config: Config) -> State:
    """Actor, critics, their targets (copies), optimisers, an empty buffer,
    ``num_envs`` reset envs and (with ``memory``) their initial memories."""
    _check_traced(config)
    env, env_params = offpolicy.make_env(config)
    actor_key, critic_key, env_key = jax.random.split(key, 3)
    obs, env_state = rollout.reset(env, env_params, env_key, config.num_envs)
    spec = env_spec(config)
    action = jnp.zeros((config.num_envs,) + spec.action_shape, jnp.float32)
    carry = initial_carry(config, config.num_envs)
    if config.memory != "none":  # sequences of one step
        one = initial_carry(config, 1)
        unit = action[None, :1].reshape(1, 1, -1)
        actor_params = make_actor(config).init(actor_key, spec.zeros((1, 1)), one["actor"])
        critic_params = make_critic(config).init(critic_key, spec.zeros((1, 1)), unit, one["critic"])
        buffer = offpolicy.init_sequence_buffer(obs, action, carry, config)
    else:
        actor_params = make_actor(config).init(actor_key, spec.zeros((1,)))
        critic_params = make_critic(config).init(critic_key, spec.zeros((1,)), action[:1].reshape(1, -1))
        buffer = offpolicy.init_buffer(obs, action, config)
    optimizer = make_optimizer(config)
    return State(
        params=offpolicy.init_params({"actor": actor_params}, config),
        critic_params=critic_params,
        target_params={"actor": actor_params, "critic": critic_params},
        opt_state={"actor": optimizer.init(actor_params), "critic": optimizer.init(critic_params)},
        buffer=buffer,
        env_state=env_state,
        obs=obs,
        timesteps=jnp.zeros((), jnp.int32),
        updates=jnp.zeros((), jnp.int32),
        carry=carry,
    )


# ----------------------------------------------------------------------------- acting


def initial_carry(config: Config, batch_size: int):
    """The policy's state before an episode, for ``batch_size`` envs: with ``memory`` the
    ``{"actor", "critic"}`` memories (:func:`jaxrl.algorithms.offpolicy.initial_carry`), with
    ``exploration="ou"`` the Ornstein-Uhlenbeck noise ``"noise"`` (zeros ``[batch_size,
    action_dim]``), so that the rollout resets both where an episode ends; ``()`` without
    either."""
    carry = offpolicy.initial_carry(config, batch_size)
    if config.exploration != "ou":
        return carry
    noise = jnp.zeros((batch_size, math.prod(env_spec(config).action_shape)), jnp.float32)
    return {**carry, "noise": noise} if carry else {"noise": noise}


def ou_noise(noise: jax.Array, key: jax.Array, config: Config) -> jax.Array:
    """One Euler step of the Ornstein-Uhlenbeck process (Uhlenbeck & Ornstein, 1930) that
    DDPG explores with (Lillicrap et al., 2016): ``noise [B, d] - theta * noise * dt +
    sigma * sqrt(dt) * eps``, ``eps ~ N(0, 1)`` drawn from ``key``, sigma =
    ``exploration_noise``. Its steps are correlated over about ``1 / (theta * dt)`` steps,
    so the actions push one way long enough to explore (MountainCarContinuous)."""
    eps = jax.random.normal(key, noise.shape)
    return noise - config.ou_theta * noise * config.ou_dt + config.exploration_noise * jnp.sqrt(config.ou_dt) * eps


def act(params: dict, obs: jax.Array, carry, key: jax.Array, config: Config, deterministic: bool = False):
    """``(action [B, *action_shape], carry)`` for observations ``[B, *obs_shape]``: the
    actor's, plus exploration noise unless ``deterministic`` (Gaussian, or the next step of
    the Ornstein-Uhlenbeck noise in ``carry["noise"]``, :func:`ou_noise`), clipped to the
    bounds. Without memory or OU noise ``carry`` (:func:`initial_carry`: ``()``) is passed
    through.

    With ``memory``, ``carry`` is :func:`initial_carry`'s dict: ``act`` advances
    ``carry["actor"]`` and passes ``carry["critic"]`` through (training's own collection,
    :func:`collect`, also advances the critic's memory)."""
    spec = env_spec(config)
    obs = offpolicy.observe(params, obs, config)
    if config.memory != "none":
        actor = make_actor(config)
        features, actor_carry = offpolicy.encode(actor, params["actor"], offpolicy.add_time(obs), carry["actor"])
        unit, carry = actor.apply(params["actor"], features[0], method="policy"), {**carry, "actor": actor_carry}
    else:
        unit = make_actor(config).apply(params["actor"], obs)
    if not deterministic:
        if config.exploration == "ou":
            carry = {**carry, "noise": ou_noise(carry["noise"], key, config)}
            noise = carry["noise"]
        else:
            noise = config.exploration_noise * jax.random.normal(key, unit.shape)
        unit = jnp.clip(unit + noise, -1.0, 1.0)
    return spec.from_unit(unit.reshape(unit.shape[:1] + spec.action_shape)), carry


# ----------------------------------------------------------------------------- learning


def critic_target(target_params: dict, batch: dict, key: jax.Array, config: Config) -> jax.Array:
    """TD targets ``[B]``: ``reward + discount * (1 - terminated) * min_i Q'_i(s', a')``
    with ``a' = clip(actor'(s') + clip(target_noise * N(0, 1), +-target_noise_clip), -1, 1)``
    (no noise when ``target_noise`` is 0; one critic without ``twin_critics``).

    With ``memory``, ``batch`` holds windows (:func:`jaxrl.algorithms.offpolicy.sample_windows`)
    and the targets are ``[L - burn_in, B]``, time-major over the trained steps: ``a'``
    and ``Q'`` at ``next_obs[t]`` from the target actor's and the target critics'
    memories after step ``t``, so truncated episodes bootstrap from their final
    observation."""
    if config.memory == "none":
        steps, actor_in, critic_in = batch, batch["next_obs"], batch["next_obs"]
        next_action = make_actor(config).apply(target_params["actor"], actor_in)
    else:
        steps = offpolicy.window_steps(batch, config)
        actor, critic = make_actor(config), make_critic(config)
        _, actor_in = offpolicy.window_features(actor, target_params["actor"], batch, "actor", config, next_obs=True)
        _, critic_in = offpolicy.window_features(
            critic, target_params["critic"], batch, "critic", config, next_obs=True
        )
        next_action = actor.apply(target_params["actor"], actor_in, method="policy")  # [T, B, A]
    noise = config.target_noise * jax.random.normal(key, next_action.shape)
    noise = jnp.clip(noise, -config.target_noise_clip, config.target_noise_clip)
    next_action = jnp.clip(next_action + noise, -1.0, 1.0)
    next_q = jnp.min(q_values(target_params["critic"], critic_in, next_action, config), axis=0)
    discount = steps["discount"] * (1.0 - steps["terminated"].astype(jnp.float32))
    return steps["reward"] + discount * next_q


def q_values(critic_params, obs: jax.Array, action: jax.Array, config: Config, num_critics: int | None = None):
    """The critics' values ``[num_critics, B]`` of unit actions ``[B, A]`` at ``obs [B,
    ...]``; with ``memory``, at the critics' encoder features ``[..., memory_size]``
    (values ``[num_critics, ...]``)."""
    if config.memory != "none":
        return make_critic(config, num_critics).apply(critic_params, obs, action, method="values")
    return make_critic(config, num_critics).apply(critic_params, obs, action)


def _unit_action(action: jax.Array, config: Config) -> jax.Array:
    """Env actions ``[..., *action_shape]`` as unit actions ``[..., A]``."""
    spec = env_spec(config)
    unit = spec.to_unit(action)
    return unit.reshape(unit.shape[: unit.ndim - len(spec.action_shape)] + (-1,))


def critic_loss(critic_params, target: jax.Array, batch: dict, config: Config):
    """Squared TD error of each critic against ``target [B]`` (with ``memory`` ``[L -
    burn_in, B]``, the critics re-run over the windows), averaged over the batch and
    summed over critics. Returns ``(loss, q_mean)``."""
    steps, inputs = batch, batch["obs"]
    if config.memory != "none":
        steps = offpolicy.window_steps(batch, config)
        inputs, _ = offpolicy.window_features(make_critic(config), critic_params, batch, "critic", config)
    q = q_values(critic_params, inputs, _unit_action(steps["action"], config), config)  # [C, B] or [C, T, B]
    error = jnp.square(q - target)
    if "valid" in batch:  # offpolicy.sample's weight is 0 on an env's padding steps (memory refuses such envs)
        error = error * batch["weight"]
    return jnp.sum(jnp.mean(error, axis=tuple(range(1, q.ndim)))), jnp.mean(q)


def actor_loss(actor_params, critic_params, obs, config: Config) -> jax.Array:
    """``-mean Q_1(s, actor(s))``: the first critic judges the actor (as in TD3). With
    ``memory``, ``obs`` is a batch of windows: the actor and the critics re-run over
    them, the mean over the trained steps."""
    if config.memory == "none":
        actor_in = critic_in = obs
        action = make_actor(config).apply(actor_params, obs)
    else:
        actor = make_actor(config)
        actor_in, _ = offpolicy.window_features(actor, actor_params, obs, "actor", config)
        critic_in, _ = offpolicy.window_features(make_critic(config), critic_params, obs, "critic", config)
        action = actor.apply(actor_params, actor_in, method="policy")
    # Evaluating only the first critic halves the critic work (a recurrent encoder is shared).
    if config.memory == "none":
        first = jax.tree.map(lambda p: p[:1], critic_params)
    else:
        heads = jax.tree.map(lambda p: p[:1], critic_params["params"]["heads"])
        first = {"params": {**critic_params["params"], "heads": heads}}
    return -jnp.mean(q_values(first, critic_in, action, config, 1))


def update(state: State, batch: dict, key: jax.Array, config: Config, update_actor: bool | jax.Array = True):
    """One critic step on ``batch`` (from :func:`jaxrl.algorithms.offpolicy.sample`; with ``memory``,
    :func:`jaxrl.algorithms.offpolicy.sample_windows`) and, if
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
            batch["obs"] if config.memory == "none" else batch,
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
    "ddpg",
    Config,
    update,
    PRESETS,
    summary="DDPG: a deterministic actor and Q-critics on replay",
)
__getattr__ = algorithm.module_getattr(__name__)  # ddpg.train, ddpg.preset: the record's
