"""MuJoCo Playground's DM Control Suite on MJX: ``"playground:<name>"`` (``pip install "jaxrl[playground]"``).

``jaxrl.envs.make("playground:CartpoleBalance")`` is Playground's own env
(``mujoco_playground.dm_control_suite.load``, its ``reset(rng)`` and ``step(state,
action)``, none of its training wrappers) in the gymnax API:

- physics is MJX's pure-JAX implementation (``impl="jax"``), never Playground's default
  MuJoCo Warp (a GPU path, which its ``vision`` rendering also needs);
- the observation is Playground's (float32 ``[obs_size]``, or a dict of arrays where an
  env gives one), the action a float32 vector in ``[-1, 1]^action_size``;
- ``terminated`` is Playground's ``done`` (a DM Control task ends only if the simulation
  goes NaN); ``truncated`` is ``EnvParams.max_steps_in_episode`` steps, counted here
  (default: the env config's ``episode_length``, 1000);
- each reset is Playground's ``reset`` with a fresh key from the step's key, where
  Playground's training wrapper replays a cached first state; the last observation
  before it is ``info["final_observation"]``. Typed keys reach Playground as raw
  ``uint32`` data (``jax.random.key_data``), the form it splits and stores.

Only the DM Control Suite is served (:data:`ENVS`): its MJCF files ship in the package.
The locomotion and manipulation envs are refused with a ``ValueError``, because loading
one clones the MuJoCo Menagerie with git and jaxrl downloads nothing at run time.
``make`` takes ``max_steps_in_episode`` and entries of the env's Playground config
(``ctrl_dt``, ``sim_dt``, ``njmax``, ``naconmax``). One env; batch with ``jax.vmap``.
"""

from __future__ import annotations

import difflib
import numbers

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

__all__ = ["ENVS", "EnvParams", "EnvState", "PlaygroundEnv", "check", "make", "names", "require_playground"]

# Playground 0.2.0's DM Control Suite envs. Each reads only its own XML and the shared
# ``xmls/common`` files inside the package (``dm_control_suite/<task>.py``): no network.
ENVS = (
    "AcrobotSwingup",
    "AcrobotSwingupSparse",
    "BallInCup",
    "CartpoleBalance",
    "CartpoleBalanceSparse",
    "CartpoleSwingup",
    "CartpoleSwingupSparse",
    "CheetahRun",
    "FingerSpin",
    "FingerTurnEasy",
    "FingerTurnHard",
    "FishSwim",
    "HopperHop",
    "HopperStand",
    "HumanoidRun",
    "HumanoidStand",
    "HumanoidWalk",
    "PendulumSwingup",
    "PointMass",
    "ReacherEasy",
    "ReacherHard",
    "SwimmerSwimmer6",
    "WalkerRun",
    "WalkerStand",
    "WalkerWalk",
)

# Config entries make does not pass on, and why.
_RESERVED = {
    "impl": "the physics is MJX's pure-JAX implementation (impl='jax'); Warp is a GPU path",
    "vision": "vision observations are rendered by MuJoCo Warp, a GPU path",
    "vision_config": "vision observations are rendered by MuJoCo Warp, a GPU path",
    "episode_length": "set the time limit with max_steps_in_episode (Playground's episode_length is its default)",
    "action_repeat": "Playground's envs do not read it (its training wrapper does)",
}


def require_playground():
    """The ``mujoco_playground`` module, or an ImportError saying how to install it."""
    try:
        import mujoco_playground
    except ImportError as error:
        raise ImportError(
            f'"playground:" envs need MuJoCo Playground ({error}); install it with pip install "jaxrl[playground]"'
        ) from error
    return mujoco_playground


def names() -> list[str]:
    """The env names ``playground:`` accepts: :data:`ENVS`, Playground's DM Control Suite."""
    return list(ENVS)


def check(name: str) -> None:
    """ValueError unless ``name`` is one of :data:`ENVS`; a Playground locomotion or
    manipulation env is refused for the Menagerie download it needs."""
    if name in ENVS:
        return
    families = {}
    try:
        playground = require_playground()
        families = {"locomotion": playground.locomotion.ALL_ENVS, "manipulation": playground.manipulation.ALL_ENVS}
    except ImportError:
        pass  # an unknown name is still a ValueError without the package
    available = f"available: Playground's DM Control Suite envs {', '.join(ENVS)}"
    for family, family_names in families.items():
        if name in family_names:
            raise ValueError(
                f"playground:{name} is a Playground {family} env: it loads robots from the MuJoCo Menagerie, "
                f"which Playground downloads with git at load time, and jaxrl downloads nothing at run time; "
                f"only the DM Control Suite is served ({available})"
            )
    close = difflib.get_close_matches(name, ENVS, n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(f"unknown MuJoCo Playground env {name!r} (playground:{name}).{hint} {available}")


@struct.dataclass
class EnvParams:
    max_steps_in_episode: int = 1000  # the time limit (truncation): Playground's episode_length


@struct.dataclass
class EnvState:
    playground: object  # mujoco_playground.State: data, obs, reward, done, metrics, info
    time: jax.Array  # int32 steps taken in this episode


def _raw_key(key):
    """``key`` as raw ``uint32`` data (Playground splits and stores keys in that form)."""
    return jax.random.key_data(key) if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) else key


