"""Jumanji's single-agent envs as gymnax-API envs: ``"jumanji:<id>"`` (``pip install "jaxrl[jumanji]"``).

``jaxrl.envs.make("jumanji:Knapsack-v1")`` is the jumanji env of that id (any id of
``jumanji.registered_environments()`` with single discrete actions, see below) in the
gymnax API. ``make``'s keyword arguments other than ``max_steps_in_episode`` go to
jumanji's constructor (``jumanji.make(id, **kwargs)``), such as a ``generator`` of smaller
instances (``Knapsack-v1`` with
``jumanji.environments.packing.knapsack.generator.RandomGenerator(20, 5.0)``).

Observations: jumanji's observation (a NamedTuple or dataclass) as a dict of arrays,
field name -> array, nested fields joined by ``"."`` (``Maze-v0``'s
``"agent_position.row"``), each of the dtype jumanji's observation spec gives; the
observation space is a ``spaces.Dict`` of ``Box`` es with the spec's shapes, dtypes and
bounds. Jumanji's ``action_mask`` field, where there is one, is the key
``"action_mask"``: bool ``[num_actions]``, True where an action is allowed.

Actions: a jumanji ``DiscreteArray`` is one ``Discrete(num_values)``. A
``MultiDiscreteArray`` (several discrete values, ``num_values = (n_1, ..., n_k)``) is
flattened into one ``Discrete(n_1 * ... * n_k)`` where that is cheap and exact: its
action mask, if any, is one joint mask of shape ``num_values`` (``Minesweeper-v0``'s
``[10, 10]`` cells, ``Tetris-v0``, ``Sudoku-v0``, ``BinPack-v2``, ``FlatPack-v0``;
``RubiksCube-v0`` has no mask) and there are at most :data:`MAX_FLAT_ACTIONS`
combinations. Action ``a`` is then ``jnp.unravel_index(a, num_values)`` (row-major) and
the mask is the joint mask flattened the same way. Other action specs, such as the
per-agent actions and masks of jumanji's multi-agent envs (``Cleaner-v0``,
``Connector-v3``, ``LevelBasedForaging-v0``, ``RobotWarehouse-v0``, ...) or continuous
ones, are refused at ``make`` with a ``ValueError``; so are envs with a reward per agent.

Ends: a jumanji ``TimeStep`` with ``step_type`` LAST and ``discount`` 0 is
``terminated``; LAST with a nonzero discount (jumanji's ``truncation``) is
``truncated``. Jumanji 1.1.2 ends its own time limits with ``termination`` (discount 0)
in most envs (``Snake-v1``, ``Maze-v0``, ``Tetris-v0``, ``PacMan-v1``,
``SlidingTilePuzzle-v0``, ``RubiksCube-v0``), which would read as ``terminated``. So
for an env whose constructor takes a ``time_limit``, the adapter builds it with a time
limit jumanji never reaches and applies the limit itself:
``EnvParams.max_steps_in_episode`` defaults to jumanji's own ``time_limit`` (``Snake-v1``
4000, ``Maze-v0`` its ``num_rows * num_cols``, 100, ``Tetris-v0`` 400, ``PacMan-v1`` 1000,
``SlidingTilePuzzle-v0`` 500, ``RubiksCube-v0`` 200) and ends an episode ``truncated``.
Envs without a time limit of their own (``Game2048-v1``, ``Knapsack-v1``,
``Minesweeper-v0``, ``TSP-v1``, ...) get :data:`DEFAULT_MAX_STEPS`. A smaller
``max_steps_in_episode`` cuts episodes there, as truncation; an episode that ends both
ways at once is ``terminated``. Set the time limit with ``max_steps_in_episode``, not
jumanji's ``time_limit``.

Randomness: each reset (the first and every automatic one) is jumanji's ``reset`` with
a fresh key from the step's key; within an episode, jumanji's ``step`` draws from the
key jumanji keeps in its state (new tiles in ``Game2048-v1``, fruit in ``Snake-v1``).
The env state is :class:`EnvState`: jumanji's state, the step count and how jumanji's
last step ended.
"""

from __future__ import annotations

import inspect
import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

__all__ = [
    "DEFAULT_MAX_STEPS",
    "MAX_FLAT_ACTIONS",
    "JumanjiEnv",
    "EnvParams",
    "EnvState",
    "check",
    "make",
    "registered_ids",
    "require_jumanji",
]

DEFAULT_MAX_STEPS = 10_000  # the time limit of envs without one of their own
MAX_FLAT_ACTIONS = 65_536  # the most combinations a MultiDiscreteArray is flattened into
_NEVER = 2**31 - 1  # the time limit jumanji is built with where the adapter applies its own
ACTION_MASK = "action_mask"  # jaxrl.envs.ACTION_MASK (not imported: jaxrl.envs imports this module lazily)


def require_jumanji():
    """The ``jumanji`` module, or an ImportError saying how to install it."""
    try:
        import jumanji
    except ImportError as error:
        raise ImportError(
            f'"jumanji:" envs need jumanji ({error}); install it with pip install "jaxrl[jumanji]"'
        ) from error
    return jumanji


