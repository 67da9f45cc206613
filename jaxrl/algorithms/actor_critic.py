"""What the off-policy actor-critics (DDPG, TD3, SAC) share: the fields of their
Configs, the data path that hands their losses the inputs, their networks, the start of
their state, the critics' regression, the TD target, the behaviour policy and the batch.

The data path is chosen once, from ``memory`` (:func:`data_path`):

* :data:`TRANSITIONS` (``memory="none"``): feed-forward networks
  (:class:`jaxrl.networks.Actor`, an :func:`~jaxrl.networks.ensemble` of
  :class:`~jaxrl.networks.ContinuousQ`) learn from ``n_step`` transitions of a replay
  buffer; a network's inputs are the observations.
* :data:`WINDOWS` (``memory="gru"`` / ``"lstm"``): recurrent networks
  (:class:`jaxrl.networks.RecurrentActor`, :class:`~jaxrl.networks.RecurrentContinuousQ`:
  a torso and a core, then heads) learn from windows of a sequence replay; both
  memories advance while acting and are stored with every step, and each network's
  encoder is re-run over a window from its stored memory
  (:func:`jaxrl.algorithms.offpolicy.window_features`); a network's inputs are its
  encoder's features, time-major over the trained steps.

Either way a loss reads the step fields (:attr:`DataPath.steps`: ``action``, ``reward``,
``discount``, ``terminated``, leaves ``[B]`` or ``[T, B]``), each network's inputs at
``obs`` and ``next_obs`` (:func:`inputs`) and the networks' heads on them
(:attr:`DataPath.head`), so DDPG's, TD3's and SAC's losses are written once for both.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import envs, networks, optim, rollout
from jaxrl.algorithms import offpolicy
from jaxrl.buffers.sequence import Windows
from jaxrl.config import (
    check_traced_parts,
    freeze_mapping,
    require_choice,
    require_range,
    static,
)
from jaxrl.networks import Actor, ContinuousQ, RecurrentActor, RecurrentContinuousQ, ensemble


@struct.dataclass
class Config(offpolicy.ReplaySchedule):
    """The fields DDPG, TD3 and SAC all read (each algorithm's Config adds its own).
    Static fields fix the program; the rest can be traced and vmapped.

    One iteration collects ``num_steps`` steps from each of ``num_envs`` envs, then runs
    ``num_updates`` critic updates on batches of ``batch_size``. With ``memory`` on
    (``n_step=1``) replay holds ``windows``: ``windows.length`` steps starting every
    ``windows.period`` steps of each env, ``batch_size`` counts windows, and the losses
    train every step after the first ``windows.burn_in``.
    """

    ALGORITHM = "actor-critic"  # named in error messages (not a field)

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
    network: Any = static("mlp")  # a shorthand or your torso: networks.resolve_torso
    hidden_sizes: tuple = static((64, 64))  # small nets suit classic control; (256, 256) for MuJoCo
    activation: str = static("relu")
    memory: str = static("none")  # "gru" or "lstm": a recurrent core in the actor and in the critics
    memory_size: int = static(64)  # each recurrent core's units
    windows: Windows = Windows()  # with memory: replayed windows (length, burn-in, period)
    normalize_observations: bool = static(False)  # running stats in params; replay keeps raw observations
    replay_obs_dtype: Any = static(None)  # "uint8" / "bool": replay keeps 0/1 or 8-bit observations compact
    scale_rewards: bool = static(False)  # divide rewards by the running std of the discounted return
    num_evals: int = static(10)
    eval_episodes: int = static(10)
    num_reports: int = static(50)
    # --- traced hyper-parameters
    learning_rate: float = 1e-3  # every network (Adam)
    gamma: float = 0.99
    tau: float = 0.005  # Polyak rate of the target networks

    def __post_init__(self):
        object.__setattr__(self, "env_kwargs", freeze_mapping(self.env_kwargs, "env_kwargs"))
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        self.check_schedule()
        offpolicy.check_normalization(self)
        offpolicy.check_replay_obs_dtype(self)
        spec = self.check_actions()
        networks.require_network(self, spec, check_whole_network)
        require_choice(self, "memory", networks.MEMORY_KINDS)
        if self.memory != "none":
            if self.n_step != 1:
                raise ValueError(f"memory={self.memory!r} trains one-step targets: n_step must be 1, got {self.n_step}")
            offpolicy.check_sequence_replay(self, bootstrap_steps=0)

    def check_actions(self) -> envs.EnvSpec:
        """The env's spec; ValueError unless its actions suit the algorithm (a Box with
        finite bounds)."""
        return offpolicy.require_box_actions(self, self.ALGORITHM)

    def check_traced(self) -> None:
        """ValueErrors for traced numbers out of range (skipped while tracing), the parts' included."""
        require_range(self, "learning_rate", 0.0, float("inf"), low_open=True)
        require_range(self, "gamma", 0.0, 1.0)
        require_range(self, "tau", 0.0, 1.0, low_open=True)
        check_traced_parts(self)


