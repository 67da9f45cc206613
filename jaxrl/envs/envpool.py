"""envpool's C++ envs, stepped from compiled code: ``"envpool:<id>"`` (``pip install "jaxrl[envpool]"``). ::

    env, env_params = jaxrl.envs.make("envpool:Pong-v5", episodic_life=True, reward_clip=True)
    out = jax.jit(ppo.train)(key, ppo.Config(env_id="envpool:CartPole-v1"))

**What runs where.** envpool's XLA interface (``env.xla()``) gives ``send`` / ``recv``
custom calls (``jax.ffi``) that step a whole envpool -- ``num_envs`` C++ envs on its own
threads -- from inside ``jit``. They cannot be vmapped: the batch is the envpool's own.
The gymnax API is per env and batched by the caller's ``jax.vmap`` (``rollout``,
``evaluation``, the vmap over seeds all do it), so this adapter keeps that API and turns
the vmap into the envpool's batch, as :mod:`jaxrl.envs.gymnasium` does for its host
envs: ``reset`` and ``step`` are written for one env, and their batching rule
(``jax.custom_batching.custom_vmap``) folds every vmapped axis into one leading axis of
size B, so one time step of all lanes of all seeds is ONE ``send`` + ``recv`` on an
envpool of B envs. That envpool is made (once) when the program is traced, for the
traced ``reset`` it belongs to and for B; an env state names its ``reset`` statically, so
a training rollout and an evaluation inside the same program never share an envpool.

**Reset.** The XLA interface has no reset, so ``reset`` is one
``jax.experimental.io_callback`` that calls the envpool's Python ``reset()`` (all B envs)
and returns the observations with the envpool's handle; every later ``send`` depends on
that handle, so the order is fixed by data flow. The JAX keys are not used: envpool seeds
its envs when it is made (env ``i`` of every envpool from ``seed + i``; ``make(...,
seed=...)``, default 0, so lane ``i`` plays as envpool's own env ``i`` with that seed)
and auto-resets continue from those generators. Re-running a program resets its envpools
and continues their generators (it does not replay the same episodes).

**Auto-reset.** envpool resets in the NEXT step: the step that ends an episode returns its
last observation with ``terminated`` / ``truncated``; the following step ignores its
action and returns the next episode's first observation, reward 0 and neither flag. That
"dummy" step cannot be skipped -- the batch steps together, and stepping again would move
every other env on -- so it is mapped onto our convention as follows:

- the step that ends an episode is exact: its reward, ``terminated`` / ``truncated`` and
  ``info["final_observation"]`` (the last observation, which is also the ``obs``
  returned: the next episode's first one is not known yet);
- the dummy step is a transition from that last observation to the next episode's first,
  reward 0, neither flag, marked ``info["valid"] = False`` (True on every real step).

The env declares it (``padding_steps = True``, so :attr:`jaxrl.envs.EnvSpec.padding_steps`):
:func:`jaxrl.rollout.collect` stores ``info["valid"]`` as ``Trajectory.valid``, and PPO,
A2C, REINFORCE, IMPALA (their losses) and DQN, SAC, DDPG and TD3 (replay weight 0, least
priority) learn from the real transitions only; :class:`jaxrl.envs.EpisodeStatistics`
does not count the dummy step. The algorithms that cannot leave it out (sequence replay,
datasets; AlphaZero cannot step a host env) refuse envpool ids at config time.

**Spaces.** Observations and actions are envpool's Gymnasium spaces
(``env_type="gymnasium"``), converted as the Gymnasium bridge converts them; Atari
observations are envpool's uint8 ``[stack_num, img_height, img_width]`` (channels
first), or ``[img_height, img_width, stack_num]`` for jaxrl's pixel networks with
``make(..., channels_last=True)``. ``make`` passes its other keyword arguments to
``envpool.make`` (``episodic_life``, ``reward_clip``, ``stack_num``, ``img_height``,
``frame_skip``, ``noop_max``, ``seed``, ``num_threads``, ...); ``max_steps_in_episode``
is accepted for ``max_episode_steps``.
There is no ``num_envs``: the envpool has one env per vmapped lane.

**Limits.** Linux only (envpool's XLA interface), CPU envs. An env state refers to a live
envpool of this process: it can be stepped forward once, copies cannot be rewound, and it
cannot be saved in a checkpoint: a resumed run (:func:`jaxrl.workflow.runner.run` with
``resume``) continues its envs with fresh episodes, with a warning
(:func:`jaxrl.envs.steps_on_host` is True for ``"envpool:"`` ids). Envpools live until :func:`close_all`
(each traced ``reset`` makes its own, and also a 1-env one: JAX traces the un-vmapped
body of a ``custom_vmap`` function once), so a process that traces many programs holds
many envpools and their threads.
``reset``'s key must be vmapped over the same axes as ``step``'s state and action (a
``ValueError`` says so otherwise).
"""