def registered_ids() -> list[str]:
    """Every id jumanji registers (sorted), including those :func:`make` refuses for
    their action spec."""
    return sorted(require_jumanji().registered_environments())


# Envs whose construction downloads data (Sokoban's levels, from the Hugging Face hub).
DOWNLOADS = ("Sokoban",)


def check(name: str) -> None:
    """ValueError unless jumanji registers ``name`` and builds it without downloading data."""
    ids = registered_ids()
    if name not in ids:
        raise ValueError(f"unknown jumanji env {name!r} (jumanji:{name}); jumanji ids: {', '.join(ids)}")
    if name.startswith(DOWNLOADS):
        raise ValueError(f"jumanji:{name} downloads its data when it is built; jaxrl runs nothing that downloads")


@struct.dataclass
class EnvParams:
    max_steps_in_episode: int = DEFAULT_MAX_STEPS


@struct.dataclass
class EnvState:
    env_state: object  # jumanji's state
    time: jax.Array  # int32: steps in this episode so far
    terminated: jax.Array  # bool: jumanji's last step ended the episode with discount 0
    jumanji_truncated: jax.Array  # bool: jumanji's last step ended the episode with a nonzero discount


def _spec_leaves(spec, prefix: str = "") -> list[tuple[str, tuple[str, ...], object]]:
    """``(key, attribute path, array spec)`` for each array of a jumanji observation spec,
    in the spec's field order (nested fields' keys joined by ``"."``)."""
    jumanji = require_jumanji()
    if isinstance(spec, jumanji.specs.Array):
        return [(prefix, (), spec)]
    leaves = []
    for field, sub in spec._specs.items():  # jumanji's Spec keeps its fields there
        key = f"{prefix}.{field}" if prefix else field
        leaves += [(k, (field, *path), s) for k, path, s in _spec_leaves(sub, key)]
    return leaves


def _bounds(spec) -> tuple[np.ndarray, np.ndarray]:
    """A Box's ``(low, high)`` for a jumanji array spec: its bounds where it has them,
    else the dtype's range."""
    dtype = np.dtype(spec.dtype)
    if hasattr(spec, "minimum"):
        return np.asarray(spec.minimum).astype(dtype), np.asarray(spec.maximum).astype(dtype)
    if dtype == np.bool_:
        return np.asarray(False), np.asarray(True)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return np.asarray(info.min, dtype), np.asarray(info.max, dtype)
    return np.asarray(-np.inf, dtype), np.asarray(np.inf, dtype)


