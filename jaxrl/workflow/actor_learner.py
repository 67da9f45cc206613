"""Actors and a learner apart: for envs stepped on the host (Gymnasium through the bridge,
envpool, a simulator of its own), actors collect while the learner learns. ::

    from jaxrl.workflow import actor_learner
    from jaxrl.algorithms import impala

    result = actor_learner.run("impala", impala.Config(env_id="gymnasium:CartPole-v1"), actors=2)
    result.metrics["eval_return"], result.lags          # [1, rows]; every update's policy lag

**What runs where.** Each actor is a thread that owns ``num_envs`` envs (its own reset,
so its own host vector env) and calls one compiled program per block: ``num_steps``
steps of its envs with the newest params it pulled from the :class:`ParameterStore`,
then puts the fixed-shape block, tagged with those params' version, on a bounded
:class:`BlockQueue`. The learner (the calling thread) takes blocks one at a time, runs
the algorithm's compiled ``learn`` on each (its lock-step ``update``, fed a real block),
and publishes the new params. XLA and host envs that release the GIL (envpool's C++
threads) run beside each other; a Python env's step holds the GIL, so actors of
pure-Python envs overlap the learner's XLA work but not each other's steps: put such
envs in processes (Gymnasium's ``vectorization_mode="async"``: ``env_kwargs``).

**Devices.** The learner runs on the first ``learner_devices`` devices (a block's env
axis split over them, its state replicated); actors take the remaining devices in turn,
or share the learner's first device where none remain (one CPU), or take the devices of
``actor_platform`` (``"cpu"`` beside a GPU learner).

**Records and runs.** The learner is driven by :func:`jaxrl.workflow.runner.drive`, in
chunks of learner iterations, so logging, checkpoints, resume, the target, the
progress bar and SIGTERM / SIGINT work as for every other run. A checkpoint holds the
learner's state; a resumed run starts its actors on fresh episodes. An asynchronous run
is not bit-reproducible (which params a block was collected with depends on timing);
with one actor and ``fixed_lag=k`` block ``i`` is collected with the params of version
``i - k``, so the run equals itself (the test mode).

**Faults.** An actor whose env (or program) raises is restarted on fresh episodes, with
the error on stderr, up to ``max_restarts`` times in a run; one more and the run stops
with :class:`ActorFailed` naming the error. However a run ends, :class:`Pipeline`'s
close stops and joins every actor thread.

**Metrics**, per learner iteration: the algorithm's, ``policy_lag`` (learner version
minus the block's), ``queue_occupancy`` (blocks waiting when the learner took one),
``learner_wait_seconds``, and per chunk ``actor_steps_per_second``,
``learner_updates_per_second``, ``actor_idle_fraction`` (actors' time blocked on a full
queue) and ``actor_restarts``.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import queue
import sys
import threading
import time
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxrl import envs, loop, networks, rollout, types
from jaxrl.workflow import rundir, runner
from jaxrl.workflow.options import DEFAULTS, RunOptions

PIPELINE_METRICS = (
    "policy_lag",
    "queue_occupancy",
    "learner_wait_seconds",
    "actor_steps_per_second",
    "learner_updates_per_second",
    "actor_idle_fraction",
    "actor_restarts",
)


class ActorFailed(RuntimeError):
    """An actor failed more often than the run's ``max_restarts`` allows."""