def _like(new, old):
    """``new``'s leaves cast to ``old``'s dtypes, so that a step's state and a reset's state
    have the same types (gymnax's reset-select and a scan carry need that)."""
    return jax.tree.map(lambda n, o: jnp.asarray(n, dtype=o.dtype), new, old)


class PlaygroundEnv(environment.Environment):
    """A MuJoCo Playground DM Control env on MJX (pure JAX) with the gymnax API (see the
    module's docstring). ``playground_env`` is Playground's env. One env; batch with
    ``jax.vmap``."""

    def __init__(self, name: str, **config_overrides):
        super().__init__()
        check(name)
        playground = require_playground()
        self.env_name = name
        self.config_overrides = {**config_overrides, "impl": "jax"}
        self.playground_env = playground.dm_control_suite.load(name, config_overrides=self.config_overrides)
        # Shapes only (Playground's observation_size runs a reset too).
        self._reset_shape = jax.eval_shape(self.playground_env.reset, jax.random.key_data(jax.random.key(0)))

    @property
    def name(self) -> str:
        return f"playground:{self.env_name}"

    @property
    def num_actions(self) -> int:
        return int(self.playground_env.action_size)

    @property
    def default_params(self) -> EnvParams:
        config = require_playground().dm_control_suite.get_default_config(self.env_name)
        return EnvParams(max_steps_in_episode=int(config.episode_length))

    def _playground_reset(self, key):
        return _like(self.playground_env.reset(_raw_key(key)), self._reset_shape)

    def reset_env(self, key, params):
        state = self._playground_reset(key)
        return state.obs, EnvState(playground=state, time=jnp.zeros((), jnp.int32))

    def step_env(self, key, state, action, params):
        del key  # Playground's DM Control dynamics are deterministic
        action = jnp.asarray(action, jnp.float32)
        playground_state = _like(self.playground_env.step(state.playground, action), state.playground)
        terminated = playground_state.done > 0
        state = EnvState(playground=playground_state, time=state.time + 1)
        return playground_state.obs, state, playground_state.reward, terminated, {}

    def is_truncated(self, state, params):
        return (state.time >= params.max_steps_in_episode) & ~(state.playground.done > 0)

    def observation_space(self, params=None):
        def box(leaf):
            return spaces.Box(-jnp.inf, jnp.inf, tuple(leaf.shape), leaf.dtype)

        obs = self._reset_shape.obs
        if isinstance(obs, dict):
            return spaces.Dict({key: box(leaf) for key, leaf in obs.items()})
        return box(obs)

    def action_space(self, params=None):
        return spaces.Box(-1.0, 1.0, (self.num_actions,), jnp.float32)


def make(name: str, **overrides):
    """``(PlaygroundEnv(name, **config_overrides), EnvParams(max_steps_in_episode))``:
    ``overrides`` holds ``max_steps_in_episode`` and entries of the env's Playground
    config (``ctrl_dt``, ``sim_dt``, ...). ``impl`` other than ``"jax"``, ``vision=True``,
    ``episode_length`` (use ``max_steps_in_episode``) and ``action_repeat`` are refused."""
    check(name)
    steps = overrides.pop("max_steps_in_episode", None)
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 1):
        raise ValueError(f"max_steps_in_episode must be an integer >= 1, got {steps!r}")
    for key, value in overrides.items():
        if key in _RESERVED and not (key == "impl" and value == "jax") and not (key == "vision" and value is False):
            raise ValueError(f"playground:{name} does not take {key}={value!r}: {_RESERVED[key]}")
    known = sorted(set(require_playground().dm_control_suite.get_default_config(name)) - set(_RESERVED))
    unknown = sorted(set(overrides) - set(known) - set(_RESERVED))
    if unknown:
        raise ValueError(
            f"unknown env parameter(s) {unknown} for playground:{name}; its parameters are "
            f"{['max_steps_in_episode', *known]}"
        )
    env = PlaygroundEnv(name, **overrides)
    params = env.default_params if steps is None else EnvParams(max_steps_in_episode=int(steps))
    return env, params
