"""Any Gymnasium environment behind the gymnax API, stepped on the host from compiled code. ::

    env, env_params = jaxrl.envs.make("gymnasium:Pendulum-v1")
    out = jax.jit(sac.train)(key, sac.Config(env_id="gymnasium:Pendulum-v1"))

**What runs where.** ``reset`` and ``step`` are written for one env, like a gymnax env's,
and the caller's ``jax.vmap`` batches them (over env lanes, over seeds, or both). Their
batching rule folds every vmapped axis into one leading axis, so one time step of all
lanes of all seeds is ONE ``jax.experimental.io_callback`` into Python: it steps a
``gymnasium.vector`` env that has one sub-env per lane and hands the results back to the
compiled program. Everything else (policy, learner, buffers) stays on the device.

**Spaces.** Observations: Box (floats arrive as float32, integers wider than 32 bits as
int32), Discrete (an int32 scalar; a gymnax ``Discrete`` when it starts at 0, which
networks one-hot encode up to ``envs.ONE_HOT_MAX_CLASSES`` categories), MultiDiscrete
(int32) and MultiBinary (int8), and
Dict / Tuple spaces of these, nested to any depth, which arrive as dicts / tuples of
arrays (a gymnax ``Dict`` / ``Tuple`` space; each array crosses the callback on its
own). Actions: Discrete (int32 ``()``), MultiDiscrete with a 1-D ``nvec`` and 1-D
MultiBinary (int32 ``[k]``, a :class:`jaxrl.envs.spaces.MultiDiscrete`; MultiBinary(k)
is ``nvec = [2] * k``) and float Box. Integer actions count from 0 on the device; the
host adds the space's ``start`` and casts them to the space's dtype (int8 for
MultiBinary). Any other space (Text, Graph, Sequence, OneOf, an integer Box action, a
Dict / Tuple action) is a ``ValueError`` at ``make``.

**Host envs and handles.** A ``reset`` builds (or reuses) a vector env on the host and
returns per-lane states holding an integer handle to it, the lane's index and a step
count; ``step`` finds the vector env through the handle. A state is thus a reference to
mutable host state, not a value: it can be stepped forward once, and stepping a stale
copy raises. All lanes of one reset step together, as the vector env does. Each
``reset`` in a traced program owns one vector env: running it again (the next training
run, the next evaluation) reuses the vector env with fresh seeds and invalidates the
states of its previous run. Vector envs are closed when that program and the env object
are garbage collected, by :func:`close_all`, and at exit.

**Seeds** come from the JAX key: each sub-env is seeded at reset with 32 bits drawn from
its lane's reset key, so the same key gives the same episodes. Gymnasium's own autoreset
continues from that generator; the key given to ``step`` is not used.

**Autoreset** runs in Gymnasium's ``SAME_STEP`` mode, which is our convention: the step
that ends an episode returns the next episode's first observation, the ended episode's
``terminated`` / ``truncated`` and its last observation in ``info["final_observation"]``
(the observation's structure; elsewhere ``final_observation`` is the observation itself),
so targets bootstrap through time limits exactly as for gymnax envs.

**Checkpoints.** A state's handles mean nothing in another process, so
:func:`jaxrl.workflow.runner.run` saves the host envs beside each checkpoint: :func:`snapshot`
pickles a sync vector env's sub-envs (their physics, episode progress and random
generators) and :func:`restore` rebuilds them on resume, so the resumed run continues
its episodes exactly. An async vector env's sub-envs live in other processes and are
not pickled: a resume then starts fresh episodes (:attr:`jaxrl.loop.Program.restart_envs`)
and warns. ``run.json`` records this under ``host_envs``.

**Faults.** An exception inside the Gymnasium env becomes a :class:`GymnasiumEnvError`
naming the env id, the step and the original error; JAX re-raises it from the compiled
call as a ``RuntimeError`` carrying that message. The failing vector env is closed;
other envs in the process keep working.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import pickle
import threading
import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import spaces
from jax.experimental import io_callback

try:
    import gymnasium
    from gymnasium.vector import AutoresetMode
except ImportError as error:  # pragma: no cover - depends on the installation
    raise ImportError("'gymnasium:' env ids need the gymnasium package: pip install 'jaxrl[gymnasium]'") from error

from jaxrl.envs.registry import GYMNASIUM_PREFIX as PREFIX  # noqa: E402 - after the import check above
from jaxrl.envs.spaces import MultiDiscrete  # noqa: E402
from jaxrl.envs.spec import observation_struct  # noqa: E402

VECTORIZATION_MODES = ("sync", "async")

__all__ = [
    "PREFIX",
    "GymnasiumEnv",
    "GymnasiumParams",
    "GymnasiumState",
    "GymnasiumEnvError",
    "make",
    "check",
    "vector_env",
    "close_all",
    "snapshot",
    "restore",
]


class GymnasiumEnvError(RuntimeError):
    """An error raised by (or about) a Gymnasium env stepped through the bridge."""


@struct.dataclass
class GymnasiumParams:
    """The env's parameters live in the Gymnasium env itself (set them with ``make``'s
    keyword arguments); only the time limit is mirrored here, for evaluation and
    :func:`jaxrl.envs.spec` (``None``: no time limit)."""

    max_steps_in_episode: int | None = struct.field(pytree_node=False, default=None)


@struct.dataclass
class GymnasiumState:
    """One lane's reference to its host env (all int32 scalars)."""

    handle: jax.Array  # which reset's vector env
    lane: jax.Array  # the sub-env within it
    count: jax.Array  # steps taken since that reset (to detect stale copies)


