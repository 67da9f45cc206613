"""Environments: ``make`` for every gymnax id, every id registered with :func:`register`
(such as the partially observed tasks of :mod:`jaxrl.envs.partial`), and every id under
a registered prefix: ``"gymnasium:<id>"`` (stepped on the host: see
:mod:`jaxrl.envs.gymnasium`), ``"pgx:<game>"`` (:mod:`jaxrl.envs.pgx`), the JAX suites
(``"brax:"``, ``"playground:"``, ``"craftax:"``, ``"navix:"``, ``"xminigrid:"``,
``"jumanji:"``) and envpool's C++ envs (``"envpool:"``): one adapter module each,
``jaxrl.envs.<suite>``, and an optional extra each; and a user's own. ``EnvSpec``, and
pure wrappers.

The env API is gymnax >= 1.0: ``reset(key, params) -> (obs, state)`` and
``step(key, state, action, params) -> (obs, state, reward, terminated, truncated, info)``
with auto-reset and the pre-reset observation in ``info["final_observation"]``.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import numbers
from collections.abc import Callable
from typing import Any

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces as gymnax_spaces  # ``spaces`` is our submodule once imported

from jaxrl.envs.spaces import MultiDiscrete
from jaxrl.envs.wrappers import (
    ClipAction,
    EpisodeStatistics,
    NormalizeObservation,
    RunningStats,
    ScaleReward,
    Wrapper,
    normalize,
    normalize_observation,
    observation_stats_fold,
    observation_stats_init,
    observation_stats_update,
    running_stats_init,
    running_stats_merge,
    running_stats_update,
)
from jaxrl.networks import OneHot

__all__ = [
    "make",
    "register",
    "HISTORY_KWARGS",
    "EnvSpec",
    "ACTION_MASK",
    "observation_struct",
    "observation_classes",
    "ONE_HOT_MAX_CLASSES",
    "require_transitions_only",
    "MULTI_DISCRETE_ALGORITHMS",
    "refuse_multi_discrete",
    "spec",
    "config_spec",
    "registered_ids",
    "registered_prefixes",
    "check_env_id",
    "steps_on_host",
    "ClipAction",
    "EpisodeStatistics",
    "NormalizeObservation",
    "ScaleReward",
    "Wrapper",
    "RunningStats",
    "running_stats_init",
    "running_stats_update",
    "running_stats_merge",
    "normalize",
    "observation_stats_init",
    "observation_stats_fold",
    "observation_stats_update",
    "normalize_observation",
    "FrameStack",
    "MaskObservation",
]


GYMNASIUM_PREFIX = "gymnasium:"
PGX_PREFIX = "pgx:"

# Ids registered with ``register``: id -> factory(**overrides) -> (env, env_params).
_REGISTRY: dict[str, Callable] = {}
# Prefixes registered with ``register``: prefix -> (factory(name, **overrides), check(name)).
_PREFIXES: dict[str, tuple[Callable, Callable | None]] = {}


def register(id_or_prefix: str, factory: Callable, replace: bool = False, check: Callable | None = None) -> None:
    """Make an env id, or a family of ids, known to :func:`make`.

    An id: ``make(env_id, **overrides)`` then returns ``factory(**overrides)``, which
    must be ``(env, env_params)`` for a gymnax-API env. A prefix (ending in ``":"``, such
    as ``"mysuite:"``): ``make("mysuite:<name>", **overrides)`` returns
    ``factory(name, **overrides)``, and ``check(name)``, if given, raises ``ValueError``
    for a name the suite does not know (so :func:`check_env_id` can refuse it without
    building an env).

    An id or prefix that already exists (a gymnax id, a registered one, a built-in
    prefix) is a ``ValueError`` unless ``replace``; a registered id shadows the gymnax id
    of the same name. ``make``'s history arguments (:data:`HISTORY_KWARGS`) never reach
    ``factory``.
    """
    if not isinstance(id_or_prefix, str) or not id_or_prefix or id_or_prefix == ":":
        raise TypeError(f"id_or_prefix must be a non-empty string, got {id_or_prefix!r}")
    if not callable(factory):
        raise TypeError(
            "factory must be callable (an id's factory(**overrides), a prefix's factory(name, **overrides)), "
            f"got {factory!r}"
        )
    if check is not None and not callable(check):
        raise TypeError(f"check must be callable as check(name) or None, got {check!r}")
    if id_or_prefix.endswith(":"):
        if not replace and id_or_prefix in _PREFIXES:
            raise ValueError(f"env prefix {id_or_prefix!r} is already registered; pass replace=True to replace it")
        _PREFIXES[id_or_prefix] = (factory, check)
        return
    if check is not None:
        raise ValueError(f"check applies to prefixes (ending in ':'), not to the id {id_or_prefix!r}")
    prefix = _prefix_of(id_or_prefix)
    if prefix is not None:
        raise ValueError(
            f"env ids starting with {prefix!r} belong to that registered prefix; register {id_or_prefix!r} without it"
        )
    if not replace and (id_or_prefix in _REGISTRY or id_or_prefix in gymnax.registered_envs):
        raise ValueError(f"env id {id_or_prefix!r} is already registered; pass replace=True to replace it")
    _REGISTRY[id_or_prefix] = factory


def _prefix_of(env_id: str) -> str | None:
    """The registered prefix ``env_id`` starts with (the longest), or None."""
    matches = [prefix for prefix in _PREFIXES if env_id.startswith(prefix)]
    return max(matches, key=len) if matches else None


def registered_ids() -> list[str]:
    """Every single env id ``make`` accepts: registered ids first, then gymnax ids.
    Families of ids under a prefix are listed by :func:`registered_prefixes`."""
    return list(_REGISTRY) + [env_id for env_id in gymnax.registered_envs if env_id not in _REGISTRY]


def registered_prefixes() -> list[str]:
    """The registered prefixes (``"gymnasium:"``, ``"pgx:"``, and any of a user's)."""
    return list(_PREFIXES)


def steps_on_host(env_id: str) -> bool:
    """Whether ``env_id``'s env runs on the host (its state is a handle, not arrays):
    the Gymnasium bridge's envs and envpool's."""
    return env_id.startswith((GYMNASIUM_PREFIX, "envpool:"))


def check_env_id(env_id: str) -> None:
    """Raise ``ValueError`` (with close matches) unless ``env_id`` is known: a registered
    id, a gymnax id, or ``"<prefix><name>"`` for a registered prefix whose ``check``
    accepts ``name`` (``"gymnasium:<id>"`` for any id Gymnasium knows)."""
    if not isinstance(env_id, str):
        raise TypeError(f"env_id must be a string, got {env_id!r}")
    if env_id in _REGISTRY:
        return
    prefix = _prefix_of(env_id)
    if prefix is not None:
        check = _PREFIXES[prefix][1]
        if check is not None:
            check(env_id[len(prefix) :])
        return
    ids = registered_ids()
    if env_id not in ids:
        if ":" in env_id:
            known = ", ".join(repr(p) for p in registered_prefixes())
            raise ValueError(
                f"unknown env prefix {env_id[: env_id.index(':') + 1]!r} in {env_id!r}; known prefixes: {known}"
            )
        close = difflib.get_close_matches(env_id, ids, n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(f"unknown env_id {env_id!r}.{hint} Known ids: {', '.join(ids)}")


# make's keyword arguments that ask for a FrameStack around any env, with their defaults.
HISTORY_KWARGS = {"frame_stack": 1, "stack_action": False, "stack_reward": False}


def _pop_history_kwargs(kwargs: dict) -> dict:
    """Take :data:`HISTORY_KWARGS` out of ``kwargs`` (in place), checked."""
    history = {name: kwargs.pop(name, default) for name, default in HISTORY_KWARGS.items()}
    frame_stack = history["frame_stack"]
    if isinstance(frame_stack, bool) or not isinstance(frame_stack, numbers.Integral) or frame_stack < 1:
        raise ValueError(f"frame_stack must be an integer >= 1 (1: no stacking), got {frame_stack!r}")
    for name in ("stack_action", "stack_reward"):
        if not isinstance(history[name], (bool, np.bool_)):
            raise ValueError(f"{name} must be a bool (True or False), got {history[name]!r}")
    return {"num_frames": int(frame_stack), **{name: bool(history[name]) for name in ("stack_action", "stack_reward")}}


def make(env_id: str, **env_param_overrides):
    """Create an env and its params, overriding any ``EnvParams`` field.

    ``make("CartPole-v1", max_steps_in_episode=200)`` gives the classic 200-step
    CartPole (time-limit override). Returns ``(env, env_params)``.

    ``make("gymnasium:<id>", **kwargs)`` gives any Gymnasium env with the same API,
    ``kwargs`` going to ``gymnasium.make`` (see :func:`jaxrl.envs.gymnasium.make`);
    ``make("pgx:<game>")`` a pgx board game against a random opponent
    (:mod:`jaxrl.envs.pgx`); an id or prefix given to :func:`register` gets ``kwargs``
    in its factory.

    For every env, the history arguments ``frame_stack`` (an int >= 1), ``stack_action``
    and ``stack_reward`` (bools) are taken out of ``kwargs`` and wrap the env in
    :class:`FrameStack` ``(env, frame_stack, stack_action, stack_reward)`` unless they
    ask for nothing (``frame_stack=1`` and neither bool).
    """
    check_env_id(env_id)
    history = _pop_history_kwargs(env_param_overrides)
    prefix = None if env_id in _REGISTRY else _prefix_of(env_id)
    if prefix is not None:
        env, params = _PREFIXES[prefix][0](env_id[len(prefix) :], **env_param_overrides)
    elif env_id in _REGISTRY:
        env, params = _REGISTRY[env_id](**env_param_overrides)
    else:
        env, params = gymnax.make(env_id)
        if env_param_overrides:
            known = [f.name for f in dataclasses.fields(params)]
            unknown = sorted(set(env_param_overrides) - set(known))
            if unknown:
                raise ValueError(f"unknown env parameter(s) {unknown} for {env_id!r}; its parameters are {known}")
            params = params.replace(**env_param_overrides)
    if history["num_frames"] > 1 or history["stack_action"] or history["stack_reward"]:
        env = FrameStack(env, **history)
        env.observation_space(params)  # raises now for a history the env cannot give
    return env, params


# The key of an action mask in a dict observation: bool ``[num_actions]``, True where an
# action is allowed. Categorical policies and Q-value argmaxes respect it.
ACTION_MASK = "action_mask"


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """Static facts about an env's spaces.

    ``observation`` describes one observation: a ``jax.ShapeDtypeStruct`` for an array
    observation, or a dict / tuple of them for a structured one (:attr:`structured`;
    ``obs_shape`` and ``obs_dtype`` are then None). ``action_kind`` is ``"discrete"``
    (``num_actions`` choices, integer actions of shape ``()``), ``"multi_discrete"``
    (``k`` independent choices, int32 actions of shape ``(k,)``, choice ``i`` in
    ``[0, action_nvec[i])``) or ``"continuous"`` (float actions of ``action_shape``
    within ``[action_low, action_high]``).
    """

    obs_shape: tuple | None
    obs_dtype: np.dtype | None
    action_kind: str
    action_shape: tuple
    num_actions: int | None = None
    action_low: np.ndarray | None = None
    action_high: np.ndarray | None = None
    max_episode_steps: int | None = None
    observation: Any = None
    action_nvec: tuple | None = None  # multi_discrete: the number of values of each choice
    # The env pads its episodes with steps that are not transitions (``info["valid"]``
    # False, as envpool's reset step); algorithms that cannot leave them out refuse it.
    padding_steps: bool = False
    # Per observation leaf (``jax.tree.leaves`` order): the number of categories of a
    # Discrete leaf with 2 to ONE_HOT_MAX_CLASSES of them, else 0; () when there is none.
    obs_classes: tuple = ()

    @property
    def discrete(self) -> bool:
        """Whether actions are one Discrete choice (int32 ``()``)."""
        return self.action_kind == "discrete"

    @property
    def multi_discrete(self) -> bool:
        """Whether actions are several discrete choices (int32 ``(k,)``)."""
        return self.action_kind == "multi_discrete"

    @property
    def continuous(self) -> bool:
        """Whether actions are floats in a Box."""
        return self.action_kind == "continuous"

    @property
    def structured(self) -> bool:
        """Whether observations are a dict or tuple of arrays rather than one array."""
        return not isinstance(self.observation, jax.ShapeDtypeStruct)

    @property
    def obs_ndim(self) -> int | OneHot | tuple:
        """How networks read an observation (:func:`jaxrl.networks.obs_leaves`): per
        leaf its number of dims, or :class:`jaxrl.networks.OneHot` for a small Discrete
        one (see :attr:`obs_classes`); the layout itself for an array observation, a
        tuple with one per leaf (in ``jax.tree.leaves`` order) for a structured one."""
        leaves = jax.tree.leaves(self.observation)
        classes = self.obs_classes or (0,) * len(leaves)
        layouts = tuple(OneHot(n) if n else len(leaf.shape) for leaf, n in zip(leaves, classes, strict=True))
        return layouts if self.structured else layouts[0]

    @property
    def action_mask(self) -> bool:
        """Whether observations carry an action mask (a dict with :data:`ACTION_MASK`)."""
        return isinstance(self.observation, dict) and ACTION_MASK in self.observation

    def zeros(self, batch_shape: tuple = ()):
        """An all-zero observation with leading ``batch_shape``, as the env's dtypes."""
        return jax.tree.map(lambda leaf: jnp.zeros(batch_shape + leaf.shape, leaf.dtype), self.observation)

    def from_unit(self, action):
        """Map actions in ``[-1, 1]`` (a tanh policy's range) onto ``[action_low, action_high]``."""
        return self.action_low + 0.5 * (action + 1.0) * (self.action_high - self.action_low)

    def to_unit(self, action):
        """The inverse of :meth:`from_unit`: env actions onto ``[-1, 1]``."""
        return 2.0 * (action - self.action_low) / (self.action_high - self.action_low) - 1.0


def observation_struct(space, where: str = "observation"):
    """A gymnax observation space as ``jax.ShapeDtypeStruct`` s: Box and Discrete give
    one, Dict and Tuple a dict / tuple of them. Any other space is a ``ValueError``."""
    if isinstance(space, gymnax_spaces.Dict):
        return {key: observation_struct(sub, f"{where}[{key!r}]") for key, sub in space.spaces.items()}
    if isinstance(space, gymnax_spaces.Tuple):
        return tuple(observation_struct(sub, f"{where}[{i}]") for i, sub in enumerate(space.spaces))
    if isinstance(space, gymnax_spaces.Box):
        return jax.ShapeDtypeStruct(tuple(space.shape), np.dtype(space.dtype))
    if isinstance(space, gymnax_spaces.Discrete):
        return jax.ShapeDtypeStruct((), np.dtype(getattr(space, "dtype", np.int32)))
    raise ValueError(f"unsupported observation space {type(space).__name__} at {where}: Box, Discrete, Dict or Tuple")


# Discrete observation leaves with at most this many categories enter networks one-hot;
# a bound, as a one-hot input widens the first layer by one row per category.
ONE_HOT_MAX_CLASSES = 1024


def observation_classes(space) -> tuple:
    """Per leaf of a gymnax observation space (``jax.tree.leaves`` order of
    :func:`observation_struct`), the number of categories of a Discrete leaf that
    networks one-hot encode (2 to :data:`ONE_HOT_MAX_CLASSES`), else 0; () if none."""

    def classes(space):
        if isinstance(space, gymnax_spaces.Dict):
            return {key: classes(sub) for key, sub in space.spaces.items()}
        if isinstance(space, gymnax_spaces.Tuple):
            return tuple(classes(sub) for sub in space.spaces)
        if isinstance(space, gymnax_spaces.Discrete) and 2 <= space.n <= ONE_HOT_MAX_CLASSES:
            return int(space.n)
        return 0

    per_leaf = tuple(jax.tree.leaves(classes(space)))
    return per_leaf if any(per_leaf) else ()


def spec(env, env_params) -> EnvSpec:
    """Describe ``env``'s observation and action spaces."""
    if getattr(env, "multi_agent", False):  # its spaces are per agent: see jaxrl.envs.multiagent.spec
        raise ValueError(
            f"{env.name} is a multi-agent env (agents {list(env.agents)}), which single-agent algorithms cannot "
            "train: use ippo, mappo, iql or vdn (or multi_agent=True in ppo, a2c or dqn)"
        )
    observation_space = env.observation_space(env_params)
    observation = observation_struct(observation_space)
    action_space = env.action_space(env_params)
    max_steps = getattr(env_params, "max_steps_in_episode", None)
    array = isinstance(observation, jax.ShapeDtypeStruct)
    common = dict(
        obs_shape=tuple(observation.shape) if array else None,
        obs_dtype=np.dtype(observation.dtype) if array else None,
        max_episode_steps=int(max_steps) if max_steps is not None else None,
        observation=observation,
        padding_steps=bool(getattr(env, "padding_steps", False)),
        obs_classes=observation_classes(observation_space),
    )
    if isinstance(observation, dict) and ACTION_MASK in observation:
        mask = observation[ACTION_MASK]
        if not isinstance(action_space, gymnax_spaces.Discrete) or mask.shape != (action_space.n,):
            raise ValueError(
                f"{env.name}: observation[{ACTION_MASK!r}] must be a bool mask [num_actions] for a Discrete "
                f"action space, got shape {mask.shape} for {type(action_space).__name__}"
            )
    if isinstance(action_space, gymnax_spaces.Discrete):
        return EnvSpec(action_kind="discrete", action_shape=(), num_actions=int(action_space.n), **common)
    if isinstance(action_space, MultiDiscrete):
        nvec = tuple(int(n) for n in action_space.nvec)
        return EnvSpec(action_kind="multi_discrete", action_shape=(len(nvec),), action_nvec=nvec, **common)
    if isinstance(action_space, gymnax_spaces.Box):
        shape = tuple(action_space.shape)
        low = np.broadcast_to(np.asarray(action_space.low, np.float32), shape)
        high = np.broadcast_to(np.asarray(action_space.high, np.float32), shape)
        return EnvSpec(action_kind="continuous", action_shape=shape, action_low=low, action_high=high, **common)
    raise ValueError(
        f"unsupported action space {type(action_space).__name__} for {env.name}: Discrete, MultiDiscrete or Box"
    )


def require_transitions_only(config, algorithm: str) -> None:
    """ValueError if the config's env pads its episodes with steps that are not
    transitions (:attr:`EnvSpec.padding_steps`): for the algorithms that cannot leave
    them out of their losses yet."""
    if config_spec(config).padding_steps:
        raise ValueError(
            f"{algorithm} cannot train on {config.env_id}: the env inserts steps that are not transitions "
            "(info['valid'] False, e.g. envpool's reset step), which it cannot leave out; ppo, a2c, reinforce, "
            "impala, dqn, sac, ddpg and td3 can, without memory"
        )


#: The algorithms whose policies take MultiDiscrete actions (a factored categorical).
MULTI_DISCRETE_ALGORITHMS = ("ppo", "a2c", "reinforce", "impala")


def refuse_multi_discrete(spec: EnvSpec, env_id: str, algorithm: str) -> None:
    """ValueError if ``spec``'s actions are MultiDiscrete: for the algorithms not in
    :data:`MULTI_DISCRETE_ALGORITHMS`, called at config time."""
    if spec.multi_discrete:
        raise ValueError(
            f"{algorithm} does not take MultiDiscrete actions; env_id {env_id!r} has the action space "
            f"MultiDiscrete({list(spec.action_nvec)}) (Gymnasium's MultiDiscrete and MultiBinary map onto it). "
            f"{', '.join(MULTI_DISCRETE_ALGORITHMS)} take them"
        )


def _make(env_id: str, env_kwargs: tuple, agent_view: tuple | None):
    if agent_view is None:
        return make(env_id, **dict(env_kwargs))
    from jaxrl.envs import multiagent  # it imports this module

    return multiagent.make_agent_batch(env_id, *agent_view, **dict(env_kwargs))


def make_config_env(config):
    """``(env, env_params)`` of an algorithm config: :func:`make` of its ``env_id`` and
    ``env_kwargs`` or, where the config's ``agent_view`` is set (``multi_agent=True``:
    ``(agent_id, global_state)``), the :class:`jaxrl.envs.multiagent.AgentBatch` view of
    that multi-agent env, whose agents are a batch axis."""
    return _make(config.env_id, config.env_kwargs, _agent_view(config))


def config_num_agents(config) -> int:
    """The agents of a multi-agent config's env (its ``agent_view`` set); 1 otherwise (cached)."""
    view = _agent_view(config)
    return _cached_num_agents(config.env_id, config.env_kwargs, view) if view else 1


@functools.cache
def _cached_num_agents(env_id: str, env_kwargs: tuple, agent_view: tuple) -> int:
    return _make(env_id, env_kwargs, agent_view)[0].num_agents


def _agent_view(config) -> tuple | None:
    return getattr(config, "agent_view", None)


@functools.cache
def _cached_spec(env_id: str, env_kwargs: tuple, agent_view: tuple | None) -> EnvSpec:
    return spec(*_make(env_id, env_kwargs, agent_view))


def config_spec(config) -> EnvSpec:
    """The :class:`EnvSpec` of an algorithm config's env (:func:`make_config_env`;
    cached): one agent's, for a multi-agent config."""
    return _cached_spec(config.env_id, config.env_kwargs, _agent_view(config))


# The built-in prefixes: ``"<suite>:"`` is served by the adapter module
# ``jaxrl.envs.<suite>`` (its ``make(name, **overrides)`` and ``check(name)``), imported
# when first used, as each suite is an optional dependency.
def register_adapter(suite: str) -> None:
    """Register the prefix ``"<suite>:"`` for the adapter module ``jaxrl.envs.<suite>``."""

    def adapter():
        return importlib.import_module(f"jaxrl.envs.{suite}")

    register(
        f"{suite}:", lambda name, **kwargs: adapter().make(name, **kwargs), check=lambda name: adapter().check(name)
    )


for _suite in (
    "gymnasium",
    "pgx",
    "brax",
    "playground",
    "craftax",
    "navix",
    "xminigrid",
    "jumanji",
    "envpool",
    "jaxmarl",
):
    register_adapter(_suite)

# Last: the partially observed tasks and the built-in multi-agent task register
# themselves with ``register`` above.
from jaxrl.envs.partial import FrameStack, MaskObservation  # noqa: E402

importlib.import_module("jaxrl.envs.multiagent")  # after partial, whose ids registered_ids lists first
