"""What an env's spaces look like to the algorithms: :class:`EnvSpec` (the static facts
about one env's observations and actions), how gymnax spaces become
``jax.ShapeDtypeStruct`` s, and the observation layouts networks read (an int of trailing
dims, or :class:`OneHot` for a small Discrete leaf)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces as gymnax_spaces

from jaxrl.envs.spaces import MultiDiscrete


@dataclasses.dataclass(frozen=True)
class OneHot:
    """The layout of an observation leaf that is one of ``num_classes`` categories (a
    Discrete space's int scalar): it enters a network one-hot, so the first dense layer
    is a learned embedding of the category rather than a weight on its index."""

    num_classes: int


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
            "train: use ippo, mappo, iql or vdn (or an on-policy Config with jaxrl.algorithms.onpolicy.MultiAgent)"
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