# ----------------------------------------------------------------------------- data paths


class DataPath(NamedTuple):
    """How an actor-critic's data reach its losses (see the module's docstring): each
    attribute a function, so the losses call them without asking which path they are on.

    Attributes:
      actor: ``actor(action_dim, kind, config)``, the policy network
        (:class:`jaxrl.networks.Actor`'s ``kind``).
      critic: ``critic(num_critics, config)``, Q-critics of continuous actions.
      init: ``init(module, key, config, obs, *inputs)``: a network's parameters from
        one step's ``obs [1, ...]`` and ``inputs [1, ...]``.
      init_buffer: ``init_buffer(obs, action, carry, config)``: an empty replay.
      sample: ``sample(buffer, key, config)``: a raw batch of ``batch_size``.
      steps: ``steps(batch, config)``: a batch's step fields as the losses align them.
      features: ``features(module, params, batch, name, config, next_obs=False) ->
        (inputs at obs, inputs at next_obs or None)``; ``name`` is the network's memory
        in ``batch["carry"]``.
      encode: ``encode(module, params, obs, carry, name) -> (inputs, carry)``: one
        acting step's inputs at ``obs [B, ...]``, the memory ``carry[name]`` advanced.
      head: ``head(module, params, inputs, *args)``: the network's output on its inputs.
      leading_critics: ``leading_critics(critic_params, count)``: the parameters of the
        first ``count`` critics (an ensemble of ``count``).
      behaviour: ``behaviour(act, make_critic, state, config, uniform) -> policy``, the
        collecting policy (:func:`behaviour`).
    """

    actor: Callable
    critic: Callable
    init: Callable
    init_buffer: Callable
    sample: Callable
    steps: Callable
    features: Callable
    encode: Callable
    head: Callable
    leading_critics: Callable
    behaviour: Callable


def _layout(config) -> tuple:
    """``(network, hidden_sizes, activation, obs_ndim)`` of the config's torso."""
    spec = envs.config_spec(config)
    return (networks.resolve_torso(config.network, spec), config.hidden_sizes, config.activation, spec.obs_ndim)


def _feedforward_actor(action_dim: int, kind: str, config):
    if isinstance(config.network, networks.Whole):
        return whole_actor(action_dim, kind, config)
    return Actor(action_dim, kind, *_layout(config))


def _feedforward_critic(num_critics: int, config):
    if isinstance(config.network, networks.Whole):
        spec = envs.config_spec(config)
        return whole_critics(num_critics, spec.action_shape[0], False, config)
    network, hidden_sizes, activation, obs_ndim = _layout(config)
    return ensemble(ContinuousQ, num_critics)(hidden_sizes, activation, obs_ndim, network)


def check_whole_network(config, spec: envs.EnvSpec) -> None:
    """A whole network (:class:`jaxrl.networks.Whole`) here is an actor and a critic,
    feed-forward; their calls are checked where they are built, once the algorithm has
    chosen its policy (:func:`whole_actor`, :func:`whole_critics`)."""
    networks.refuse_head_options({"memory": config.memory != "none", "sde": getattr(config, "sde", None) is not None})
    if config.network.critic is None:
        raise ValueError("network: Whole(actor, critic=...) needs the critic too (the algorithm ensembles it)")
    networks.user_module(config.network.network, spec)
    networks.user_module(config.network.critic, spec)