class JumanjiEnv(environment.Environment):
    """A jumanji env with the gymnax API (see the module's docstring). One env; batch
    with ``jax.vmap``. :attr:`jumanji_env` is jumanji's env (built with a time limit it
    never reaches where :attr:`time_limit` is not None), :attr:`num_values` the jumanji
    action's ``num_values`` where a ``MultiDiscreteArray`` is flattened (else None)."""

    def __init__(self, name: str, **kwargs):
        super().__init__()
        check(name)
        jumanji = require_jumanji()
        if "time_limit" in kwargs:
            raise ValueError(
                f"jumanji:{name}: set the time limit with max_steps_in_episode, not jumanji's time_limit "
                "(the adapter applies it, so that reaching it is truncation)"
            )
        env = _build(jumanji, name, kwargs)
        # jumanji ends its own time limits as termination: build it with one it never reaches, apply ours
        self.time_limit = None
        if "time_limit" in inspect.signature(type(env).__init__).parameters and hasattr(env, "time_limit"):
            self.time_limit = int(env.time_limit)
            env = _build(jumanji, name, {**kwargs, "time_limit": _NEVER})
        self.jumanji_env = env
        self.env_id = name
        self.num_values = None

        reward_shape = tuple(env.reward_spec.shape)
        if reward_shape != ():
            raise ValueError(
                f"jumanji:{name} gives a reward per agent (shape {reward_shape}): only single-agent envs "
                "(one scalar reward, single discrete actions) are supported"
            )
        self._leaves = _spec_leaves(env.observation_spec)
        mask_specs = [spec for key, _, spec in self._leaves if key == ACTION_MASK]
        mask_shape = tuple(mask_specs[0].shape) if mask_specs else None
        action = env.action_spec
        if isinstance(action, jumanji.specs.DiscreteArray):
            self._num_actions = int(action.num_values)
        elif isinstance(action, jumanji.specs.MultiDiscreteArray):
            num_values = tuple(int(n) for n in np.asarray(action.num_values).reshape(-1))
            joint = mask_shape is None or mask_shape == num_values
            if np.ndim(action.num_values) != 1 or not joint or math.prod(num_values) > MAX_FLAT_ACTIONS:
                mask = f"an action mask of shape {mask_shape}" if mask_shape else "no action mask"
                raise ValueError(
                    f"jumanji:{name}'s action is several discrete values (jumanji MultiDiscreteArray, num_values "
                    f"{list(num_values)}) with {mask}: only single discrete actions are supported (a "
                    f"MultiDiscreteArray is flattened into one only where its mask is joint, of shape num_values, "
                    f"or absent, and it has at most {MAX_FLAT_ACTIONS} combinations)"
                )
            self.num_values = num_values
            self._num_actions = math.prod(num_values)
        else:
            raise ValueError(
                f"jumanji:{name}'s action spec is {type(action).__name__} of shape {tuple(action.shape)} and "
                f"dtype {action.dtype}: only single discrete actions (jumanji DiscreteArray) are supported"
            )
        if mask_shape is not None and math.prod(mask_shape) != self._num_actions:
            raise ValueError(
                f"jumanji:{name}'s action_mask has shape {mask_shape}, not one entry per action ({self._num_actions})"
            )

    @property
    def name(self) -> str:
        return f"jumanji:{self.env_id}"

    @property
    def num_actions(self) -> int:
        return self._num_actions

    @property
    def default_params(self) -> EnvParams:
        return EnvParams(max_steps_in_episode=self.time_limit or DEFAULT_MAX_STEPS)

    def observation(self, jumanji_observation) -> dict:
        """Jumanji's observation as the adapter's dict of arrays."""
        obs = {}
        for key, path, spec in self._leaves:
            value = jumanji_observation
            for field in path:
                value = getattr(value, field)
            obs[key] = jnp.asarray(value, bool).reshape(-1) if key == ACTION_MASK else jnp.asarray(value, spec.dtype)
        return obs

    def jumanji_action(self, action: jax.Array) -> jax.Array:
        """The adapter's action as jumanji's (unflattened where :attr:`num_values`)."""
        action = jnp.asarray(action, jnp.int32)
        dtype = self.jumanji_env.action_spec.dtype
        if self.num_values is not None:
            return jnp.stack(jnp.unravel_index(action, self.num_values)).astype(dtype)
        return action.astype(dtype)

    def reset_env(self, key, params):
        env_state, timestep = self.jumanji_env.reset(key)
        no = jnp.zeros((), bool)
        state = EnvState(env_state=env_state, time=jnp.zeros((), jnp.int32), terminated=no, jumanji_truncated=no)
        return self.observation(timestep.observation), state

    def step_env(self, key, state, action, params):
        env_state, timestep = self.jumanji_env.step(state.env_state, self.jumanji_action(action))
        last = timestep.step_type == 2  # jumanji's StepType.LAST
        terminated = last & (timestep.discount == 0)
        state = EnvState(
            env_state=env_state, time=state.time + 1, terminated=terminated, jumanji_truncated=last & ~terminated
        )
        reward = jnp.asarray(timestep.reward, jnp.float32)
        return self.observation(timestep.observation), state, reward, terminated, {}

    def is_truncated(self, state, params):
        return (state.jumanji_truncated | (state.time >= params.max_steps_in_episode)) & ~state.terminated

    def observation_space(self, params=None):
        boxes = {}
        for key, _, spec in self._leaves:
            if key == ACTION_MASK:
                boxes[key] = spaces.Box(False, True, (self._num_actions,), jnp.bool_)
            else:
                boxes[key] = spaces.Box(*_bounds(spec), tuple(spec.shape), jnp.dtype(spec.dtype))
        return spaces.Dict(boxes)

    def action_space(self, params=None):
        return spaces.Discrete(self._num_actions)


def _build(jumanji, name: str, kwargs: dict):
    """``jumanji.make(name, **kwargs)``, built with concrete arrays even inside a trace
    (jumanji's specs check their bounds in Python); keyword arguments the constructor
    does not take are a ValueError naming those it does."""
    with jax.ensure_compile_time_eval():
        if kwargs:
            parameters = inspect.signature(type(jumanji.make(name)).__init__).parameters
            takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
            unknown = sorted(set(kwargs) - set(parameters) - {"time_limit"})
            if unknown and not takes_any:
                known = [p for p in parameters if p not in ("self", "time_limit")]
                raise ValueError(
                    f"unknown env parameter(s) {unknown} for jumanji:{name}; its constructor's parameters are "
                    f"{known}, and make's own is max_steps_in_episode"
                )
        return jumanji.make(name, **kwargs)


def make(name: str, **overrides):
    """``(JumanjiEnv(name, **kwargs), EnvParams(max_steps_in_episode))``: ``overrides``
    may set ``max_steps_in_episode`` (a positive int; default jumanji's ``time_limit``
    where the env has one, else :data:`DEFAULT_MAX_STEPS`); the others go to jumanji's
    constructor."""
    check(name)
    max_steps = overrides.pop("max_steps_in_episode", None)
    if max_steps is not None and (
        isinstance(max_steps, bool) or not isinstance(max_steps, numbers.Integral) or max_steps < 1
    ):
        raise ValueError(f"max_steps_in_episode must be a positive int for jumanji:{name}, got {max_steps!r}")
    env = JumanjiEnv(name, **overrides)
    params = env.default_params
    if max_steps is not None:
        params = params.replace(max_steps_in_episode=int(max_steps))
    return env, params