from __future__ import annotations

import itertools
import threading

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.experimental import io_callback

__all__ = ["EnvpoolEnv", "EnvpoolParams", "EnvpoolState", "check", "close_all", "make", "names", "require_envpool"]

PREFIX = "envpool:"


def require_envpool():
    """The ``envpool`` module, or an ImportError saying how to install it."""
    try:
        import envpool
    except ImportError as error:
        raise ImportError(f'"envpool:" envs need envpool ({error}); pip install "jaxrl[envpool]"') from error
    return envpool


def names() -> list[str]:
    """The task ids envpool has registered."""
    return sorted(require_envpool().list_all_envs())


def check(name: str) -> None:
    """ValueError unless envpool has registered the task id ``name``."""
    known = names()
    if name not in known:
        import difflib

        close = difflib.get_close_matches(name, known, n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(f"unknown envpool task {name!r} ({PREFIX}{name}).{hint}")


@struct.dataclass
class EnvpoolParams:
    """The env's parameters live in the envpool (``make``'s keyword arguments); only the
    time limit is mirrored here, for evaluation and :func:`jaxrl.envs.spec`."""

    max_steps_in_episode: int | None = struct.field(pytree_node=False, default=None)


@struct.dataclass
class EnvpoolState:
    """One lane's reference to its envpool."""

    handle: jax.Array  # uint8 [H]: the envpool's handle (orders the custom calls)
    resetting: jax.Array  # bool: the last step ended an episode, so the next is envpool's reset step
    site: int = struct.field(pytree_node=False, default=0)  # which traced reset made the envpool


class _Pool:
    """One envpool of ``num_envs`` envs and its XLA functions."""

    def __init__(self, task: str, kwargs: dict, num_envs: int, seed: int):
        envpool = require_envpool()
        self.env = envpool.make(task, env_type="gymnasium", num_envs=num_envs, batch_size=num_envs, seed=seed, **kwargs)
        self.num_envs = num_envs
        self.handle, self.recv, self.send, self.step = self.env.xla()
        self.lock = threading.Lock()

    def reset(self):
        with self.lock:
            obs, info = self.env.reset()
        order = np.argsort(np.asarray(info["env_id"]))
        return np.asarray(obs)[order], np.broadcast_to(self.handle, (self.num_envs,) + self.handle.shape).copy()


_SITES = itertools.count(1)
# The envpools by (traced reset, lanes): see EnvpoolEnv.pool.
_POOLS: dict[tuple[int, int], _Pool] = {}
_LOCK = threading.Lock()


def close_all() -> None:
    """Close every envpool made so far (states referring to them become invalid)."""
    with _LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.env.close()


class EnvpoolEnv:
    """An envpool task with the gymnax API (see the module docstring). Make it with
    :func:`jaxrl.envs.make` (``"envpool:<id>"``)."""

    padding_steps = True  # envpool's reset step is no transition: see the module docstring

    def __init__(self, task: str, kwargs: dict, channels_last: bool = False):
        from gymnax.environments import spaces

        from jaxrl.envs.gymnasium import action_space, observation_space

        envpool = require_envpool()
        kwargs = dict(kwargs)
        self.seed = int(kwargs.pop("seed", 0))
        self.task = task
        self.kwargs = kwargs
        try:
            probe = envpool.make(task, env_type="gymnasium", num_envs=1, batch_size=1, seed=self.seed, **kwargs)
        except Exception as error:
            raise ValueError(f"envpool.make({task!r}, **{kwargs!r}) failed: {type(error).__name__}: {error}") from error
        try:
            self._observation_space = observation_space(probe.single_observation_space, PREFIX + task)
            self._action_space = action_space(probe.single_action_space, PREFIX + task)
            self._max_steps = int(probe.config["max_episode_steps"]) if "max_episode_steps" in probe.config else None
        finally:
            probe.close()
        space = self._observation_space
        if not hasattr(space, "shape"):  # a Dict / Tuple space: the XLA step returns one array
            raise ValueError(
                f"{PREFIX}{task} has structured observations ({probe.single_observation_space}); the envpool "
                "adapter takes array observations only (Atari, classic control)"
            )
        self.channels_last = bool(channels_last) and len(space.shape) == 3
        if self.channels_last:
            low, high = (np.moveaxis(np.broadcast_to(b, space.shape), 0, -1) for b in (space.low, space.high))
            self._observation_space = spaces.Box(low, high, low.shape, space.dtype)
        self._envpool_obs_shape = tuple(space.shape)

    @property
    def name(self) -> str:
        return PREFIX + self.task

    @property
    def default_params(self) -> EnvpoolParams:
        return EnvpoolParams(max_steps_in_episode=self._max_steps)

    @property
    def num_actions(self) -> int:
        return self._action_space.n

    def observation_space(self, params=None):
        return self._observation_space

    def action_space(self, params=None):
        return self._action_space

    def pool(self, site: int, num_envs: int, make: bool = True) -> _Pool:
        """The envpool of ``num_envs`` envs of the traced reset ``site`` (made on first use
        if ``make``, else a ValueError if that reset never ran with ``num_envs`` lanes).
        Pools are kept by site for the process, not by env object: an algorithm makes its
        env again for each program it traces (init, step, evaluation)."""
        with _LOCK:
            key = (site, num_envs)
            if key not in _POOLS and not make:
                sizes = sorted(size for s, size in _POOLS if s == site)
                raise ValueError(
                    f"{self.name}: a state reset with {sizes} lane(s) is stepped with {num_envs}; vmap reset's key "
                    "over the same axes as step's state and action (the envpool's envs are the lanes of its reset)"
                )
            if key not in _POOLS:
                _POOLS[key] = _Pool(self.task, self.kwargs, num_envs, self.seed)
            return _POOLS[key]

    def host_vector_env(self, num_envs: int, seed: int) -> HostVectorEnv:
        """An envpool of ``num_envs`` envs stepped from Python through its own API (an
        actor's envs, :mod:`jaxrl.workflow.actor_learner`), seeded from ``seed``."""
        return HostVectorEnv(self, num_envs, seed)

    def _obs_struct(self, batch: int):
        return jax.ShapeDtypeStruct((batch,) + self._envpool_obs_shape, self._observation_space.dtype)

    def _lane_obs(self, obs):
        """One lane's envpool observation as this env gives it ([H, W, C] if channels_last)."""
        return jnp.moveaxis(obs, 0, -1) if self.channels_last else obs

    def reset(self, key: jax.Array, params: EnvpoolParams | None = None):
        """Start an episode in one env: ``(obs, state)``; batch it with ``jax.vmap``
        (one envpool of all lanes, reset in one host call). The key's value is unused
        (envpool seeds its envs when it is made), but it carries the vmapped axes."""
        del params
        site = next(_SITES)
        if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
            key = jax.random.key_data(key)

        def host_reset(batch: int, key):
            pool = self.pool(site, batch)  # made while tracing: the steps need it then
            handle_struct = jax.ShapeDtypeStruct((batch,) + pool.handle.shape, jnp.uint8)
            return io_callback(lambda _: pool.reset(), (self._obs_struct(batch), handle_struct), key)

        from jaxrl.envs.gymnasium import fold_vmap

        obs, handle = fold_vmap(host_reset, (key,))
        return self._lane_obs(obs), EnvpoolState(handle=handle, resetting=jnp.zeros((), bool), site=site)

    def step(self, key: jax.Array, state: EnvpoolState, action, params: EnvpoolParams | None = None):
        """One step of one env (batch it with ``jax.vmap``: one ``send`` + ``recv`` of the
        envpool for all lanes). Returns ``(obs, state, reward, terminated, truncated,
        info)``; see the module docstring for auto-reset and ``info["valid"]``."""
        del key, params
        site = state.site
        action = jnp.asarray(action, self._action_space.dtype)

        def pool_step(batch: int, handle, action):
            pool = self.pool(site, batch, make=False)
            new_handle, (obs, reward, terminated, truncated, info) = pool.step(handle[0], action)
            env_id = info["env_id"]
            # Results come back in the envpool's order (env_id); put them in lane order.
            obs, reward, terminated, truncated = (
                jnp.zeros_like(x).at[env_id].set(x) for x in (obs, reward, terminated, truncated)
            )
            handle = jnp.broadcast_to(new_handle, handle.shape)
            return obs, reward.astype(jnp.float32), terminated, truncated, handle

        from jaxrl.envs.gymnasium import fold_vmap

        obs, reward, terminated, truncated, handle = fold_vmap(pool_step, (state.handle, action))
        done = terminated | truncated
        obs = self._lane_obs(obs)
        info = {
            "discount": 1.0 - terminated.astype(jnp.float32),
            "terminated": terminated,
            "truncated": truncated,
            "final_observation": obs,
            "valid": ~state.resetting,
        }
        return obs, state.replace(handle=handle, resetting=done), reward, terminated, truncated, info


class HostVectorEnv:
    """An envpool stepped from Python (its C++ threads step the envs without the GIL),
    with :class:`EnvpoolEnv`'s conventions in NumPy: :meth:`step` gives ``(obs, reward,
    terminated, truncated, final_obs, valid)``, ``final_obs`` the observation (the last
    one where an episode ended) and ``valid`` False at envpool's reset step after it."""

    padding_steps = True

    def __init__(self, env: EnvpoolEnv, num_envs: int, seed: int):
        envpool = require_envpool()
        self.env, self.num_envs = env, num_envs
        self.pool = envpool.make(
            env.task, env_type="gymnasium", num_envs=num_envs, batch_size=num_envs, seed=seed % 2**31, **env.kwargs
        )
        self.resetting = np.zeros(num_envs, bool)

    def _obs(self, obs):
        return np.moveaxis(obs, 1, -1) if self.env.channels_last else obs

    def reset(self):
        obs, info = self.pool.reset()
        self.resetting[:] = False
        return self._obs(np.asarray(obs)[np.argsort(np.asarray(info["env_id"]))])

    def step(self, action: np.ndarray):
        obs, reward, terminated, truncated, info = self.pool.step(np.asarray(action), np.arange(self.num_envs))
        order = np.argsort(np.asarray(info["env_id"]))
        obs, reward, terminated, truncated = (np.asarray(x)[order] for x in (obs, reward, terminated, truncated))
        valid = ~self.resetting
        self.resetting = terminated | truncated
        obs = self._obs(obs)
        return obs, reward.astype(np.float32), terminated, truncated, obs, valid

    def close(self) -> None:
        self.pool.close()


def make(name: str, channels_last: bool = False, **kwargs):
    """``(EnvpoolEnv(name, kwargs), params)``: ``kwargs`` go to ``envpool.make``
    (``max_steps_in_episode`` is accepted for ``max_episode_steps``); ``num_envs`` and
    ``batch_size`` are not arguments (the envpool has one env per vmapped lane).
    ``channels_last=True`` gives image observations (envpool's ``[C, H, W]``, Atari's
    ``[stack_num, img_height, img_width]``) as ``[H, W, C]``, the layout of jaxrl's
    pixel networks (``network="nature_cnn"`` / ``"impala_cnn"``)."""
    check(name)
    for bad in ("num_envs", "batch_size", "env_type"):
        if bad in kwargs:
            raise ValueError(
                f"{bad} is not an argument of an envpool env: the envpool has one env per vmapped lane "
                "(set the algorithm's num_envs)"
            )
    if "max_steps_in_episode" in kwargs:
        if "max_episode_steps" in kwargs:
            raise ValueError("give max_episode_steps or max_steps_in_episode, not both")
        kwargs["max_episode_steps"] = kwargs.pop("max_steps_in_episode")
    env = EnvpoolEnv(name, kwargs, channels_last=channels_last)
    return env, env.default_params
