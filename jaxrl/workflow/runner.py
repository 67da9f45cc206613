"""Chunked training: an algorithm's compiled iterations run in chunks, with logging,
checkpoints and early stopping between chunks.

``train`` fuses a whole run into one program; :func:`run` compiles one chunk of
``chunk_iterations`` iterations (for all seeds at once, the state donated from chunk to
chunk) and calls it until the run is done. Between chunks it hands the chunk's metrics
to loggers, saves a checkpoint, and stops when every seed has reached a target.
Iteration ``i`` draws its randomness from ``fold_in(run_key, i)`` whatever the chunking,
so a run resumed from a checkpoint continues exactly as the uninterrupted run would::

    from jaxrl.workflow import runner
    from jaxrl.workflow.options import RunOptions
    from jaxrl.algorithms import ppo

    options = RunOptions(logdir="runs/ppo-cartpole", checkpoint_every=1, progress=True)
    result = runner.run("ppo", ppo.Config(), seeds=4, target=475.0, options=options)
    result.metrics["eval_return"]          # [seeds, rows]

    # after a crash or a stop: the same call with RunOptions(..., resume=True) carries on
    # from the latest checkpoint, with results identical to a run that never stopped.

A SIGTERM or SIGINT (Ctrl-C) while the run trains stops it after the chunk in flight,
with a checkpoint of it (:mod:`jaxrl.workflow.stopping`); a resume skips checkpoints
damaged since they were written (:mod:`jaxrl.workflow.checkpoint`).

A single run, a sweep (settings x seeds, :mod:`jaxrl.workflow.sweep`) and a population
(:mod:`jaxrl.workflow.pbt`) are all lanes of one program that :func:`drive` runs in
chunks; with ``RunOptions(mesh=...)`` the lanes are split over the mesh's devices (and
hosts), each device running its share (:mod:`jaxrl.workflow.distributed`).

The runner knows no algorithm: everything it needs (iterations, the progress counter,
input data, whether the state can be checkpointed whole) comes from the algorithm's
:class:`jaxrl.loop.Program`; the run directory's bookkeeping is :mod:`jaxrl.workflow.rundir`'s
and the metric rows' :mod:`jaxrl.workflow.metrics`'.
"""

from __future__ import annotations

import dataclasses
import functools
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl import loop, prng
from jaxrl.config import is_part, replace_paths, swept_config
from jaxrl.workflow import distributed, metrics, program_cache, rundir, stopping
from jaxrl.workflow import logging as jaxrl_logging
from jaxrl.workflow.options import DEFAULTS, RunOptions, with_keywords

if TYPE_CHECKING:  # importing the algorithms starts JAX's backends (see jaxrl/__init__.py)
    from jaxrl.algorithms import Algorithm


@dataclasses.dataclass
class RunResult:
    """What :func:`run` returns.

    Attributes:
      state: the final training state, leaves ``[seeds, ...]``.
      metrics: ``{name: [seeds, rows]}`` scalar metrics, each row aggregating
        ``metrics_every`` iterations (see :func:`jaxrl.workflow.metrics.aggregate`).
      iterations: ``[rows]`` iterations completed at the end of each row.
      completed: iterations run in total (less than the program's ``num_iterations``
        when the run stopped early).
      stopped_early: every seed reached the target.
      compile_seconds / run_seconds: time spent compiling, and running chunks.
    """

    state: Any
    metrics: dict
    iterations: np.ndarray
    completed: int
    stopped_early: bool
    compile_seconds: float
    run_seconds: float