def whole_actor(action_dim: int, kind: str, config) -> nn.Module:
    """The user's actor, checked: ``actor(obs)`` returns actions in ``[-1, 1]``
    (``"deterministic"``), logits (``"categorical"``) or ``(loc, log_std)`` (``"gaussian"``),
    each ``[..., action_dim]``."""
    spec = envs.config_spec(config)
    module = networks.user_module(config.network.network, spec)
    _check_whole(module, "actor", kind, action_dim, networks.abstract_key(spec.observation))
    return module


def whole_critics(num_critics: int, action_dim: int, discrete: bool, config) -> nn.Module:
    """An :func:`~jaxrl.networks.ensemble` of ``num_critics`` copies of the user's critic,
    checked: ``critic(obs, action [..., A]) -> q [...]``, or with ``discrete`` actions
    ``critic(obs) -> q [..., A]`` (called as :class:`~jaxrl.networks.QNetwork` is, through
    :class:`~jaxrl.networks.WholeQ`)."""
    spec = envs.config_spec(config)
    module = networks.user_module(config.network.critic, spec)
    kind = "discrete" if discrete else "continuous"
    _check_whole(module, "critic", kind, action_dim, networks.abstract_key(spec.observation))
    if discrete:
        return ensemble(networks.WholeQ, num_critics)(module)
    fields = {f.name: getattr(module, f.name) for f in dataclasses.fields(module) if f.name not in ("parent", "name")}
    return ensemble(type(module), num_critics)(**fields)


@functools.lru_cache(maxsize=32)
def _check_whole(module: nn.Module, role: str, kind: str, action_dim: int, observation_key: tuple) -> None:
    observation = networks.probe_batch(networks.from_abstract_key(observation_key))
    dims = networks.PROBE_DIMS
    actions = dims + (action_dim,)
    if role == "critic" and kind == "discrete":
        networks.check_call(module, (observation,), [actions], f"critic(obs) -> q [..., {action_dim}]")
    elif role == "critic":
        call = f"critic(obs, action [..., {action_dim}]) -> q [...]"
        networks.check_call(module, (observation, jax.ShapeDtypeStruct(actions, jnp.float32)), [dims], call)
    else:
        expected = (actions, actions) if kind == "gaussian" else actions
        output = "(loc, log_std)" if kind == "gaussian" else f"{kind} output"
        networks.check_call(module, (observation,), [expected], f"actor(obs) -> {output} [..., {action_dim}]")


def _transition_behaviour(act: Callable, make_critic: Callable, state, config, uniform: bool) -> Callable:
    params, spec = state.params, envs.config_spec(config)

    def policy(obs, carry, key):
        if uniform:
            return offpolicy.random_actions(key, spec, config.num_envs, obs), carry
        return act(params, obs, carry, key, config)

    return policy


TRANSITIONS = DataPath(
    actor=_feedforward_actor,
    critic=_feedforward_critic,
    init=lambda module, key, config, obs, *inputs: module.init(key, obs, *inputs),
    init_buffer=lambda obs, action, carry, config: offpolicy.init_buffer(obs, action, config),
    sample=offpolicy.sample,
    steps=lambda batch, config: batch,
    features=lambda module, params, batch, name, config, next_obs=False: (
        batch["obs"],
        batch["next_obs"] if next_obs else None,
    ),
    encode=lambda module, params, obs, carry, name: (obs, carry),
    head=lambda module, params, inputs, *args: module.apply(params, inputs, *args),
    leading_critics=lambda critic_params, count: jax.tree.map(lambda p: p[:count], critic_params),
    behaviour=_transition_behaviour,
)


def _recurrent_critic(num_critics: int, config) -> RecurrentContinuousQ:
    network, hidden_sizes, activation, obs_ndim = _layout(config)
    return RecurrentContinuousQ(
        hidden_sizes, activation, obs_ndim, config.memory, config.memory_size, num_critics, network
    )


def _init_sequence_of_one(module, key: jax.Array, config, obs, *inputs):
    memory = networks.initial_carry(config.memory, config.memory_size, 1)
    return module.init(key, offpolicy.add_time(obs), *offpolicy.add_time(inputs), memory)


def _encode_one_step(module, params, obs, carry, name: str):
    features, memory = offpolicy.encode(module, params, offpolicy.add_time(obs), carry[name])
    return features[0], {**carry, name: memory}


def _leading_heads(critic_params, count: int):
    heads = jax.tree.map(lambda p: p[:count], critic_params["params"]["heads"])  # one encoder serves every head
    return {"params": {**critic_params["params"], "heads": heads}}