@dataclasses.dataclass(frozen=True)
class ActorOptions:
    """How a decoupled run's actors and learner are laid out.

    Attributes:
      actors: actor threads, each with the Config's ``num_envs`` envs.
      queue_size: blocks the queue holds; a full queue blocks the actors.
      fixed_lag: None: actors act with the newest params (asynchronous). An int ``k``
        (with one actor): block ``i`` is collected with params version ``i - k`` (0
        for the first ``k``), which makes the run reproducible (the test mode).
      max_restarts: actor restarts a run allows (after an env raised) before it stops.
      learner_devices: the first this many devices run the learner (a block's env
        axis is split over them); actors run on the rest, or on the learner's first.
      actor_platform: None (as above), or a platform whose devices the actors take in
        turn: ``"cpu"`` keeps a small policy's steps on the host beside a GPU learner.
      block_timeout: seconds the learner waits for a block before it stops with an error.
      join_timeout: seconds closing waits for each actor thread.
      central_inference: SEED RL's layout (:class:`InferenceServer`): actors only step
        their envs (host envs: Gymnasium) and one batched policy call on the learner's
        first device answers all of them, with the newest params.
      inference_wait: with ``central_inference``, the seconds the server waits, after
        the first actor asked, for the others before it answers those that did.
    """

    actors: int = 2
    queue_size: int = 2
    fixed_lag: int | None = None
    max_restarts: int = 3
    learner_devices: int = 1
    actor_platform: str | None = None
    block_timeout: float = 600.0
    join_timeout: float = 60.0
    central_inference: bool = False
    inference_wait: float = 0.002

    def __post_init__(self):
        for name, low in (("actors", 1), ("queue_size", 1), ("max_restarts", 0), ("learner_devices", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if self.fixed_lag is not None:
            if not isinstance(self.fixed_lag, int) or isinstance(self.fixed_lag, bool) or self.fixed_lag < 0:
                raise ValueError(f"fixed_lag must be None or an int >= 0, got {self.fixed_lag!r}")
            if self.actors != 1:
                raise ValueError(
                    f"fixed_lag (the reproducible test mode) needs actors=1: with {self.actors} actors the "
                    "order of their blocks depends on timing"
                )
        if not isinstance(self.central_inference, bool):
            raise ValueError(f"central_inference must be True or False, got {self.central_inference!r}")
        if self.central_inference and self.fixed_lag is not None:
            raise ValueError(
                "fixed_lag (the reproducible test mode) needs actors that act with the params of their "
                "block's version: central_inference=False"
            )
        for name in ("block_timeout", "join_timeout", "inference_wait"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")
        if self.actor_platform is not None:
            try:
                jax.devices(self.actor_platform)
            except (RuntimeError, ValueError) as error:
                raise ValueError(f"actor_platform={self.actor_platform!r} has no devices here ({error})") from None
        if self.learner_devices > jax.device_count():
            raise ValueError(
                f"learner_devices={self.learner_devices}, but there are {jax.device_count()} device(s) "
                "(on CPU, more are made with XLA_FLAGS=--xla_force_host_platform_device_count=N)"
            )


@dataclasses.dataclass(frozen=True)
class Block:
    """What an actor sends: its index, its block's sequence number (counting from 0 for
    each actor, on across restarts), the version of the params it acted with, the
    block (device arrays), its env steps and the seconds its collection took."""

    actor: int
    sequence: int
    version: int
    data: Any
    steps: int
    collect_seconds: float


class ParameterStore:
    """Versioned parameters: the learner publishes, actors pull the newest or (with a
    fixed lag) a given version. Versions only increase; the last ``keep`` are kept."""

    def __init__(self, params, version: int = 0, keep: int = 1):
        self._condition = threading.Condition()
        self._kept = collections.OrderedDict({version: params})
        self._keep = keep
        self.version = version

    def publish(self, params) -> int:
        """Store ``params`` as the next version; returns it."""
        with self._condition:
            self.version += 1
            self._kept[self.version] = params
            while len(self._kept) > self._keep:
                self._kept.popitem(last=False)
            self._condition.notify_all()
            return self.version

    def latest(self) -> tuple[int, Any]:
        """``(version, params)`` of the newest params."""
        with self._condition:
            return self.version, self._kept[self.version]

    def wait_for(self, version: int, stop: threading.Event) -> tuple[int, Any] | None:
        """``(version, params)`` of exactly ``version``, once it is published; None if
        ``stop`` is set first."""
        with self._condition:
            while self.version < version:
                if stop.is_set():
                    return None
                self._condition.wait(0.05)
            if version not in self._kept:
                raise RuntimeError(f"params version {version} is no longer kept (newest {self.version})")
            return version, self._kept[version]


class BlockQueue:
    """A bounded FIFO of :class:`Block` s. ``put`` blocks while it is full (until a stop
    is asked), ``get`` while it is empty (up to a timeout)."""

    def __init__(self, size: int):
        self._queue: queue.Queue = queue.Queue(size)

    def put(self, block: Block, stop: threading.Event) -> float | None:
        """Put ``block``; returns the seconds it waited for room, or None if ``stop``
        was set before there was any."""
        start = time.perf_counter()
        while not stop.is_set():
            try:
                self._queue.put(block, timeout=0.05)
                return time.perf_counter() - start
            except queue.Full:
                continue
        return None

    def get(self, timeout: float) -> Block | None:
        """The oldest block, or None after ``timeout`` seconds without one."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def occupancy(self) -> int:
        return self._queue.qsize()

    def drain(self) -> None:
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return


class Pipeline:
    """The actor threads of one decoupled run, the queue and the parameter store. Use it
    as a context (closing joins the actors); :meth:`start` with the first params, then
    :meth:`get` blocks and :meth:`publish` params.

    Args:
      record: the algorithm (its :attr:`~jaxrl.algorithms.contract.Algorithm.actor_learner` parts).
      config: the prepared config (``actor_learner.prepare``'s).
      key: the actors' randomness (actor ``a``'s envs and blocks after its ``r``-th
        (re)start from ``fold_in(fold_in(key, a), r)``).
      options: :class:`ActorOptions`.
      make_actor: ``make_actor(actor, device, key)``, an object whose ``block(params,
        sequence)`` is the actor's next block and ``close()`` closes its envs; default
        :meth:`ActorPrograms.actor`.
    """

    def __init__(self, record, config, key: jax.Array, options: ActorOptions, make_actor=None):
        self.parts, self.config, self.options = record.actor_learner, config, options
        self._key = key
        self._queue = BlockQueue(options.queue_size)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._store: ParameterStore | None = None
        self._error: BaseException | None = None
        self.block_steps = self.parts.block_steps(config)
        self.restarts = 0
        self.failures: list[str] = []
        self.steps = [0] * options.actors  # env steps each actor has put on the queue
        self.idle_seconds = [0.0] * options.actors  # seconds each actor waited for room in the queue
        self._waiting_since: list[float | None] = [None] * options.actors
        num_actors = options.actors
        devices = jax.devices()
        rest = jax.devices(options.actor_platform) if options.actor_platform else devices[options.learner_devices :]
        self.actor_devices = [rest[i % len(rest)] if rest else devices[0] for i in range(num_actors)]
        self.server = None
        if options.central_inference:
            programs = _cached(ActorPrograms, self.parts, config, num_actors)
            if not programs.host:
                raise ValueError(
                    f"central_inference answers actors that step their envs from Python (gymnasium:...); "
                    f"{config.env_id} steps in compiled code, where an actor's policy runs inside its block"
                )
            self.server = InferenceServer(
                programs, lambda: self._store.latest(), devices[0], key, self._stop, options.inference_wait
            )
            make_actor = make_actor or functools.partial(programs.actor, server=self.server)
        self._make_actor = make_actor or _cached(ActorPrograms, self.parts, config, num_actors).actor

    # -------------------------------------------------------------------- the learner's side

    def start(self, params, version: int = 0) -> None:
        """Start the actors, acting with ``params`` as version ``version``."""
        keep = 1 if self.options.fixed_lag is None else self.options.fixed_lag + 1
        self._store = ParameterStore(params, version, keep)
        self._first_version = version
        if self.server is not None:
            self.server.start()
        for actor in range(self.options.actors):
            thread = threading.Thread(target=self._run_actor, args=(actor,), name=f"jaxrl-actor-{actor}", daemon=True)
            thread.start()
            self._threads.append(thread)

    @property
    def started(self) -> bool:
        return self._store is not None

    @property
    def version(self) -> int:
        return self._store.version

    def publish(self, params) -> int:
        """The learner's new params, as the next version."""
        return self._store.publish(params)

    def get(self) -> tuple[Block, int]:
        """``(block, occupancy)``: the oldest block and the blocks that were waiting.
        Raises :class:`ActorFailed` once an actor failed too often, and ``TimeoutError``
        after ``block_timeout`` seconds without a block."""
        deadline = time.monotonic() + self.options.block_timeout
        while True:
            occupancy = self._queue.occupancy()
            block = self._queue.get(timeout=0.05)
            if block is not None:
                return block, occupancy
            if self._error is not None:
                raise self._error
            if self.server is not None and self.server.error is not None:
                raise RuntimeError(f"the inference server failed: {self.server.error!r}") from self.server.error
            if not any(thread.is_alive() for thread in self._threads):
                raise RuntimeError("every actor thread has stopped, none with an error")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no block from {self.options.actors} actor(s) in {self.options.block_timeout:g} s "
                    "(ActorOptions.block_timeout)"
                )

    def close(self) -> None:
        """Stop the actors and join their threads (``join_timeout`` each); a thread that
        does not end in time is named in a warning (it is a daemon: exit does not wait)."""
        self._stop.set()
        self._queue.drain()
        stuck = []
        threads = self._threads + ([self.server.thread] if self.server is not None else [])
        for thread in threads:
            if thread.ident is None:
                continue  # never started
            thread.join(self.options.join_timeout)
            if thread.is_alive():
                stuck.append(thread.name)
        self._queue.drain()
        if stuck:
            warnings.warn(f"actor thread(s) {', '.join(stuck)} did not stop within the join timeout", stacklevel=2)

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -------------------------------------------------------------------- an actor

    def counts(self) -> tuple[float, int, float]:
        """``(now, env steps, idle seconds)`` of all actors so far, a wait still going on
        counted up to now: differences between two calls give a window's rates."""
        with self._lock:
            now = time.perf_counter()
            waiting = sum(now - since for since in self._waiting_since if since is not None)
            return now, sum(self.steps), sum(self.idle_seconds) + waiting

    def _pull(self, sequence: int):
        if self.options.fixed_lag is None:
            return self._store.latest()
        version = self._first_version + max(0, sequence - self.options.fixed_lag)
        return self._store.wait_for(version, self._stop)

    def _run_actor(self, actor: int) -> None:
        device = self.actor_devices[actor]
        actor_key = jax.random.fold_in(self._key, actor)
        sequence, starts, cached = 0, 0, (None, None)
        while not self._stop.is_set():
            actor_envs = None
            try:
                actor_envs = self._make_actor(actor, device, jax.random.fold_in(actor_key, starts))
                starts += 1
                while not self._stop.is_set():
                    pulled = self._pull(sequence)
                    if pulled is None:
                        return
                    version, params = pulled
                    if cached[0] != version:
                        cached = (version, jax.device_put(params, device))
                    start = time.perf_counter()
                    data = jax.block_until_ready(actor_envs.block(cached[1], sequence))
                    version = getattr(actor_envs, "block_version", version)  # central inference: the server's
                    block = Block(actor, sequence, version, data, self.block_steps, time.perf_counter() - start)
                    with self._lock:
                        self._waiting_since[actor] = time.perf_counter()
                    waited = self._queue.put(block, self._stop)
                    with self._lock:
                        self._waiting_since[actor] = None
                        if waited is None:
                            return
                        self.steps[actor] += self.block_steps
                        self.idle_seconds[actor] += waited
                    sequence += 1
            except _Stopped:
                return
            except Exception as error:  # noqa: BLE001 - an env's error of any kind restarts the actor
                message = f"actor {actor} failed: {type(error).__name__}: {error}"
                with self._lock:
                    self.restarts += 1
                    self.failures.append(message)
                    over = self.restarts > self.options.max_restarts
                if over:
                    self._error = ActorFailed(
                        f"{message}\nthe run stops: actors failed {self.restarts} times, more than "
                        f"max_restarts={self.options.max_restarts}"
                    )
                    self._stop.set()
                    return
                print(
                    f"jaxrl: {message.splitlines()[0]} -- restarting it on fresh episodes "
                    f"(restart {self.restarts} of at most {self.options.max_restarts})",
                    file=sys.stderr,
                    flush=True,
                )
            finally:
                if actor_envs is not None:
                    actor_envs.close()


def _cached(make, *args):
    """``make(*args)``, shared by every run with the same (hashable) arguments."""
    try:
        return _shared(make, *args)
    except TypeError:  # an unhashable config (arrays as fields): no sharing
        return make(*args)


@functools.lru_cache(maxsize=16)
def _shared(make, *args):
    return make(*args)


@struct.dataclass
class ActorState:
    """An actor's state in a compiled block (envs in JAX): its envs, the policy's memory,
    the algorithm's tail and its env steps so far."""

    env_state: Any
    obs: Any
    carry: Any
    tail: Any
    timesteps: jax.Array


class ActorPrograms:
    """What actors run, for one algorithm's parts, config (whose ``num_envs`` and
    ``num_steps`` make a block) and number of actors, compiled once for all of them: for
    envs in JAX one compiled block (a scan of env and policy steps, then ``finish``); for
    host envs (those with a ``host_vector_env``: Gymnasium, envpool) one compiled policy
    step, called from Python between the env's steps, then ``finish``: inside a compiled
    block each of their steps would be a host callback, 3x slower. Each host actor's
    envs are its own, seeded from its key and closed when it stops or restarts.

    A host actor's policy draws from ``unsafe_rbg`` keys (XLA's ``RngBitGenerator``),
    made from the run's keys once per block: on a CPU, threefry's random bits cost a
    small policy step most of its time (benchmarks/RESULTS.md)."""

    def __init__(self, parts, config, num_actors: int):
        self.parts, self.config, self.num_actors = parts, config, num_actors
        num_envs, num_steps = config.num_envs, config.num_steps
        env, env_params = parts.make_env(config)
        self.base_env = envs.make_config_env(config)[0]
        self.host = hasattr(self.base_env, "host_vector_env")
        if self.host and getattr(config, "scale_rewards", False):
            raise ValueError("scale_rewards is not supported by actors of host envs (their rewards arrive unscaled)")
        self.spec = envs.config_spec(config)

        def init(key):
            obs, env_state = rollout.reset(env, env_params, key, num_envs)
            carry, tail = parts.initial_carry(config, num_envs), parts.initial_tail(config)
            return ActorState(env_state, obs, carry, tail, jnp.zeros((), jnp.int32))

        def rollout_of(state, params, key, actor):
            def policy(obs, carry, key):
                return parts.policy(params, obs, carry, key, config, actor, num_actors, state.timesteps)

            return rollout.collect(env, env_params, policy, state.env_state, state.obs, key, num_steps, state.carry)

        def collect(state, params, key, sequence, actor):
            collect_key, finish_key = jax.random.split(jax.random.fold_in(key, sequence))
            trajectory, env_state, obs, carry = rollout_of(state, params, collect_key, actor)
            tail, block = parts.finish(state.tail, trajectory, params, finish_key, config)
            return ActorState(env_state, obs, carry, tail, state.timesteps + num_envs * num_steps), block

        def shapes(params):
            state, key = init(jax.random.key(0)), jax.random.key(0)
            trajectory = rollout_of(state, params, key, jnp.int32(0))[0]
            return trajectory, parts.finish(state.tail, trajectory, params, key, config)[1]

        def block_key(key, sequence):
            bits = jax.random.bits(jax.random.fold_in(key, sequence), (4,), jnp.uint32)
            return jax.random.wrap_key_data(bits, impl="unsafe_rbg")

        def step(params, obs, carry, key, t, actor, timesteps, done):
            carry = networks.reset_carry(carry, done)
            return parts.policy(params, obs, carry, jax.random.fold_in(key, t), config, actor, num_actors, timesteps)

        def finish(tail, rows: dict, extras, params, key):
            trajectory = types.Trajectory(**rows, extras=extras)
            return parts.finish(tail, trajectory, params, jax.random.fold_in(key, num_steps), config)

        def finish_steps(tail, rows: dict, extras: list, params, key):
            # The policy's extras stay on the device, step by step: stacked here, not fetched.
            return finish(tail, rows, jax.tree.map(lambda *steps: jnp.stack(steps), *extras), params, key)

        def batched_step(params, obs, carry, key, call, present, done, timesteps):
            """Every actor's step at once (central inference): leaves ``[num_actors,
            num_envs, ...]``; the memory of actors not ``present`` stays as it was."""
            keys = jax.random.split(jax.random.fold_in(key, call), num_actors)

            def one(obs, carry, key, actor, timesteps):
                return parts.policy(params, obs, carry, key, config, actor, num_actors, timesteps)

            reset = networks.reset_carry(carry, done)
            action, stepped, extras = jax.vmap(one)(obs, reset, keys, jnp.arange(num_actors), timesteps)
            keep = lambda new, old: jnp.where(present.reshape((-1,) + (1,) * (new.ndim - 1)), new, old)  # noqa: E731
            return action, jax.tree.map(keep, stepped, carry), extras

        self.init = jax.jit(init)
        self.collect = jax.jit(collect, donate_argnums=0)
        self.block_key = jax.jit(block_key)
        self.step = jax.jit(step)
        self.finish = jax.jit(finish)
        self.finish_steps = jax.jit(finish_steps)
        self.batched_step = jax.jit(batched_step, donate_argnums=2)
        self.initial = jax.jit(lambda: (parts.initial_carry(config, num_envs), parts.initial_tail(config)))
        self.initial_carries = jax.jit(
            lambda: jax.tree.map(lambda x: jnp.stack([x] * num_actors), parts.initial_carry(config, num_envs))
        )
        self._trace_shapes, self._shapes = shapes, None

    def shapes(self, params) -> tuple:
        """``(trajectory, block)``: a rollout's and a block's shapes and dtypes (traced,
        not run) for ``params`` like these; a host actor's rollout takes the first."""
        if self._shapes is None:
            self._shapes = jax.eval_shape(self._trace_shapes, params)
        return self._shapes

    def actor(self, actor: int, device, key: jax.Array, server: InferenceServer | None = None):
        """Actor ``actor``'s envs on ``device``, reset and acting from ``key`` (or asking
        ``server`` for its actions): an object whose ``block(params, sequence)`` is its
        block number ``sequence`` and ``close()`` closes its envs."""
        if self.host:
            return _HostActor(self, actor, device, key, server)
        return _CompiledActor(self, actor, device, key)


class _CompiledActor:
    """An actor of envs in JAX: one compiled block per call."""

    def __init__(self, programs: ActorPrograms, actor: int, device, key: jax.Array):
        self.programs = programs
        self.actor = jax.device_put(jnp.int32(actor), device)
        reset_key, self.key = jax.device_put(jax.random.split(key), device)
        self.state = programs.init(reset_key)

    def block(self, params, sequence: int):
        self.state, block = self.programs.collect(self.state, params, self.key, np.int32(sequence), self.actor)
        return block

    def close(self) -> None:
        pass


class _HostActor:
    """An actor of host envs: a Python loop over the env's steps with the policy one
    compiled call per step, episode statistics kept as :class:`jaxrl.envs.EpisodeStatistics`
    keeps them (an env's padding steps not counted), then the algorithm's compiled
    ``finish``."""

    def __init__(self, programs: ActorPrograms, actor: int, device, key: jax.Array, server=None):
        self.programs, self.device, self.server, self.index = programs, device, server, actor
        self.num_envs, self.num_steps = programs.config.num_envs, programs.config.num_steps
        # The step's scalar arguments on the device once, not sent at every call.
        self.actor, self.times = jax.device_put(
            (np.int32(actor), list(np.arange(self.num_steps, dtype=np.int32))), device
        )
        reset_key, self.key = jax.device_put(jax.random.split(key), device)
        seed = int(jax.random.randint(reset_key, (), 0, 2**31 - 1))
        self.envs = programs.base_env.host_vector_env(self.num_envs, seed)
        self.obs = self.envs.reset()
        self.carry, self.tail = jax.device_put(programs.initial(), device)
        self.done = np.ones(self.num_envs, bool)  # fresh episodes: a central server resets this actor's memory
        self.episode_return = np.zeros(self.num_envs, np.float32)
        self.episode_length = np.zeros(self.num_envs, np.int32)
        self.timesteps = 0

    def block(self, params, sequence: int):
        programs, spec, step = self.programs, self.programs.spec, self.programs.step
        like = programs.shapes(params)[0]
        empty = lambda x: np.empty(x.shape, x.dtype)  # noqa: E731 - fresh each block: the block may keep them
        rows = {name: jax.tree.map(empty, getattr(like, name)) for name in _HOST_ROWS}
        valid = None if like.valid is None else empty(like.valid)
        key = programs.block_key(self.key, np.int32(sequence))
        timesteps, extras = jax.device_put(np.int32(self.timesteps), self.device), []
        if self.server is not None:
            extras, self.block_version = jax.tree.map(empty, like.extras), None
        for t in range(self.num_steps):
            if self.server is None:
                action, self.carry, step_extras = step(
                    params, self.obs, self.carry, key, self.times[t], self.actor, timesteps, self.done
                )
                action = np.asarray(action)
                extras.append(step_extras)
            else:
                action, step_extras, version = self.server.act(self.index, self.obs, self.done, self.timesteps)
                _put(extras, t, step_extras)
                self.block_version = version if self.block_version is None else min(self.block_version, version)
            env_action = np.clip(action, spec.action_low, spec.action_high) if spec.continuous else action
            obs, reward, terminated, truncated, final_obs, step_valid = self.envs.step(env_action)
            self.done = done = terminated | truncated
            self.episode_return += reward
            self.episode_length += 1 if step_valid is None else step_valid
            _put(rows["obs"], t, self.obs)
            _put(rows["next_obs"], t, final_obs)
            rows["action"][t], rows["reward"][t] = action, reward
            rows["terminated"][t], rows["truncated"][t] = terminated, truncated
            rows["episode_return"][t] = np.where(done, self.episode_return, 0.0)
            rows["episode_length"][t] = np.where(done, self.episode_length, 0)
            if valid is not None:
                valid[t] = step_valid
            self.episode_return[done], self.episode_length[done] = 0.0, 0
            self.obs = obs
        self.timesteps += self.num_envs * self.num_steps
        finish = programs.finish_steps if self.server is None else programs.finish
        self.tail, block = finish(self.tail, {**rows, "valid": valid}, extras, params, key)
        return block

    def close(self) -> None:
        self.envs.close()


class _Stopped(Exception):
    """The run stopped while an actor waited for the inference server."""


class _Request:
    """One actor's observations waiting for the server's answer."""

    def __init__(self, obs, done, timesteps: int):
        self.obs, self.done, self.timesteps = obs, done, timesteps
        self.answered = threading.Event()
        self.answer = None


class InferenceServer:
    """SEED RL's central inference (Espeholt et al., 2020, arXiv:1910.06591): actors only
    step their envs and send the observations; one compiled call on ``device`` answers
    every actor that asked, acting with the newest published params. Its thread waits
    until every running actor has asked, or ``inference_wait`` seconds after the first
    did, then calls the algorithm's policy of each actor under ``vmap`` over actors
    (:meth:`ActorPrograms.batched_step`): the policy's memory stays on the server, one
    slot per actor, reset where an actor's envs start an episode (a restarted actor's
    all of them). Its randomness is ``unsafe_rbg`` keys, as a host actor's.

    Args:
      programs: the actors' :class:`ActorPrograms`.
      latest: ``latest() -> (version, params)``, the newest published params.
      device: where the policy runs (the learner's first device).
      key: the server's randomness.
      stop: set when the run stops; the server's thread then ends.
      wait: ``ActorOptions.inference_wait``.
    """

    def __init__(self, programs: ActorPrograms, latest, device, key: jax.Array, stop: threading.Event, wait=0.002):
        self.programs, self._latest, self._device, self._stop, self._wait = programs, latest, device, stop, wait
        self._key = jax.device_put(programs.block_key(jax.random.fold_in(key, 1 << 30), np.int32(0)), device)
        batch = (programs.num_actors, programs.config.num_envs)
        self._obs_like = jax.eval_shape(lambda: programs.spec.zeros(batch))
        self._condition = threading.Condition()
        self._requests: dict[int, _Request] = {}
        self.calls, self.answers, self.error = 0, 0, None
        self._params = (None, None)  # (version, params on the server's device)
        self.thread = threading.Thread(target=self._serve, name="jaxrl-inference", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def act(self, actor: int, obs, done: np.ndarray, timesteps: int):
        """``(action, extras, version)`` for actor ``actor``'s ``obs`` (NumPy, leaves
        ``[num_envs, ...]``), its envs' ``done`` flags from the step before and its env
        steps so far: NumPy arrays, and the params' version that chose them."""
        request = _Request(obs, done, timesteps)
        with self._condition:
            self._requests[actor] = request
            self._condition.notify_all()
        while not request.answered.wait(0.05):
            if self._stop.is_set():
                raise _Stopped
        return request.answer

    def _serve(self) -> None:
        programs = self.programs
        num_actors = programs.num_actors
        try:
            carry = jax.device_put(programs.initial_carries(), self._device)
            while True:
                with self._condition:
                    while not self._requests and not self._stop.is_set():
                        self._condition.wait(0.05)
                    deadline = time.monotonic() + self._wait
                    while len(self._requests) < num_actors and not self._stop.is_set():
                        if not self._condition.wait(max(0.0, deadline - time.monotonic())):
                            break
                    if self._stop.is_set():
                        return
                    requests, self._requests = self._requests, {}
                carry = self._answer(requests, carry)
        except Exception as error:  # noqa: BLE001 - the learner raises it (Pipeline.get)
            self.error = error
            self._stop.set()

    def _answer(self, requests: dict, carry):
        programs, num_actors = self.programs, self.programs.num_actors
        num_envs = programs.config.num_envs
        obs = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), self._obs_like)
        present = np.zeros(num_actors, bool)
        done = np.zeros((num_actors, num_envs), bool)
        timesteps = np.zeros(num_actors, np.int32)
        for actor, request in requests.items():
            _put(obs, actor, request.obs)
            present[actor], done[actor], timesteps[actor] = True, request.done, request.timesteps
        version, params = self._latest()
        if version != self._params[0]:  # the learner's params may span several devices
            self._params = (version, jax.device_put(params, self._device))
        params = self._params[1]
        action, carry, extras = programs.batched_step(
            params, obs, carry, self._key, np.int32(self.calls), present, done, timesteps
        )
        action, extras = jax.device_get((action, extras))
        self.calls += 1
        self.answers += len(requests)
        for actor, request in requests.items():
            request.answer = (action[actor], jax.tree.map(lambda x: x[actor], extras), version)
            request.answered.set()
        return carry


# The trajectory's fields a host actor fills from its env, step by step.
_HOST_ROWS = (
    "obs",
    "action",
    "reward",
    "terminated",
    "truncated",
    "next_obs",
    "episode_return",
    "episode_length",
)


def _put(rows, t: int, value) -> None:
    """``rows[t] = value`` for each leaf of a pytree of ``[T, ...]`` arrays."""
    if isinstance(rows, np.ndarray):
        rows[t] = value
    else:
        jax.tree.map(lambda row, x: row.__setitem__(t, x), rows, value)


class _LearnerPrograms:
    """The learner's compiled programs for one algorithm and config: its init, its
    iteration on a block (compiled once per block layout: ``learn`` with the iteration's
    key, and the params it publishes, copies since the next iteration donates the
    state while actors still read them), the first params it publishes and the
    evaluation."""

    def __init__(self, record, config):
        parts = record.actor_learner

        def published(state):
            return jax.tree.map(jnp.copy, parts.published(state))

        def iteration(state, block, run_key, number):
            state, metrics = parts.learn(state, block, learner_keys(run_key, number)[0], config)
            return state, metrics, published(state)

        self.init = jax.jit(functools.partial(parts.learner_init, config=config))
        self.iteration = jax.jit(iteration, donate_argnums=0)
        self.publish = jax.jit(published)
        self.evaluate = jax.jit(functools.partial(record.evaluate, config=config))
        self._compiled = {}

    def compiled_iteration(self, state, block, run_key):
        """``iteration`` compiled for arguments like these (compiling now, not at the first call)."""
        leaves, structure = jax.tree.flatten((state, block))
        signature = (str(structure), tuple((x.shape, str(x.dtype), x.sharding) for x in leaves))
        if signature not in self._compiled:
            self._compiled[signature] = self.iteration.lower(state, block, run_key, np.int32(0)).compile()
        return self._compiled[signature]


def learner_keys(run_key: jax.Array, iteration) -> jax.Array:
    """``[update_key, eval_key]`` of learner iteration ``iteration``."""
    return jax.random.split(jax.random.fold_in(run_key, iteration))


@dataclasses.dataclass
class ActorLearnerResult(runner.RunResult):
    """:class:`jaxrl.workflow.runner.RunResult` (one lane) and the pipeline's record:
    ``lags``, every learner update's policy lag (``[iterations]``); ``actor_steps``, the
    env steps each actor sent; ``restarts`` and ``failures``, the actors' restarts and
    their errors."""

    lags: np.ndarray = None
    actor_steps: list = None
    restarts: int = 0
    failures: list = None


def _learner_placement(options: ActorOptions):
    """``(state_sharding, block_placer)`` on the first ``learner_devices`` devices."""
    devices = jax.devices()[: options.learner_devices]
    if len(devices) == 1:
        return devices[0], lambda block: jax.device_put(block, devices[0])
    mesh = Mesh(np.array(devices), ("learner",))
    replicated = NamedSharding(mesh, PartitionSpec())
    split = NamedSharding(mesh, PartitionSpec(None, "learner"))

    def place(block):  # the env axis (1) of [T, N, ...] leaves split over the devices
        return jax.tree.map(
            lambda x: jax.device_put(x, split if x.ndim >= 2 and x.shape[1] % len(devices) == 0 else replicated),
            block,
        )

    return replicated, place


def run(
    algorithm,
    config,
    *,
    actors: int | ActorOptions = 2,
    seed: int = 0,
    chunk_iterations: int | None = None,
    metrics_every: int = 1,
    target=None,
    options: RunOptions = DEFAULTS,
) -> ActorLearnerResult:
    """Train ``algorithm`` (a name, record or module with ``actor_learner`` parts: IMPALA,
    Ape-X DQN) on ``config`` with actors apart from the learner.

    Args:
      actors: the number of actors, or :class:`ActorOptions`.
      seed: the run's randomness (the learner's init and updates, the actors' envs).
      chunk_iterations / metrics_every / target / options: as
        :func:`jaxrl.workflow.runner.run`'s (a chunk is learner iterations, one block
        each). ``options.mesh`` is not used: :class:`ActorOptions` places the devices.
    """
    from jaxrl import algorithms

    record = algorithms.resolve(algorithm)
    if record.actor_learner is None:
        having = [n for n in algorithms.BUILT_IN if algorithms.get(n).actor_learner is not None]
        raise ValueError(
            f"{record.name} has no form with actors apart from its learner; algorithms that have: {', '.join(having)}"
        )
    actor_options = actors if isinstance(actors, ActorOptions) else ActorOptions(actors=actors)
    if options.mesh is not None:
        raise ValueError(
            "options.mesh is for lanes of one program; an actor-learner run places its devices "
            "with ActorOptions.learner_devices"
        )
    parts = record.actor_learner
    config = parts.prepare(config)
    num_iterations = parts.num_iterations(config)
    block_steps = parts.block_steps(config)
    if chunk_iterations is None:
        chunk_iterations = runner.default_chunk_iterations(num_iterations)
    if not isinstance(chunk_iterations, int) or not 1 <= chunk_iterations <= num_iterations:
        raise ValueError(f"chunk_iterations must be an int in [1, {num_iterations}], got {chunk_iterations!r}")
    init_key, run_key, actor_key = jax.random.split(jax.random.key(seed), 3)
    state_placement, place_block = _learner_placement(actor_options)
    programs = _cached(_LearnerPrograms, record, config)
    publish, evaluate = programs.publish, programs.evaluate
    num_evals = getattr(config, "num_evals", 0)
    pipeline = Pipeline(record, config, actor_key, actor_options)
    lags: list[int] = []
    compiled = {}
    window = []  # when the last chunk ended, the actors' env steps and idle seconds then

    def init():
        return {"state": jax.device_put(programs.init(init_key), state_placement)}

    def chunk(tree, length):
        if "learn" not in compiled:  # compiled here, so that the run's compile time is apart from its run time
            block = place_block(jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), block_shape(tree)))
            compiled["learn"] = programs.compiled_iteration(tree["state"], block, run_key)

        def call(tree, start):
            start = int(start)
            state = tree["state"]
            if not pipeline.started:  # the first chunk, or the first after a resume
                pipeline.start(publish(state), version=start)
            # The actors' rates are over the time since the chunk before ended (they go on
            # while the runner logs and saves); the learner's over its own loop.
            before = tuple(window) or pipeline.counts()  # a copy: window changes below
            learner_begin = time.perf_counter()
            learned, evaluations, pipeline_rows = [], {}, collections.defaultdict(list)
            for iteration in range(start, start + length):
                waited = time.perf_counter()
                block, occupancy = pipeline.get()
                waited = time.perf_counter() - waited
                lag = pipeline.version - block.version
                lags.append(lag)
                state, metrics, published = compiled["learn"](
                    state, place_block(block.data), run_key, np.int32(iteration)
                )
                pipeline.publish(published)
                learned.append(metrics)
                if num_evals and loop.is_checkpoint(iteration, num_iterations, num_evals):
                    result = evaluate(state.params, learner_keys(run_key, iteration)[1])
                    evaluations[iteration - start] = (jnp.mean(result.returns), jnp.mean(result.lengths))
                for name, value in (
                    ("policy_lag", lag),
                    ("queue_occupancy", occupancy),
                    ("learner_wait_seconds", waited),
                ):
                    pipeline_rows[name].append(value)
            learned, evaluations = jax.device_get((learned, evaluations))  # one fetch per chunk
            rows = {name: np.stack([metrics[name] for metrics in learned]) for name in learned[0]}
            rows["eval_return"], rows["eval_length"] = np.full((2, length), np.nan, np.float32)
            for row, (eval_return, eval_length) in evaluations.items():
                rows["eval_return"][row], rows["eval_length"][row] = eval_return, eval_length
            rows.update({name: np.asarray(values) for name, values in pipeline_rows.items()})
            window[:] = after = pipeline.counts()
            actor_seconds, steps, idle = (b - a for a, b in zip(before, after))
            seconds = after[0] - learner_begin
            per_chunk = {
                "actor_steps_per_second": steps / actor_seconds,
                "learner_updates_per_second": length / seconds,
                "actor_idle_fraction": idle / (actor_options.actors * actor_seconds),
                "actor_restarts": pipeline.restarts,
            }
            rows.update({name: np.full(length, value, np.float64) for name, value in per_chunk.items()})
            return {"state": state}, {name: values[None] for name, values in rows.items()}

        return call

    def block_shape(tree):
        actors = _cached(ActorPrograms, parts, config, actor_options.actors)
        return actors.shapes(jax.eval_shape(parts.published, tree["state"]))[1]

    def metric_names(tree, length):
        learned = jax.eval_shape(lambda s, b: parts.learn(s, b, run_key, config)[1], tree["state"], block_shape(tree))
        return set(learned) | {"eval_return", "eval_length"} | set(PIPELINE_METRICS)

    driven = runner.Driven(
        name=record.name,
        init=init,
        chunk=chunk,
        metric_names=metric_names,
        num_iterations=num_iterations,
        counter="timesteps",
        budget=num_iterations * block_steps,
    )
    meta = rundir.meta(
        record.name,
        config,
        seeds=1,
        seed=seed,
        chunk_iterations=chunk_iterations,
        metrics_every=metrics_every,
        actors=dataclasses.asdict(actor_options),
    )
    with pipeline:
        result = runner.drive(
            driven,
            meta=meta,
            chunk_iterations=chunk_iterations,
            metrics_every=metrics_every,
            target=target,
            options=options,
        )
    result.state = result.state["state"]
    return ActorLearnerResult(
        **{field.name: getattr(result, field.name) for field in dataclasses.fields(runner.RunResult)},
        lags=np.asarray(lags, np.int64),
        actor_steps=list(pipeline.steps),
        restarts=pipeline.restarts,
        failures=list(pipeline.failures),
    )