def run(
    algorithm,
    config,
    *,
    seeds: int = 1,
    seed: int = 0,
    settings: dict | None = None,
    dataset=None,
    chunk_iterations: int | None = None,
    metrics_every: int = 1,
    target: float | metrics.Target | None = None,
    options: RunOptions = DEFAULTS,
    **deprecated,
) -> RunResult:
    """Train ``seeds`` seeds of ``algorithm`` (a name, record or module) on ``config`` in chunks.

    Args:
      seeds / seed: seed ``i`` trains from ``jax.random.split(jax.random.key(seed),
        seeds)[i]``, so its results equal ``train`` with that key.
      settings: ``{field: [C] values}`` of traced fields (:func:`jaxrl.workflow.sweep.grid`):
        train every (setting, seed) pair, ``C * seeds`` lanes, lane ``l`` being setting
        ``l // seeds`` and seed ``l % seeds``; results' leading axis is the lane, and
        logged rows carry each lane's ``setting`` index and values (``sweep_<field>``).
      dataset: the program's input data, instead of what ``Program.inputs`` reads
        (behaviour cloning's dataset, leaves ``[S, ...]``).
      chunk_iterations: iterations per compiled chunk (default: about 1/20 of the run).
      metrics_every: iterations aggregated into one metrics row; must divide
        ``chunk_iterations``. Only the rows are kept, on the host.
      target: a :class:`jaxrl.workflow.metrics.Target` (or a number: the evaluation return to
        reach); the run stops after the chunk in which every lane reached it.
      options: the run directory, loggers, checkpoints, resume, progress bar and the
        mesh the lanes are split over (:class:`jaxrl.workflow.options.RunOptions`).
        The same keywords given to ``run`` itself still work, with a DeprecationWarning.
    """
    options = with_keywords(options, deprecated, "runner.run")
    name, module = _module(algorithm)
    program = module.program(config)
    inputs = program.inputs() if dataset is None else dataset
    chunk_iterations = _check_arguments(name, program, dataset, seeds, chunk_iterations)
    if options.resume and not (program.resumable or program.restart_envs):
        raise ValueError(
            f"{name}'s run cannot be resumed: part of its state lives on the host (a host env), "
            f"outside the checkpoint, which holds the agent (params, optimiser) only"
        )
    mesh = options.mesh
    if mesh is not None and not program.resumable:
        raise ValueError(f"{name} steps host envs, which live in this process: its lanes cannot span a mesh")
    # Keys as their raw data, indexed on the host: a gather of typed keys would be one more compilation.
    key_data = np.asarray(jax.random.key_data(jax.random.split(jax.random.key(seed), seeds)))
    lane_values, columns, run_meta = {}, None, {}
    if settings is not None:
        swept = swept_config(config, settings)  # checks the fields and values
        num_settings = len(next(iter(settings.values())))
        setting_of_lane = np.repeat(np.arange(num_settings), seeds)
        lane_values = {field: np.asarray(getattr(swept, field))[setting_of_lane] for field in settings}
        key_data = key_data[np.tile(np.arange(seeds), num_settings)]
        columns = {
            "setting": setting_of_lane,
            **{f"sweep_{k}": np.asarray(v)[setting_of_lane] for k, v in settings.items()},
        }
        run_meta = {"settings": {k: np.asarray(v).tolist() for k, v in settings.items()}}
    if not program.resumable:  # host envs: say what a resume does with them
        run_meta["host_envs"] = HOST_ENVS_ON_RESUME
    distributed.check_lanes(len(key_data), mesh, f"{name}'s {'settings x ' if settings else ''}seeds")
    meta = rundir.meta(
        name,
        config,
        seeds=seeds,
        seed=seed,
        chunk_iterations=chunk_iterations,
        metrics_every=metrics_every,
        **run_meta,
    )
    programs = _programs(module, config, tuple(lane_values), mesh)
    key_data, lane_values, inputs = distributed.place((key_data, lane_values, inputs), mesh)

    def init():
        state, run_keys = programs.init(key_data, lane_values, inputs)
        return {"state": state, "run_keys": run_keys}

    def chunk(tree, length):
        compiled = programs.chunk(tree["state"], tree["run_keys"], lane_values, length)

        def call(tree, start):
            state, chunk_metrics = compiled(tree["state"], tree["run_keys"], lane_values, start)
            return {"state": state, "run_keys": tree["run_keys"]}, chunk_metrics

        return call

    def restart_envs(tree, completed):
        # Keys no iteration uses: iteration i draws from fold_in(run_key, i), i < num_iterations.
        keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(tree["run_keys"], program.num_iterations + completed)
        return {**tree, "state": programs.restart_envs(tree["state"], keys)}

    driven = Driven(
        name=name,
        init=init,
        chunk=chunk,
        metric_names=lambda tree, length: programs.metric_names(tree["state"], tree["run_keys"], lane_values, length),
        num_iterations=program.num_iterations,
        counter=program.counter,
        budget=program.budget,
        host_envs=not program.resumable,
        restart_envs=restart_envs if program.restart_envs else None,
    )
    result = drive(
        driven,
        meta=meta,
        chunk_iterations=chunk_iterations,
        metrics_every=metrics_every,
        target=target,
        columns=columns,
        options=options,
    )
    result.state = result.state["state"]
    return result