def _window_behaviour(act: Callable, make_critic: Callable, state, config, uniform: bool) -> Callable:
    params, critic_params, spec = state.params, state.critic_params, envs.config_spec(config)

    def policy(obs, carry, key):
        act_key, random_key = jax.random.split(key)
        action, carry = act(params, obs, carry, act_key, config)
        if uniform:
            action = offpolicy.random_actions(random_key, spec, config.num_envs)
        critic_obs = offpolicy.observe(params, obs, config)
        return action, _encode_one_step(make_critic(config), critic_params, critic_obs, carry, "critic")[1]

    return policy


WINDOWS = DataPath(
    actor=lambda action_dim, kind, config: RecurrentActor(
        action_dim, kind, *_layout(config), config.memory, config.memory_size
    ),
    critic=_recurrent_critic,
    init=_init_sequence_of_one,
    init_buffer=offpolicy.init_sequence_buffer,
    sample=offpolicy.sample_windows,
    steps=offpolicy.window_steps,
    features=offpolicy.window_features,
    encode=_encode_one_step,
    head=lambda module, params, features, *args: module.apply(params, features, *args, method="from_features"),
    leading_critics=_leading_heads,
    behaviour=_window_behaviour,
)


def data_path(config) -> DataPath:
    """:data:`WINDOWS` with ``memory`` on, else :data:`TRANSITIONS`: the one place an
    actor-critic asks."""
    return TRANSITIONS if config.memory == "none" else WINDOWS


# ----------------------------------------------------------------------------- set-up


def make_optimizer(config) -> optax.GradientTransformation:
    """Adam at the config's (traced) ``learning_rate``, for every network."""
    return optax.inject_hyperparams(optax.adam)(learning_rate=config.learning_rate)


def start(key: jax.Array, config, actor, critic, action: jax.Array, carry, critic_reads_action: bool = True) -> dict:
    """The fields every actor-critic's state starts with: ``params`` (the actor's, from
    ``actor``, a module, and with ``normalize_observations`` the observation statistics),
    ``critic_params`` (of ``critic``), an empty replay for actions like ``action
    [num_envs, ...]`` (zeros), ``num_envs`` reset envs and their policy state ``carry``
    (the algorithm's ``initial_carry``), zero step counters. A continuous critic reads an
    action beside the observation (``critic_reads_action``)."""
    env, env_params = offpolicy.make_env(config)
    actor_key, critic_key, env_key = jax.random.split(key, 3)
    obs, env_state = rollout.reset(env, env_params, env_key, config.num_envs)
    path, one_obs = data_path(config), envs.config_spec(config).zeros((1,))
    critic_inputs = (action[:1].reshape(1, -1),) if critic_reads_action else ()
    return dict(
        params=offpolicy.init_params({"actor": path.init(actor, actor_key, config, one_obs)}, config),
        critic_params=path.init(critic, critic_key, config, one_obs, *critic_inputs),
        buffer=path.init_buffer(obs, action, carry, config),
        env_state=env_state,
        obs=obs,
        timesteps=jnp.zeros((), jnp.int32),
        updates=jnp.zeros((), jnp.int32),
        carry=carry,
    )


# ----------------------------------------------------------------------------- acting


def with_entry(carry, name: str, value):
    """``carry`` (a dict, or ``()``) with ``value`` under ``name``, unchanged where
    ``value`` is ``()`` (a part that keeps no state)."""
    if isinstance(value, tuple) and not value:
        return carry
    return {**carry, name: value} if carry else {name: value}


def entry(carry, name: str):
    """``carry[name]``, or ``()`` where ``carry`` has no such entry."""
    return carry[name] if isinstance(carry, dict) and name in carry else ()


def behaviour(act: Callable, make_critic: Callable) -> Callable:
    """An actor-critic's ``behaviour`` (:class:`jaxrl.algorithms.offpolicy.Learner`):
    ``act`` exploring, or with ``uniform`` uniformly random actions
    (:func:`jaxrl.algorithms.offpolicy.random_actions`). On :data:`WINDOWS` the critics'
    encoder (``make_critic(config)``) also advances its memory (``carry["critic"]``) on
    each observation, as the sequence replay stores it with the actor's."""

    def collecting(state, config, uniform: bool):
        return data_path(config).behaviour(act, make_critic, state, config, uniform), {}

    return collecting