# ----------------------------------------------------------------------------- spaces


def _device_dtype(dtype) -> np.dtype:
    """The dtype arrays of ``dtype`` take on the device: float32 for every float (JAX
    runs without x64), int32 for integers wider than 32 bits, otherwise unchanged."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.floating):
        return np.dtype(np.float32)
    if np.issubdtype(dtype, np.integer) and dtype.itemsize > 4:
        return np.dtype(np.int32)
    return dtype


def _bounds(value, dtype) -> np.ndarray:
    with np.errstate(over="ignore"):  # float64 bounds beyond float32's range become inf
        return np.asarray(value).astype(dtype)


_OBSERVATION_SPACES = "Box, Discrete, MultiDiscrete and MultiBinary observations and Dict / Tuple spaces of them"
_ACTION_SPACES = "Discrete, MultiDiscrete (1-D nvec), MultiBinary (1-D) and float Box actions"


def observation_space(space, env_id: str, where: str = "observation"):
    """The gymnax space of a Gymnasium observation space: Box, Discrete, MultiDiscrete and
    MultiBinary become a ``Box`` (one fixed-shape array), Dict and Tuple a gymnax ``Dict``
    (keys in the space's order) / ``Tuple`` of the converted sub-spaces, nested to any
    depth. Anything else is a ``ValueError`` naming ``env_id`` and the space's place
    ``where`` in the observation."""
    gym_spaces = gymnasium.spaces
    if isinstance(space, gym_spaces.Dict):
        return spaces.Dict(
            {key: observation_space(sub, env_id, f"{where}[{key!r}]") for key, sub in space.spaces.items()}
        )
    if isinstance(space, gym_spaces.Tuple):
        return spaces.Tuple([observation_space(sub, env_id, f"{where}[{i}]") for i, sub in enumerate(space.spaces)])
    if isinstance(space, gym_spaces.Box):
        dtype = _device_dtype(space.dtype)
        return spaces.Box(_bounds(space.low, dtype), _bounds(space.high, dtype), tuple(space.shape), dtype)
    if isinstance(space, gym_spaces.Discrete):
        if space.start == 0:  # a category 0..n-1: networks may one-hot it (EnvSpec.obs_classes)
            return spaces.Discrete(int(space.n))
        return spaces.Box(np.int32(space.start), np.int32(space.start + space.n - 1), (), np.dtype(np.int32))
    if isinstance(space, gym_spaces.MultiDiscrete):
        low = np.asarray(space.start, np.int32)
        return spaces.Box(low, low + np.asarray(space.nvec, np.int32) - 1, tuple(space.shape), np.dtype(np.int32))
    if isinstance(space, gym_spaces.MultiBinary):
        return spaces.Box(np.int8(0), np.int8(1), tuple(space.shape), np.dtype(np.int8))
    raise ValueError(
        f"unsupported observation space {space} at {where} of Gymnasium env {env_id!r}: the bridge supports "
        f"{_OBSERVATION_SPACES}"
    )


def action_space(space, env_id: str):
    """The gymnax space of a Gymnasium action space: ``Discrete`` (actions 0..n-1),
    :class:`jaxrl.envs.spaces.MultiDiscrete` for MultiDiscrete (int32 ``[k]``, choice
    ``i`` in 0..nvec[i]-1) and MultiBinary(k) (``nvec = [2] * k``), or a float ``Box``.
    Discrete and MultiDiscrete actions are shifted by the space's ``start`` on the host.
    Anything else (including a MultiDiscrete or MultiBinary of more than one dimension)
    is a ``ValueError``."""
    gym_spaces = gymnasium.spaces
    if isinstance(space, gym_spaces.Discrete):
        return spaces.Discrete(int(space.n))
    if isinstance(space, (gym_spaces.MultiDiscrete, gym_spaces.MultiBinary)) and len(space.shape) == 1:
        nvec = space.nvec if isinstance(space, gym_spaces.MultiDiscrete) else np.full(space.shape, 2)
        return MultiDiscrete(np.asarray(nvec, np.int64))
    if isinstance(space, gym_spaces.Box) and np.issubdtype(space.dtype, np.floating):
        dtype = np.dtype(np.float32)
        return spaces.Box(_bounds(space.low, dtype), _bounds(space.high, dtype), tuple(space.shape), dtype)
    raise ValueError(
        f"unsupported action space {space} of Gymnasium env {env_id!r}: the bridge supports {_ACTION_SPACES}"
    )


def _obs_layout(gymnax_space) -> tuple[tuple, Any]:
    """``(leaves, treedef)`` of an observation of ``gymnax_space``: ``(path, shape,
    dtype)`` of every array in ``jax.tree.leaves`` order, ``path`` being the dict keys /
    tuple indices that lead to it in a Gymnasium observation, and the pytree structure
    that puts the arrays back together."""
    with_paths, treedef = jax.tree_util.tree_flatten_with_path(observation_struct(gymnax_space))
    leaves = tuple(
        # DictKey has .key, SequenceKey (a tuple's) .idx
        (tuple(getattr(key, "key", getattr(key, "idx", None)) for key in path), tuple(leaf.shape), np.dtype(leaf.dtype))
        for path, leaf in with_paths
    )
    return leaves, treedef


# ----------------------------------------------------------------------------- ids and make


def check(env_id: str) -> None:
    """Raise ``ValueError`` unless Gymnasium knows ``env_id`` (given without the prefix;
    ``"module:Id"`` imports ``module`` first, as ``gymnasium.make`` does)."""
    try:
        gymnasium.spec(env_id)
    except (gymnasium.error.Error, ImportError) as error:
        raise ValueError(f"unknown Gymnasium env id {env_id!r} ({PREFIX}{env_id}): {error}") from None


@dataclasses.dataclass(frozen=True)
class _HostSpec:
    """What the host needs to build and drive the vector envs of one ``make``."""

    env_id: str
    make_kwargs: dict
    vectorization_mode: str
    obs_leaves: tuple  # (path, shape, dtype) per observation array, as _obs_layout gives
    integer_actions: bool  # Discrete or MultiDiscrete (int32 on the device), else float Box
    action_start: int | tuple  # integer actions: Gymnasium's ``start`` (a tuple per choice for MultiDiscrete)
    action_shape: tuple  # () for Discrete actions, (k,) for MultiDiscrete
    action_dtype: np.dtype  # the dtype Gymnasium expects

    def make_vector_env(self, num_envs: int):
        vector_kwargs = {"autoreset_mode": AutoresetMode.SAME_STEP}
        if self.vectorization_mode == "async":
            # Forking a process that runs JAX's threads can deadlock the child.
            vector_kwargs["context"] = "spawn"
        return gymnasium.make_vec(
            self.env_id,
            num_envs=num_envs,
            vectorization_mode=self.vectorization_mode,
            vector_kwargs=vector_kwargs,
            **self.make_kwargs,
        )

    def actions_from_bits(self, bits: np.ndarray) -> np.ndarray:
        """Actions ``[B, *action_shape]`` (int32 or float32) from their int32 bits ``[B, A]``."""
        return bits.view(np.int32 if self.integer_actions else np.float32).reshape((-1,) + self.action_shape)

    def to_host_actions(self, action: np.ndarray) -> np.ndarray:
        """Device actions ``[B, *action_shape]`` as Gymnasium takes them: shifted by
        ``start`` and cast (int64 for Discrete and MultiDiscrete, int8 for MultiBinary)."""
        if self.integer_actions:
            return (action.astype(np.int64) + np.asarray(self.action_start, np.int64)).astype(self.action_dtype)
        return action.astype(self.action_dtype)

    def to_device_obs(self, obs) -> list[np.ndarray]:
        """The arrays ``[B, *shape]`` of Gymnasium observations of B envs (a vector env's
        batch, or one env's observation with B = 1), in ``jax.tree.leaves`` order."""
        leaves = []
        for path, shape, dtype in self.obs_leaves:
            leaf = obs
            for key in path:  # a vector env batches Dict / Tuple observations leaf by leaf
                leaf = leaf[key]
            leaves.append(np.asarray(leaf).astype(dtype, copy=False).reshape((-1,) + shape))
        return leaves


_PROBES: dict = {}  # (env_id, sorted make_kwargs) -> what _probe found


def _probe(env_id: str, make_kwargs: dict):
    """``(observation_space, action_space, max_episode_steps)`` of one instance made with
    ``make_kwargs`` (reusing the answer for the same arguments)."""
    try:
        key = (env_id, tuple(sorted(make_kwargs.items())))
        hash(key)
    except TypeError:  # unhashable argument values: probe every time
        key = None
    if key is not None and key in _PROBES:
        return _PROBES[key]
    try:
        env = gymnasium.make(env_id, **make_kwargs)
    except Exception as error:
        raise ValueError(
            f"gymnasium.make({env_id!r}, **{make_kwargs!r}) failed: {type(error).__name__}: {error}"
        ) from error
    try:
        answer = (env.observation_space, env.action_space, env.spec.max_episode_steps if env.spec else None)
    finally:
        env.close()
    if key is not None:
        _PROBES[key] = answer
    return answer


def make(env_id: str, vectorization_mode: str = "sync", **make_kwargs):
    """A Gymnasium env with the gymnax API. Returns ``(env, env_params)``.

    Args:
      env_id: a Gymnasium id without the ``"gymnasium:"`` prefix, e.g. ``"CartPole-v1"``.
      vectorization_mode: ``"sync"`` (sub-envs stepped in turn in this process) or
        ``"async"`` (one process per sub-env: for envs whose step costs more than the
        inter-process round trip, such as MuJoCo's). Async processes are started with
        multiprocessing's "spawn", so a script needs the ``if __name__ == "__main__":``
        guard.
      make_kwargs: passed to ``gymnasium.make``; ``max_steps_in_episode`` (gymnax's name)
        is accepted for ``max_episode_steps``.
    There is no ``num_envs``: each reset makes one sub-env per vmapped lane.
    """
    check(env_id)
    if vectorization_mode not in VECTORIZATION_MODES:
        raise ValueError(f"vectorization_mode must be one of {list(VECTORIZATION_MODES)}, got {vectorization_mode!r}")
    if "num_envs" in make_kwargs:
        raise ValueError(
            "num_envs is not an argument of a Gymnasium env: each reset makes one host env per "
            "vmapped lane (set the algorithm's num_envs)"
        )
    if "max_steps_in_episode" in make_kwargs:
        if "max_episode_steps" in make_kwargs:
            raise ValueError("give max_episode_steps or max_steps_in_episode, not both")
        make_kwargs["max_episode_steps"] = make_kwargs.pop("max_steps_in_episode")
    env = GymnasiumEnv(env_id, make_kwargs, vectorization_mode)
    return env, env.default_params


# ----------------------------------------------------------------------------- the env


class GymnasiumEnv:
    """A Gymnasium env id with the gymnax API (see the module docstring). Make it with
    :func:`jaxrl.envs.make` (``"gymnasium:<id>"``)."""

    def __init__(self, env_id: str, make_kwargs: dict, vectorization_mode: str = "sync"):
        obs_space, act_space, max_steps = _probe(env_id, make_kwargs)
        self.env_id = env_id
        self._observation_space = observation_space(obs_space, env_id)
        self._action_space = action_space(act_space, env_id)
        self._max_steps = max_steps
        integer_actions = not isinstance(self._action_space, spaces.Box)
        start = np.asarray(getattr(act_space, "start", 0), np.int64)  # MultiBinary and Box have none
        obs_leaves, self._obs_treedef = _obs_layout(self._observation_space)
        self._obs_structs = [jax.ShapeDtypeStruct(shape, dtype) for _, shape, dtype in obs_leaves]
        self._host = _HostSpec(
            env_id=env_id,
            make_kwargs=dict(make_kwargs),
            vectorization_mode=vectorization_mode,
            obs_leaves=obs_leaves,
            integer_actions=integer_actions,
            action_start=tuple(start.tolist()) if start.ndim else int(start),
            action_shape=tuple(self._action_space.shape),
            action_dtype=np.dtype(act_space.dtype),
        )
        # The resets traced from this object: they own the host envs, so these stay open
        # while the object is alive as well as while a compiled program using them is.
        self._reset_sites: list[_ResetSite] = []

    @property
    def name(self) -> str:
        return PREFIX + self.env_id

    @property
    def default_params(self) -> GymnasiumParams:
        return GymnasiumParams(max_steps_in_episode=self._max_steps)

    @property
    def num_actions(self) -> int:
        return self._action_space.n

    def observation_space(self, params=None):
        return self._observation_space

    def action_space(self, params=None):
        return self._action_space

    def reset(self, key: jax.Array, params: GymnasiumParams | None = None):
        """Start an episode in one env: ``(obs, state)``, ``obs`` an array or a dict /
        tuple of arrays as :meth:`observation_space` describes.

        Batch it with ``jax.vmap`` over keys ``[N]``: the N lanes (times any outer vmap)
        become one vector env, reset in one host call, each sub-env seeded from its key.
        """
        del params
        site = _ResetSite(self._host)
        self._reset_sites.append(site)
        seed = jax.random.bits(key, dtype=jnp.uint32)
        *leaves, ref = _batched_callback(site, (*self._obs_structs, jax.ShapeDtypeStruct((2,), jnp.int32)), seed)
        state = GymnasiumState(handle=ref[0], lane=ref[1], count=jnp.zeros((), jnp.int32))
        return jax.tree.unflatten(self._obs_treedef, leaves), state

    def step(self, key: jax.Array, state: GymnasiumState, action, params: GymnasiumParams | None = None):
        """One step of one env (batch it with ``jax.vmap``, one host call for all lanes).

        Returns ``(obs, state, reward, terminated, truncated, info)`` with float32
        ``reward``, bool flags and ``info["final_observation"]`` (see the module
        docstring). ``key`` is unused: the host env draws from its own seeded generator.
        """
        del key, params
        action = jnp.reshape(jnp.asarray(action, self._action_space.dtype), self._action_space.shape)
        # One int32 array in, one array per observation leaf plus one out: JAX copies
        # every callback argument and result on its own, at a cost per array that
        # exceeds a CartPole step.
        packed = jnp.concatenate(
            [jnp.stack([state.handle, state.lane, state.count]).astype(jnp.int32), _bits(action).reshape(-1)]
        )
        *pairs, scalars = _batched_callback(
            _step_host,
            (
                *(jax.ShapeDtypeStruct((2,) + leaf.shape, leaf.dtype) for leaf in self._obs_structs),
                jax.ShapeDtypeStruct((4,), jnp.int32),
            ),
            packed,
        )
        obs = jax.tree.unflatten(self._obs_treedef, [pair[0] for pair in pairs])
        final_obs = jax.tree.unflatten(self._obs_treedef, [pair[1] for pair in pairs])
        reward = jax.lax.bitcast_convert_type(scalars[0], jnp.float32)
        terminated, truncated = scalars[1].astype(bool), scalars[2].astype(bool)
        info = {
            "discount": 1.0 - terminated.astype(jnp.float32),
            "terminated": terminated,
            "truncated": truncated,
            "final_observation": final_obs,
        }
        return obs, state.replace(count=scalars[3]), reward, terminated, truncated, info

    def host_vector_env(self, num_envs: int, seed: int) -> HostVectorEnv:
        """``num_envs`` sub-envs stepped from Python rather than from compiled code (an
        actor's envs, :mod:`jaxrl.workflow.actor_learner`), seeded from ``seed``."""
        return HostVectorEnv(self._host, self._obs_treedef, num_envs, seed)

    def render_episode(self, policy, seed: int, max_steps: int | None = None) -> tuple[np.ndarray, float, float]:
        """Play one episode on the host in one Gymnasium env made as this env's sub-envs
        are, with ``render_mode="rgb_array"``, and keep its frames.

        ``policy(obs) -> action`` sees observations as :meth:`reset` /
        :meth:`step` return them and returns actions as :meth:`step` takes them. The
        episode starts from ``reset(seed=seed)`` and runs to its end (or ``max_steps``).
        Returns ``(frames, return, fps)``: uint8 frames ``[T + 1, H, W, 3]`` (the first
        observation's, then one per step) and the env's ``render_fps`` (30 if it names
        none). A ``ValueError`` if the env cannot render ``rgb_array`` frames. Sets
        ``SDL_AUDIODRIVER=dummy`` (and, without a display, ``SDL_VIDEODRIVER=dummy``) in
        the process's environment unless they are set: pygame would look for a sound
        card and a display."""
        # pygame (classic control's renderer) opens a sound device and, where there is
        # no display, complains about it, unless told not to.
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
        if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        try:
            env = gymnasium.make(self.env_id, render_mode="rgb_array", **self._host.make_kwargs)
        except Exception as error:
            raise ValueError(f"{self.name} cannot render: {type(error).__name__}: {error}") from None
        try:
            if "rgb_array" not in env.metadata.get("render_modes", ()):
                modes = env.metadata.get("render_modes", [])
                raise ValueError(f"{self.name} cannot render rgb_array frames (its render modes: {modes})")
            obs, _ = env.reset(seed=int(seed))
            frames, total, done, steps = [self._frame(env)], 0.0, False, 0
            while not done and (max_steps is None or steps < max_steps):
                leaves = [leaf[0] for leaf in self._host.to_device_obs(obs)]
                action = np.asarray(policy(jax.tree.unflatten(self._obs_treedef, leaves)))
                obs, reward, terminated, truncated, _ = env.step(self._host.to_host_actions(action[None])[0])
                frames.append(self._frame(env))
                total, done, steps = total + float(reward), bool(terminated or truncated), steps + 1
            fps = float(env.metadata.get("render_fps") or 30)
        finally:
            env.close()
        return np.stack(frames), total, fps

    def _frame(self, env) -> np.ndarray:
        try:
            frame = env.render()
        except Exception as error:  # e.g. gymnasium.error.DependencyNotInstalled: pygame
            raise ValueError(f"{self.name} cannot render: {type(error).__name__}: {error}") from None
        frame = np.asarray(frame)
        if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[-1] != 3:
            raise ValueError(
                f"{self.name} rendered a frame of shape {frame.shape} and dtype {frame.dtype}, not [H, W, 3] uint8"
            )
        return frame


def _bits(x: jax.Array) -> jax.Array:
    """int32 or float32 ``x`` as int32 (the same bits)."""
    return x if x.dtype == jnp.int32 else jax.lax.bitcast_convert_type(x.astype(jnp.float32), jnp.int32)


def fold_vmap(fn, args: tuple) -> tuple:
    """``fn(B, *batched_args)`` for one env's ``args``, made ONE call of ``fn`` under any
    nesting of ``jax.vmap``: ``fn`` always gets every argument with a single leading axis
    ``[B]`` (B = the product of all vmapped sizes; 1 without vmap) and returns a tuple of
    arrays with that leading axis; the result is one env's. The Gymnasium bridge's host
    calls and envpool's custom calls (:mod:`jaxrl.envs.envpool`) both step whole batches."""

    @jax.custom_batching.custom_vmap
    def call(*batched):
        return tuple(fn(batched[0].shape[0], *batched))

    @call.def_vmap
    def fold_axis(axis_size, in_batched, *batched):
        # Merge the new vmapped axis into the leading one and call ``call`` again: an
        # outer vmap (over seeds) batches that call with this same rule, so its axis
        # joins the same call instead of looping over it.
        batched = [x if b else jnp.broadcast_to(x, (axis_size,) + x.shape) for x, b in zip(batched, in_batched)]
        outs = call(*(x.reshape((-1,) + x.shape[2:]) for x in batched))
        return tuple(o.reshape((axis_size, -1) + o.shape[1:]) for o in outs), (True,) * len(outs)

    outs = call(*(jnp.asarray(x)[None] for x in args))
    return tuple(o[0] for o in outs)


def _batched_callback(callback, result_structs: tuple, *args):
    """``io_callback(callback, ...)`` for one env's ``args``, made ONE host call under
    any nesting of ``jax.vmap`` (:func:`fold_vmap`; ``io_callback`` alone would loop over
    a vmapped axis with one call per element). ``callback`` gets every argument with a
    leading axis ``[B]`` and returns ``result_structs`` with it."""

    def host_call(size, *batched):
        shapes = tuple(jax.ShapeDtypeStruct((size,) + s.shape, s.dtype) for s in result_structs)
        return io_callback(callback, shapes, *batched)

    return fold_vmap(host_call, args)


# ----------------------------------------------------------------------------- the host side

# Live vector envs by handle. Callbacks of different programs can run on different
# threads, hence the lock around the registry (each batch also has its own).
_BATCHES: dict[int, _Batch] = {}
_LOCK = threading.RLock()
_HANDLES = itertools.count(1)


class _Batch:
    """The vector env of one run of a reset, with one sub-env per lane."""

    def __init__(self, host: _HostSpec, vector_env, num_envs: int):
        self.host = host
        self.vector_env = vector_env
        self.num_envs = num_envs
        self.handle = next(_HANDLES)
        self.count = 0  # steps since the reset
        self.lanes = np.arange(num_envs)
        self.closed = False
        self.lock = threading.Lock()

    def describe(self) -> str:
        return f"Gymnasium env {self.host.env_id!r} ({self.num_envs} envs, handle {self.handle})"

    def close(self) -> None:
        with _LOCK:
            _BATCHES.pop(self.handle, None)
        if not self.closed:
            self.closed = True
            try:
                self.vector_env.close()
            except Exception:  # noqa: BLE001 - a broken env may fail to close; it is dropped anyway
                pass

    def retire(self) -> bool:
        """Unregister without closing the vector env (to reuse it); False if closed."""
        with self.lock:
            if self.closed:
                return False
            self.closed = True
        with _LOCK:
            _BATCHES.pop(self.handle, None)
        return True

    def reset(self, seeds: np.ndarray) -> list[np.ndarray]:
        try:
            obs, _ = self.vector_env.reset(seed=[int(s) for s in seeds])
        except Exception as error:
            self.close()
            raise GymnasiumEnvError(f"{self.describe()} raised in reset: {type(error).__name__}: {error}") from error
        return self.host.to_device_obs(obs)

    def step(self, lanes: np.ndarray, counts: np.ndarray, actions: np.ndarray):
        """Step every sub-env with the actions of ``lanes`` (any order, each lane once).
        Returns ``(*pairs, scalars)``: per observation leaf ``pair [B, 2, *shape]``
        (observation, final observation), and int32 ``scalars [B, 4]`` (reward's float32
        bits, terminated, truncated, count), in the order of ``lanes``."""
        with self.lock:
            if self.closed:
                raise GymnasiumEnvError(f"{self.describe()} is closed")
            in_order = np.array_equal(lanes, self.lanes)  # the usual case: no reordering
            if not in_order and not np.array_equal(np.sort(lanes), self.lanes):
                raise GymnasiumEnvError(
                    f"{self.describe()}: a step must take every lane of a reset exactly once (the vector env steps "
                    f"all its sub-envs together), got lanes {lanes.tolist()}"
                )
            if np.any(counts != self.count):
                raise GymnasiumEnvError(
                    f"{self.describe()} is at step {self.count} but was given states from step(s) "
                    f"{sorted(set(counts.tolist()))}: a bridged env state refers to host envs and can be stepped "
                    "only once (host envs cannot be copied or rewound)"
                )
            if not in_order:
                by_lane = np.empty_like(actions)
                by_lane[lanes] = actions
                actions = by_lane
            try:
                obs, reward, terminated, truncated, info = self.vector_env.step(self.host.to_host_actions(actions))
            except Exception as error:
                self.close()
                raise GymnasiumEnvError(
                    f"{self.describe()} raised at step {self.count + 1} after reset: {type(error).__name__}: {error}"
                ) from error
            self.count += 1
            pairs = [np.stack([leaf, leaf], axis=1) for leaf in self.host.to_device_obs(obs)]
            for lane in np.flatnonzero(info.get("_final_obs", ())):
                for pair, final in zip(pairs, self.host.to_device_obs(info["final_obs"][lane])):
                    pair[lane, 1] = final[0]
            scalars = np.empty((self.num_envs, 4), np.int32)
            scalars[:, 0] = np.asarray(reward, np.float32).view(np.int32)
            scalars[:, 1] = terminated
            scalars[:, 2] = truncated
            scalars[:, 3] = self.count
            outs = (*pairs, scalars)
            return tuple(out[lanes] for out in outs) if not in_order else outs


class HostVectorEnv:
    """A vector env of ``num_envs`` sub-envs stepped from Python, with the bridge's
    conventions (device dtypes, ``SAME_STEP`` autoreset, the final observation of an
    episode that ended) in NumPy: :meth:`reset` gives the observations (a pytree of
    ``[N, ...]`` arrays) and :meth:`step` ``(obs, reward, terminated, truncated,
    final_obs, valid)``, ``valid`` None (every step is a transition). An exception in
    the env is a :class:`GymnasiumEnvError` naming the env and the step."""

    padding_steps = False

    def __init__(self, host: _HostSpec, treedef, num_envs: int, seed: int):
        self.host, self.treedef, self.num_envs, self.steps = host, treedef, num_envs, 0
        try:
            self.vector_env = host.make_vector_env(num_envs)
        except Exception as error:
            raise GymnasiumEnvError(
                f"could not make {num_envs} Gymnasium env(s) {host.env_id!r}: {type(error).__name__}: {error}"
            ) from error
        self._seeds = [int(s) for s in np.random.SeedSequence(seed).generate_state(num_envs)]

    def _obs(self, obs):
        return jax.tree.unflatten(self.treedef, self.host.to_device_obs(obs))

    def reset(self):
        try:
            obs, _ = self.vector_env.reset(seed=self._seeds)
        except Exception as error:
            raise GymnasiumEnvError(f"Gymnasium env {self.host.env_id!r} raised in reset: {error!r}") from error
        return self._obs(obs)

    def step(self, action: np.ndarray):
        self.steps += 1
        try:
            obs, reward, terminated, truncated, info = self.vector_env.step(self.host.to_host_actions(action))
        except Exception as error:
            raise GymnasiumEnvError(
                f"Gymnasium env {self.host.env_id!r} raised at step {self.steps}: {type(error).__name__}: {error}"
            ) from error
        leaves = self.host.to_device_obs(obs)
        final = [leaf.copy() for leaf in leaves]
        for lane in np.flatnonzero(info.get("_final_obs", ())):
            for leaf, last in zip(final, self.host.to_device_obs(info["final_obs"][lane])):
                leaf[lane] = last[0]
        unflatten = functools.partial(jax.tree.unflatten, self.treedef)
        reward = np.asarray(reward, np.float32)
        return unflatten(leaves), reward, np.asarray(terminated), np.asarray(truncated), unflatten(final), None

    def close(self) -> None:
        try:
            self.vector_env.close()
        except Exception:  # noqa: BLE001 - a broken env may fail to close; it is dropped anyway
            pass


def _lookup(handle: int) -> _Batch:
    with _LOCK:
        batch = _BATCHES.get(handle)
    if batch is None:
        raise GymnasiumEnvError(
            f"no live Gymnasium env has handle {handle}: its reset ran again, it was closed after an error or by "
            "close_all(), or the state comes from another process (a checkpoint); reset the env"
        )
    return batch


class _ResetSite:
    """One ``reset`` in a traced program (the io_callback there holds it) and the vector
    env its last run created, kept in a one-element list its finaliser can reach."""

    def __init__(self, host: _HostSpec):
        self.host = host
        self.current: list[_Batch | None] = [None]
        weakref.finalize(self, _close_current, self.current)

    def __call__(self, seeds: jax.Array):
        seeds = np.asarray(seeds)
        num_envs = seeds.shape[0]
        old = self.current[0]
        self.current[0] = None
        if old is not None and old.num_envs == num_envs and old.retire():
            # Reuse the vector env under a new handle, which invalidates the previous
            # run's states (making sub-envs costs more than resetting them).
            batch = _Batch(self.host, old.vector_env, num_envs)
        else:
            if old is not None:
                old.close()
            try:
                vector_env = self.host.make_vector_env(num_envs)
            except Exception as error:
                raise GymnasiumEnvError(
                    f"could not make {num_envs} Gymnasium env(s) {self.host.env_id!r}: {type(error).__name__}: {error}"
                ) from error
            batch = _Batch(self.host, vector_env, num_envs)
        leaves = batch.reset(seeds)
        with _LOCK:
            _BATCHES[batch.handle] = batch
        self.current[0] = batch
        return *leaves, np.stack([np.full(num_envs, batch.handle), np.arange(num_envs)], axis=1).astype(np.int32)


def _close_current(current: list) -> None:
    if current[0] is not None:
        current[0].close()
        current[0] = None


def _step_host(packed):
    """The step callback. ``packed [B, 3 + A]`` int32 holds each lane's handle, lane and
    count and its action's bits; the lanes may come from several resets in any order
    (each reset's vector env is stepped once). Returns ``(*pairs, scalars)`` as
    :meth:`_Batch.step` does, for all B lanes."""
    packed = np.asarray(packed)
    handles, lanes, counts = packed[:, 0], packed[:, 1], packed[:, 2]
    if np.all(handles == handles[0]):  # the usual case: every lane from one reset
        batch = _lookup(int(handles[0]))
        return batch.step(lanes, counts, batch.host.actions_from_bits(packed[:, 3:]))
    results = None
    for handle in np.unique(handles):
        where = np.flatnonzero(handles == handle)
        batch = _lookup(int(handle))
        outs = batch.step(lanes[where], counts[where], batch.host.actions_from_bits(packed[where, 3:]))
        if results is None:
            results = [np.empty((handles.shape[0],) + o.shape[1:], o.dtype) for o in outs]
        for result, out in zip(results, outs):
            result[where] = out
    return tuple(results)


def vector_env(handle) -> Any:
    """The live ``gymnasium.vector`` env behind a state's handle (an int or a scalar
    array), for inspection: sub-env ``i`` serves lane ``i``."""
    return _lookup(int(np.asarray(handle).reshape(-1)[0])).vector_env


def close_all() -> None:
    """Close every host env the bridge holds (states referring to them become invalid)."""
    with _LOCK:
        batches = list(_BATCHES.values())
    for batch in batches:
        batch.close()


# ----------------------------------------------------------------------------- checkpoints


def _is_state(node) -> bool:
    return isinstance(node, GymnasiumState)


def _bridged_states(tree) -> list[GymnasiumState]:
    return [node for node in jax.tree.leaves(tree, is_leaf=_is_state) if _is_state(node)]


def snapshot(tree) -> bytes | None:
    """The host envs behind every bridged env state in ``tree`` (any pytree, e.g. a
    training state), pickled: each sync vector env's sub-envs (their physics, episode
    progress and random generators) and step count. None where ``tree`` holds no bridged
    state, or where a host env cannot be pickled (an async vector env's sub-envs live in
    other processes; an env holding a window or a socket)."""
    states = _bridged_states(tree)
    if not states:
        return None
    handles = sorted({int(h) for state in states for h in np.asarray(state.handle).ravel()})
    entries = []
    for handle in handles:
        batch = _lookup(handle)
        if batch.host.vectorization_mode != "sync":
            return None
        with batch.lock:
            entries.append((handle, batch.host, batch.num_envs, batch.count, list(batch.vector_env.envs)))
    try:
        return pickle.dumps(entries)
    except Exception:  # noqa: BLE001 - an env that cannot be pickled restarts instead (see runner)
        return None


def restore(tree, blob: bytes):
    """``tree`` with its bridged env states pointing at host envs rebuilt from
    :func:`snapshot`'s ``blob`` (taken when ``tree`` was saved): stepping them continues
    the saved episodes exactly. The rebuilt envs are closed by :func:`close_all` and at
    exit."""
    handles = {}
    for handle, host, num_envs, count, sub_envs in pickle.loads(blob):
        vector_env = gymnasium.vector.SyncVectorEnv(
            [functools.partial(lambda env: env, env) for env in sub_envs], autoreset_mode=AutoresetMode.SAME_STEP
        )
        batch = _Batch(host, vector_env, num_envs)
        batch.count = count
        with _LOCK:
            _BATCHES[batch.handle] = batch
        handles[handle] = batch.handle

    def remap(node):
        if not _is_state(node):
            return node
        old = np.asarray(node.handle)
        return node.replace(handle=jnp.asarray(np.vectorize(handles.__getitem__, otypes=[np.int32])(old)))

    return jax.tree.map(remap, tree, is_leaf=_is_state)