class Driven(NamedTuple):
    """A computation the host runs in chunks of iterations (what :func:`drive` needs).

    Attributes:
      name: what to call it in messages (the algorithm's name).
      init: ``init() -> tree``, its whole state before the first iteration: the
        pytree checkpoints hold (and the template a checkpoint is restored into).
      chunk: ``chunk(tree, length)`` compiles (or fetches) ``length`` iterations:
        ``call(tree, start) -> (tree, metrics {name: [L, length]})``, ``L`` lanes.
      metric_names: ``metric_names(tree, length)``, the chunk's metrics, known without
        compiling (to check a target before training).
      num_iterations / counter / budget: as :class:`jaxrl.loop.Program`'s.
      host_envs: ``tree`` holds env states of host envs (the Gymnasium bridge), which
        checkpoints pickle where they can (:func:`jaxrl.envs.gymnasium.snapshot`).
      restart_envs: ``restart_envs(tree, completed) -> tree`` with fresh episodes, for
        a resume whose host envs were not saved (None: such a resume is an error).
    """

    name: str
    init: Callable
    chunk: Callable
    metric_names: Callable
    num_iterations: int
    counter: str
    budget: int
    host_envs: bool = False
    restart_envs: Callable | None = None


def drive(
    driven: Driven,
    *,
    meta: dict,
    chunk_iterations: int,
    metrics_every: int = 1,
    target: float | metrics.Target | None = None,
    columns: dict | None = None,
    options: RunOptions = DEFAULTS,
    **deprecated,
) -> RunResult:
    """Run ``driven`` to its end in chunks of ``chunk_iterations``, with the run
    directory, loggers, checkpoints, early stop and progress bar of :func:`run` (whose
    arguments these are). ``columns``: ``{name: [L]}`` values written beside every
    lane's logged rows (a sweep's settings), not kept in the history. ``driven``'s
    tree lives on ``options.mesh`` already (its ``init`` put it there); ``drive`` passes
    each chunk its start there too. The result's ``state`` is the final ``tree``."""
    options = with_keywords(options, deprecated, "runner.drive")
    target = metrics.Target(target) if isinstance(target, (int, float)) else target
    if not isinstance(metrics_every, int) or metrics_every < 1 or chunk_iterations % metrics_every:
        raise ValueError(
            f"metrics_every must be an int >= 1 dividing chunk_iterations={chunk_iterations}, got {metrics_every!r}"
        )
    resume, logdir = options.resume, options.logdir
    loggers = jaxrl_logging.make_loggers(options.loggers, logdir, meta=meta)
    directory = None
    if logdir is not None:
        directory = rundir.RunDir(
            logdir,
            meta,
            resume=resume,
            checkpoint_every=options.checkpoint_every,
            keep_checkpoints=options.keep_checkpoints,
        )
    start = time.perf_counter()
    tree, completed, history = driven.init(), 0, None
    restored = directory.restore(tree) if directory else None
    if restored is not None:
        tree, completed, history, host_envs = restored
        tree = _reconnect_host_envs(driven, tree, host_envs, completed)
    counter = driven.counter
    counted = bool(history) and counter in history
    done = int(np.max(history[counter][:, -1])) if counted else 0
    if resume:  # rows logged after the restored point (or all, if none) are written again
        for logger in loggers:
            logger.truncate(completed, done if counted else completed)
    if target is not None and completed < driven.num_iterations:
        _check_target(driven.name, target, driven.metric_names(tree, chunk_iterations))
    compile_seconds, run_seconds = time.perf_counter() - start, 0.0

    def save(tree, rows):
        latest_eval = metrics.latest_finite(rows.get("eval_return", [[np.nan]]))
        directory.save(completed, tree, history, float(np.mean(latest_eval)), _host_snapshot(driven, tree))

    keeps_checkpoints = directory is not None and directory.checkpoint_every is not None
    stopped_early, chunks_run, saved_at, rows = False, 0, completed, {}
    signals = stopping.StopSignals()
    try:
        with (
            signals,
            jaxrl_logging.progress_bar(
                driven.budget,
                disable=not options.progress,
                counter=counter,
                initial=done,
                unit=counter.removesuffix("s"),
            ) as show_progress,
        ):
            while completed < driven.num_iterations and not stopped_early and signals.received is None:
                length = min(chunk_iterations, driven.num_iterations - completed)
                start = time.perf_counter()
                chunk = driven.chunk(tree, length)
                compile_seconds += time.perf_counter() - start
                signals.agree()
                if signals.received is not None:  # it came while compiling: nothing more has run
                    break
                start = time.perf_counter()
                tree, chunk_metrics = chunk(tree, distributed.place(jnp.int32(completed), options.mesh))
                rows = _rows(distributed.to_host(chunk_metrics), completed, metrics_every)
                run_seconds += time.perf_counter() - start
                completed, chunks_run = completed + length, chunks_run + 1
                history = (
                    rows if history is None else {k: np.concatenate([history[k], v], axis=1) for k, v in rows.items()}
                )
                logged = {k: v for k, v in rows.items() if k != "iteration"}
                lanes_rows = rows["iteration"].shape
                logged.update(
                    {k: np.broadcast_to(np.asarray(v)[:, None], lanes_rows) for k, v in (columns or {}).items()}
                )
                for logger in loggers:
                    logger.write(rows["iteration"][0], logged)
                if counter in rows:
                    show_progress(
                        {
                            counter: rows[counter][:, -1],
                            "episode_return": metrics.latest_finite(rows.get("episode_return", [[np.nan]])),
                        }
                    )
                stopped_early = target is not None and target.reached(history)
                signals.agree()
                last = stopped_early or completed >= driven.num_iterations or signals.received is not None
                if directory and directory.wants_checkpoint(chunks_run, last):
                    save(tree, rows)
                    saved_at = completed
        if signals.received is not None:  # even after the last chunk: the caller must stop too
            if keeps_checkpoints and saved_at < completed:  # it came while compiling, after a chunk not saved
                save(tree, rows)
            checkpoint_dir = directory.checkpoints.directory if keeps_checkpoints else None
            raise signals.stop(driven.name, completed, driven.num_iterations, checkpoint_dir)
    finally:
        for logger in loggers:
            logger.close()
        if directory:
            directory.close()
    history = history or {}
    iterations = history.pop("iteration", np.zeros((1, 0), np.int64))[0]
    return RunResult(tree, history, iterations, completed, stopped_early, compile_seconds, run_seconds)