def sample(state, key: jax.Array, config) -> dict:
    """An actor-critic's batch as its networks read it
    (:func:`jaxrl.algorithms.offpolicy.observe_batch`): ``n_step`` transitions
    (:func:`jaxrl.algorithms.offpolicy.sample`) or windows
    (:func:`jaxrl.algorithms.offpolicy.sample_windows`)."""
    return offpolicy.observe_batch(state.params, data_path(config).sample(state.buffer, key, config), config)


def learner(init: Callable, act: Callable, initial_carry: Callable, make_critic: Callable, learn: Callable, metrics):
    """The :class:`jaxrl.algorithms.offpolicy.Learner` of an actor-critic from its own
    ``init``, ``act``, ``initial_carry``, critics and ``learn``."""
    return offpolicy.Learner(init, act, initial_carry, behaviour(act, make_critic), sample, learn, metrics)


# ----------------------------------------------------------------------------- learning


def inputs(actor, actor_params, critic, critic_params, batch: dict, config, next_obs: bool = False) -> tuple:
    """``(actor inputs, critic inputs)``: what the actor (``actor``, a module, with
    ``actor_params``) and the critics read at the batch's ``obs`` or, with ``next_obs``,
    at its ``next_obs`` (:attr:`DataPath.features`)."""
    features = data_path(config).features
    actor_in = features(actor, actor_params, batch, "actor", config, next_obs=next_obs)
    critic_in = features(critic, critic_params, batch, "critic", config, next_obs=next_obs)
    return (actor_in[1], critic_in[1]) if next_obs else (actor_in[0], critic_in[0])


def td_target(steps: dict, next_value: jax.Array) -> jax.Array:
    """``reward + discount * (1 - terminated) * next_value``, over the step fields
    ``steps`` (:attr:`DataPath.steps`): bootstrapped through truncation, stopped at
    termination."""
    discount = steps["discount"] * (1.0 - steps["terminated"].astype(jnp.float32))
    return steps["reward"] + discount * next_value


def critic_loss(critic, critic_params, target: jax.Array, batch: dict, config, q_of_action: Callable | None = None):
    """Squared error of every critic (``critic``, a module) against ``target [B]`` (on
    :data:`WINDOWS` ``[L - burn_in, B]``, the critics re-run over the windows), averaged
    over the batch and summed over critics. ``q_of_action(critic_params, inputs, action)
    -> [C, ...]`` gives the critics' values of the stored actions (by default of
    continuous ones, :func:`unit_action`). Returns ``(loss, q_mean)``."""
    path = data_path(config)
    critic_in, _ = path.features(critic, critic_params, batch, "critic", config)
    action = path.steps(batch, config)["action"]
    if q_of_action is None:
        q = path.head(critic, critic_params, critic_in, unit_action(action, config))
    else:
        q = q_of_action(critic_params, critic_in, action)
    error = jnp.square(q - target)
    if "valid" in batch:  # offpolicy.sample's weight is 0 on an env's padding steps (memory refuses such envs)
        error = error * batch["weight"]
    return jnp.sum(jnp.mean(error, axis=tuple(range(1, q.ndim)))), jnp.mean(q)


def critic_step(state, loss: Callable, target: jax.Array, batch: dict, config):
    """One optimiser step of the critics on ``loss(critic_params, target, batch, config)``.
    Returns ``(critic_params, critic_opt_state, loss, q_mean)``."""
    return optim.step(
        make_optimizer(config), loss, state.critic_params, state.opt_state["critic"], target, batch, config
    )


def unit_action(action: jax.Array, config) -> jax.Array:
    """Env actions ``[..., *action_shape]`` as unit actions ``[..., A]`` in ``[-1, 1]``."""
    spec = envs.config_spec(config)
    unit = spec.to_unit(action)
    return unit.reshape(unit.shape[: unit.ndim - len(spec.action_shape)] + (-1,))


def env_action(unit: jax.Array, config) -> jax.Array:
    """Unit actions ``[B, A]`` as env actions ``[B, *action_shape]`` within the Box bounds."""
    spec = envs.config_spec(config)
    return spec.from_unit(unit.reshape(unit.shape[:1] + spec.action_shape))