HOST_ENVS_ON_RESUME = (
    "pickled with each checkpoint and restored on resume where they can be (a sync vector env of picklable "
    "envs); otherwise restarted with fresh episodes on resume"
)


def _host_snapshot(driven: Driven, tree) -> bytes | None:
    if not driven.host_envs:
        return None
    from jaxrl.envs import gymnasium as bridge

    return bridge.snapshot(tree)


def _reconnect_host_envs(driven: Driven, tree, host_envs: bytes | None, completed: int):
    """A restored ``tree``'s host env states, whose envs lived in the saving process:
    the pickled envs rebuilt, or fresh episodes (with a warning) where none were saved."""
    if not driven.host_envs:
        return tree
    from jaxrl.envs import gymnasium as bridge

    if host_envs is not None:
        return bridge.restore(tree, host_envs)
    if driven.restart_envs is None:
        raise ValueError(f"{driven.name}'s checkpoint holds no host envs to continue from, and it cannot restart them")
    warnings.warn(
        f"{driven.name}: the host envs could not be saved with the checkpoint (envpool's, an async vector env's, "
        "or an env that cannot be pickled): the resumed run continues with fresh episodes",
        stacklevel=3,
    )
    return driven.restart_envs(tree, completed)


def _rows(chunk_metrics: dict, completed: int, every: int) -> dict:
    """A chunk's metrics ``[S, length]`` as rows of ``every`` iterations, with the
    ``iteration`` each row ends at."""
    rows = metrics.aggregate(chunk_metrics, every)
    length = next(iter(chunk_metrics.values())).shape[1]
    ends = np.minimum(np.arange(every, length + every, every), length)
    rows["iteration"] = np.broadcast_to(completed + ends, (next(iter(rows.values())).shape[0], len(ends)))
    return rows


def default_chunk_iterations(num_iterations: int, chunks: int = 20) -> int:
    """About ``num_iterations / chunks``, preferring a divisor of ``num_iterations`` (a
    last, shorter chunk costs one more compilation)."""
    target = max(1, round(num_iterations / chunks))
    divisors = [d for d in range(max(1, target // 2), 2 * target + 1) if num_iterations % d == 0]
    return min(divisors, key=lambda d: abs(d - target)) if divisors else target


def _module(algorithm) -> tuple[str, Algorithm]:
    """``(name, record)`` of an algorithm given by name, record or module."""
    from jaxrl import algorithms

    record = algorithms.resolve(algorithm)
    return record.name, record


def _check_arguments(name, program: loop.Program, dataset, seeds, chunk_iterations) -> int:
    """ValueErrors for arguments that cannot work, before anything is written or
    compiled; returns ``chunk_iterations`` (its default filled in)."""
    if dataset is not None and program.inputs is loop.no_inputs:
        raise TypeError(f"{name} learns from its env alone: pass dataset only to algorithms that learn from one")
    if not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"seeds must be an int >= 1, got {seeds!r}")
    num_iterations = program.num_iterations
    chunk_iterations = default_chunk_iterations(num_iterations) if chunk_iterations is None else chunk_iterations
    if not isinstance(chunk_iterations, int) or not 1 <= chunk_iterations <= num_iterations:
        raise ValueError(
            f"chunk_iterations must be an int in [1, {num_iterations}] (the run's iterations), got {chunk_iterations!r}"
        )
    return chunk_iterations


def _check_target(name: str, target: metrics.Target, metric_names) -> None:
    for metric in target.needs:
        if metric not in metric_names:
            raise ValueError(
                f"target metric {metric!r} is not a metric of {name}; its metrics: {', '.join(sorted(metric_names))}"
            )


class _Programs:
    """The runner's compiled programs for one config, shared by every run of it. With
    JAX's persistent cache on, their traces are kept on disk too (:mod:`jaxrl.workflow.program_cache`,
    under ``identity``), so a rerun in a fresh process skips tracing.

    ``swept`` names traced fields whose per-lane values (``{field: [L]}``) the programs
    take as an argument (a sweep's settings); the other fields are ``config``'s. With a
    ``mesh``, the lanes are split over its devices (:func:`jaxrl.workflow.distributed.lanes_split`)."""

    def __init__(self, module: Algorithm, config, swept: tuple[str, ...], identity: str | None, mesh=None):
        # The runner shows progress between chunks: its programs leave out in-program
        # reports, host callbacks that neither JAX's cache nor jaxrl's can keep.
        def lane_program(values: dict) -> loop.Program:
            return module.program(replace_paths(config, values) if values else config)._replace(num_reports=0)

        def init_all(key_data, values, inputs):
            def one(key, values):
                init_key, run_key = jax.random.split(prng.straight(key))  # as loop.train splits it
                # The run key kept (and checkpointed) is of the default type; ``loop.iterate`` re-types it.
                return lane_program(values).init(init_key, inputs), jax.random.wrap_key_data(
                    jax.random.key_data(run_key)
                )

            return distributed.constrain_lanes(jax.vmap(one)(jax.random.wrap_key_data(key_data), values), mesh)

        def chunk(state, run_keys, values, start, length):
            def lanes(state, run_keys, values, start):
                iterate = lambda s, k, v: loop.iterate(lane_program(v), s, k, start, length)  # noqa: E731
                return jax.vmap(iterate)(state, run_keys, values)

            return distributed.lanes_split(lanes, mesh)(state, run_keys, values, start)

        self._init = jax.jit(init_all)
        # Held here, like the chunks: a host env a program reset lives as long as the program.
        self._restart_envs = jax.jit(jax.vmap(lambda state, key: lane_program({}).restart_envs(state, key)))
        self._chunk = jax.jit(chunk, static_argnums=4, donate_argnums=0)
        # The disk cache keys on shapes, not shardings: programs over a mesh are traced every time.
        self._identity = identity and mesh is None and (f"{identity} swept {swept!r}" if swept else identity)
        self._mesh = mesh
        self._prepared = {}  # signature -> (outputs' ShapeDtypeStructs, compile)
        self._compiled = {}

    def _prepare(self, name: str, jitted, args: tuple, static: tuple = (), donate_argnums=()):
        signature = (name, *static, jax.tree.structure(args), _shapes(args))
        if signature not in self._prepared:
            self._prepared[signature] = program_cache.prepare(
                jitted,
                args,
                static,
                identity=self._identity and f"{name} {self._identity}",
                donate_argnums=donate_argnums,
            )
        return signature, self._prepared[signature]

    def _executable(self, signature, compile_program):
        if signature not in self._compiled:
            self._compiled[signature] = compile_program()
        return self._compiled[signature]

    def init(self, key_data, values, inputs):
        """``(state, run_keys)``, leaves ``[L, ...]``, for the raw data of keys ``[L]``
        (``jax.random.key_data``) and swept ``values`` ``{field: [L]}``."""
        signature, (_, compile_program) = self._prepare("init", self._init, (key_data, values, inputs))
        return self._executable(signature, compile_program)(key_data, values, inputs)

    def restart_envs(self, state, keys):
        """``state`` (leaves ``[L, ...]``) with fresh episodes from ``keys`` ``[L]``
        (:attr:`jaxrl.loop.Program.restart_envs`)."""
        return self._restart_envs(state, keys)

    def chunk(self, state, run_keys, values, length: int):
        """The compiled chunk of ``length`` iterations for states shaped like ``state``:
        ``(state, run_keys, values, start) -> (state, metrics [L, length])``."""
        signature, (_, compile_program) = self._prepare_chunk(state, run_keys, values, length)
        return self._executable(signature, compile_program)

    def metric_names(self, state, run_keys, values, length: int):
        """The chunk's metrics (traced or loaded, not compiled)."""
        return self._prepare_chunk(state, run_keys, values, length)[1][0][1]

    def _prepare_chunk(self, state, run_keys, values, length):
        # Abstract inputs: arrays a computation made are committed to their device,
        # which program_cache does not key on; over a mesh, their shardings are the program's.
        def abstract(x):
            sharding = x.sharding if self._mesh is not None else None
            return jax.ShapeDtypeStruct(x.shape, x.dtype, weak_type=getattr(x, "weak_type", False), sharding=sharding)

        template = jax.tree.map(abstract, (state, run_keys, values))
        start = distributed.place(jnp.int32(0), self._mesh)
        return self._prepare("chunk", self._chunk, (*template, start), (length,), donate_argnums=(0,))


@functools.lru_cache(maxsize=16)
def _cached_programs(module: Algorithm, config, swept: tuple[str, ...] = (), mesh=None) -> _Programs:
    return _Programs(module, config, swept, _program_identity(module, config), mesh)


def _programs(module: Algorithm, config, swept: tuple[str, ...] = (), mesh=None) -> _Programs:
    try:
        return _cached_programs(module, config, swept, mesh)
    except TypeError:  # an unhashable config (e.g. arrays as fields): no sharing, no disk cache
        return _Programs(module, config, swept, None, mesh)


def _program_identity(module: Algorithm, config) -> str | None:
    """A string that, with the inputs' types and jaxrl's source, determines the
    programs of ``module`` on ``config``: the algorithm, the config's class and every
    field. None where something outside jaxrl shapes the programs (the user's algorithm
    or config class) or a field is not plain data."""

    from jaxrl import algorithms

    def plain(value):
        if is_part(value):  # one of jaxrl's parts, its fields plain
            fields = dataclasses.fields(value)
            return type(value).__module__.startswith("jaxrl.") and all(plain(getattr(value, f.name)) for f in fields)
        if isinstance(value, (tuple, list)):
            return all(plain(v) for v in value)
        return value is None or isinstance(value, (str, int, float, bool))

    record = algorithms.resolve(module)
    config_class = type(config)
    built_in = record.name in algorithms.BUILT_IN and algorithms.get(record.name) is record
    if not (built_in and dataclasses.is_dataclass(config) and config_class.__module__.startswith("jaxrl.")):
        return None
    fields = [(field.name, getattr(config, field.name)) for field in dataclasses.fields(config)]
    if not all(plain(value) for _, value in fields):
        return None
    return f"{algorithms.BUILT_IN[record.name]} {config_class.__module__}.{config_class.__qualname__}{fields!r}"


def _shapes(tree) -> tuple:
    return tuple((leaf.shape, str(leaf.dtype)) for leaf in jax.tree.leaves(tree))
