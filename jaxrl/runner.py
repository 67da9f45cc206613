"""Chunked training: an algorithm's compiled iterations run in chunks, with logging,
checkpoints and early stopping between chunks.

``train`` fuses a whole run into one program; :func:`run` compiles one chunk of
``chunk_iterations`` iterations (for all seeds at once, the state donated from chunk to
chunk) and calls it until the run is done. Between chunks it hands the chunk's metrics
to loggers, saves a checkpoint, and stops when every seed has reached a target return.
Iteration ``i`` draws its randomness from ``fold_in(run_key, i)`` whatever the chunking,
so a run resumed from a checkpoint continues exactly as the uninterrupted run would.

    from jaxrl import runner
    from jaxrl.algorithms import ppo

    result = runner.run("ppo", ppo.Config(), seeds=4, logdir="runs/ppo-cartpole",
                        checkpoint_every=1, target_return=475.0, progress=True)
    result.metrics["eval_return"]          # [seeds, rows]

    # after a crash or a stop: the same call with resume=True carries on from the
    # latest checkpoint, with results identical to a run that never stopped.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import inspect
import json
import os
import time
from types import ModuleType
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl import envs
from jaxrl import logging as jaxrl_logging
from jaxrl import program_cache

LOGGER_NAMES = ("console", "csv", "jsonl", "tensorboard")


@dataclasses.dataclass
class RunResult:
    """What :func:`run` returns.

    Attributes:
      state: the final training state, leaves ``[seeds, ...]``.
      metrics: ``{name: [seeds, rows]}`` scalar metrics, each row aggregating
        ``metrics_every`` iterations (see :func:`aggregate`).
      iterations: ``[rows]`` iterations completed at the end of each row.
      completed: iterations run in total (less than the config's ``num_iterations``
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


def default_chunk_iterations(num_iterations: int, chunks: int = 20) -> int:
    """About ``num_iterations / chunks``, preferring a divisor of ``num_iterations`` (a
    last, shorter chunk costs one more compilation)."""
    target = max(1, round(num_iterations / chunks))
    divisors = [d for d in range(max(1, target // 2), 2 * target + 1) if num_iterations % d == 0]
    return min(divisors, key=lambda d: abs(d - target)) if divisors else target


EPISODE_METRICS = ("episode_return", "episode_length")  # means over the ``episodes`` finished


def aggregate(metrics: dict, every: int) -> dict:
    """Reduce each scalar metric ``[seeds, L]`` to ``[seeds, ceil(L / every)]`` rows.

    Counters (``timesteps``, ``updates``) keep a row's last value; ``episodes`` (the
    episodes finished in an iteration) is summed, and ``episode_return`` /
    ``episode_length`` are averaged over those episodes (weighted by ``episodes``), so a
    row holds the mean of the episodes that finished in it. Every other metric is the
    mean over the row's iterations, ignoring NaN (iterations where no evaluation ran),
    and NaN if all are. Non-scalar metrics are dropped.
    """
    rows = {}
    for name, values in metrics.items():
        values = np.asarray(values)
        if values.ndim != 2:
            continue
        length = values.shape[1]
        starts = np.arange(0, length, every)
        if name in jaxrl_logging.COUNTERS:
            rows[name] = values[:, np.minimum(starts + every, length) - 1]
            continue
        values = values.astype(np.float64)
        if name == "episodes":
            rows[name] = np.add.reduceat(values, starts, axis=1)
            continue
        finite = np.isfinite(values)
        weight = finite.astype(np.float64)
        if name in EPISODE_METRICS and "episodes" in metrics:
            weight = np.where(finite, np.asarray(metrics["episodes"], np.float64), 0.0)
        total = np.add.reduceat(np.where(finite, values, 0.0) * weight, starts, axis=1)
        count = np.add.reduceat(weight, starts, axis=1)
        rows[name] = np.where(count > 0, total / np.where(count > 0, count, 1.0), np.nan)
    return rows


def recent_episode_return(episode_return, episodes, window: int) -> np.ndarray:
    """``[seeds, rows] -> [seeds, rows]``: at each row, the mean return of the last
    ``window`` finished training episodes up to that row, or NaN before ``window``
    episodes have finished.

    ``episode_return`` and ``episodes`` are the rows of :func:`aggregate` (a row's mean
    return and its count of finished episodes). Episodes within a row have no order, so
    where the window takes only some of the oldest row's episodes, they count at that
    row's mean return. With one env step per row (e.g. off-policy ``num_steps=1``,
    ``metrics_every=1``), episodes in a row finished at the same step and this is exact;
    with longer rows it is "the last ``window`` episodes" up to that averaging.
    """
    counts = np.nan_to_num(np.asarray(episodes, np.float64))
    means = np.nan_to_num(np.asarray(episode_return, np.float64))
    totals = np.where(counts > 0, means * counts, 0.0)
    zero = np.zeros((counts.shape[0], 1))
    cum_counts = np.concatenate([zero, np.cumsum(counts, axis=1)], axis=1)   # [seeds, rows + 1]
    cum_totals = np.concatenate([zero, np.cumsum(totals, axis=1)], axis=1)
    out = np.full(counts.shape, np.nan)
    for seed in range(counts.shape[0]):
        cum_count, cum_total = cum_counts[seed], cum_totals[seed]
        # For the window ending at row r, the oldest row j it reaches into is the last
        # with cum_count[j] <= cum_count[r + 1] - window; rows j + 1 .. r count whole.
        oldest = np.maximum(np.searchsorted(cum_count, cum_count[1:] - window, side="right") - 1, 0)
        whole = cum_count[1:] - cum_count[oldest + 1]
        partial = (window - whole) * means[seed, oldest]
        mean = (cum_total[1:] - cum_total[oldest + 1] + partial) / window
        out[seed] = np.where(cum_count[1:] >= window, mean, np.nan)
    return out


def _module(algorithm) -> tuple[str, ModuleType]:
    from jaxrl import algorithms

    if isinstance(algorithm, str):
        return algorithm, algorithms.get(algorithm)
    return algorithm.__name__.rsplit(".", 1)[-1], algorithm


def _make_loggers(loggers, logdir) -> list:
    made = []
    for logger in loggers:
        if not isinstance(logger, str):
            made.append(logger)
            continue
        if logger == "console":
            made.append(jaxrl_logging.ConsoleLogger())
        elif logger == "tensorboard":
            made.append(jaxrl_logging.TensorBoardLogger(os.path.join(logdir, "tensorboard")))
        else:
            made.append(jaxrl_logging.FileLogger(os.path.join(logdir, f"metrics.{logger}")))
    return made


def latest_finite(values) -> np.ndarray:
    """``[seeds, rows] -> [seeds]``: each seed's last finite value (NaN if none)."""
    values = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values)
    last = np.where(finite.any(axis=1), values.shape[1] - 1 - np.argmax(finite[:, ::-1], axis=1), 0)
    return np.where(finite.any(axis=1), values[np.arange(values.shape[0]), last], np.nan)


def run(algorithm, config, *, seeds: int = 1, seed: int = 0, dataset=None, chunk_iterations: int | None = None,
        metrics_every: int = 1, logdir: str | None = None, loggers: Sequence = ("csv",),
        checkpoint_every: int | None = None, keep_checkpoints: int = 3, resume: bool = False,
        target_return: float | None = None, target_metric: str = "eval_return", target_episodes: int | None = None,
        progress: bool = False) -> RunResult:
    """Train ``seeds`` seeds of ``algorithm`` (a name or module) on ``config`` in chunks.

    Args:
      seeds / seed: seed ``i`` trains from ``jax.random.split(jax.random.key(seed),
        seeds)[i]``, so its results equal ``train`` with that key.
      dataset: for algorithms that learn from one (``bc``), leaves ``[S, ...]``.
      chunk_iterations: iterations per compiled chunk (default: about 1/20 of the run).
      metrics_every: iterations aggregated into one metrics row (see :func:`aggregate`);
        must divide ``chunk_iterations``. Only the rows are kept, on the host.
      logdir: directory for ``run.json``, loggers' files and ``checkpoints/``.
      loggers: names from ``LOGGER_NAMES`` (file loggers write into ``logdir``; ignored
        without one, except ``"console"``) or objects with ``write`` / ``truncate`` /
        ``close`` (see :mod:`jaxrl.logging`).
      checkpoint_every: save the whole state every this many chunks, at the end and at
        an early stop (needs ``logdir`` and the ``checkpoint`` extra). The latest
        ``keep_checkpoints`` and the best by evaluation return are kept.
      resume: continue from the latest checkpoint in ``logdir`` if there is one (start
        afresh if there is none). Without it, a ``logdir`` holding a run is an error:
        nothing saved is overwritten.
      target_return: stop after the chunk in which every seed's latest ``target_metric``
        reached it.
      target_episodes: check ``target_return`` on the mean return of the last this many
        finished training episodes instead (:func:`recent_episode_return`;
        the "solved" rule of the classic control tasks: 100 episodes). Solving is then
        an event: a seed counts as solved from the first row where that mean reached
        the target (as when each seed is a run of its own that stops there), and the run
        stops once every seed has been.
      progress: show a progress bar of env steps (gradient updates for algorithms that
        learn from a dataset), advanced after each chunk (the chunk's programs leave out
        the config's ``num_reports`` progress reports).
    """
    name, module = _module(algorithm)
    if dataset is None and getattr(config, "dataset_path", "") and hasattr(module, "load_config_dataset"):
        # Read on the host before anything traces: a bad file fails first, and the data is
        # an argument of the programs instead of a constant, so they can be cached on disk.
        dataset = module.load_config_dataset(config)
    program_args = {} if dataset is None else {"dataset": dataset}
    if dataset is not None and "dataset" not in inspect.signature(module.program).parameters:
        raise TypeError(f"{name} does not learn from a dataset: pass dataset only to algorithms that do (bc)")
    if not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"seeds must be an int >= 1, got {seeds!r}")
    num_iterations = module.program(config).num_iterations
    chunk_iterations = default_chunk_iterations(num_iterations) if chunk_iterations is None else chunk_iterations
    if not isinstance(chunk_iterations, int) or not 1 <= chunk_iterations <= num_iterations:
        raise ValueError(f"chunk_iterations must be an int in [1, {num_iterations}] (the run's iterations), "
                         f"got {chunk_iterations!r}")
    if not isinstance(metrics_every, int) or metrics_every < 1 or chunk_iterations % metrics_every:
        raise ValueError(f"metrics_every must be an int >= 1 dividing chunk_iterations={chunk_iterations}, "
                         f"got {metrics_every!r}")
    if target_episodes is not None and (not isinstance(target_episodes, int) or target_episodes < 1):
        raise ValueError(f"target_episodes must be an int >= 1 (finished episodes to average), got {target_episodes!r}")
    if checkpoint_every is not None and (not isinstance(checkpoint_every, int) or checkpoint_every < 1):
        raise ValueError(f"checkpoint_every must be an int >= 1 (chunks between checkpoints), got {checkpoint_every!r}")
    if resume and str(getattr(config, "env_id", "")).startswith(envs.GYMNASIUM_PREFIX):
        # A host env's state lives in its Python process, not in the checkpointed pytree.
        raise ValueError(f"resume is not supported for host envs ({config.env_id}): their state is not in the "
                         f"checkpoint; checkpoints of such runs hold the agent (params, optimiser) only")
    if (checkpoint_every is not None or resume) and logdir is None:
        raise ValueError("checkpoint_every and resume need a logdir to keep checkpoints in")
    for logger in loggers:
        if isinstance(logger, str) and logger not in LOGGER_NAMES:
            raise ValueError(f"unknown logger {logger!r}; choose from {', '.join(LOGGER_NAMES)} or pass a logger object")
    if logdir is None:  # file loggers have nowhere to write
        loggers = [logger for logger in loggers if logger == "console" or not isinstance(logger, str)]

    meta = {"algorithm": name, "config": dataclasses.asdict(config), "seeds": seeds, "seed": seed,
            "chunk_iterations": chunk_iterations, "metrics_every": metrics_every}
    checkpoints = None
    if logdir is not None:
        checkpoint_dir = os.path.join(logdir, "checkpoints")
        holds_run = os.path.exists(os.path.join(logdir, "run.json"))
        if holds_run and not resume:
            raise ValueError(f"logdir {logdir!r} already holds a run: pass resume=True (--resume) to continue it, "
                             f"or choose another logdir")
        if holds_run:
            from jaxrl.checkpoint import check_meta

            with open(os.path.join(logdir, "run.json")) as f:
                saved = json.load(f)
            _keep_saved_num_reports(meta, saved)
            check_meta(saved, meta, f"the run in {logdir!r}")
        if checkpoint_every is not None or (resume and os.path.isdir(checkpoint_dir)):
            from jaxrl.checkpoint import Checkpoints

            checkpoints = Checkpoints(checkpoint_dir, keep=keep_checkpoints)
            if resume and not holds_run and checkpoints.latest_step() is not None:
                # run.json is gone: the checkpoints say how the run began.
                _keep_saved_num_reports(meta, checkpoints.meta(checkpoints.latest_step()))
        os.makedirs(logdir, exist_ok=True)
        if not holds_run:
            with open(os.path.join(logdir, "run.json"), "w") as f:
                json.dump({**meta, "jaxrl_version": _version()}, f, indent=2, default=str)
    loggers = _make_loggers(loggers, logdir)

    compile_start = time.perf_counter()
    init_all, chunk, compiled, identity = _programs(module, config)
    keys = jax.random.split(jax.random.key(seed), seeds)
    init_signature = ("init", _signature((keys, program_args)))
    if init_signature in compiled:
        state, run_keys = compiled[init_signature](keys, program_args)
        init_pending = None
    else:
        # The init program compiles in a thread while the first chunk traces and compiles
        # from the state's shapes: XLA compiles without the GIL, so on a few cores the two
        # overlap instead of adding up (about a second less on 2 cores).
        (state, run_keys), compile_init = program_cache.prepare(
            init_all, (keys, program_args), identity=identity and f"init {identity}")
        init_pending = _background(compile_init)
    resume_step = checkpoints.latest_step() if checkpoints is not None and resume else None
    completed, history = (0 if resume_step is None else int(resume_step)), None
    first_length = min(chunk_iterations, max(num_iterations - completed, 1))

    def prepare_chunk(length):
        return program_cache.prepare(chunk, (state, run_keys, jnp.int32(0)), (length,), donate_argnums=(0,),
                                     identity=identity and f"chunk {identity}")

    def executable(length, prepared=None):
        signature = (length, _signature(state))
        if signature not in compiled:  # the first chunk, and a shorter last one
            compiled[signature] = (prepared or prepare_chunk(length))[1]()
        return compiled[signature]

    first_chunk = None
    if completed < num_iterations and (first_length, _signature(state)) not in compiled:
        first_chunk = prepare_chunk(first_length)
    if target_return is not None:
        metric_names = (jax.eval_shape(chunk, state, run_keys, jnp.int32(0), first_length)
                        if first_chunk is None else first_chunk[0])[1]
        needed = ("episode_return", "episodes") if target_episodes is not None else (target_metric,)
        for metric in needed:
            if metric not in metric_names:
                raise ValueError(f"target_metric {metric!r} is not a metric of {name}; "
                                 f"its metrics: {', '.join(sorted(metric_names))}")
    if completed < num_iterations:
        executable(first_length, first_chunk)
    if init_pending is not None:
        compiled[init_signature] = init_pending.result()
        state, run_keys = compiled[init_signature](keys, program_args)
    if resume_step is not None:
        restored, history, _ = checkpoints.restore({"state": state, "run_keys": run_keys}, expect_meta=meta)
        state, run_keys = restored["state"], restored["run_keys"]
    if resume:  # rows logged after the restored point (or all, if none) are written again
        counter = next((name for name in jaxrl_logging.COUNTERS if name in (history or {})), None)
        for logger in loggers:
            logger.truncate(completed, int(history[counter][0, -1]) if counter else completed)
    compile_seconds = time.perf_counter() - compile_start
    run_seconds = 0.0

    total, counter = budget(config)
    stopped_early, chunks_run = False, 0
    try:
        done = int(np.max(history[counter][:, -1])) if history and counter in history else 0  # resumed
        with jaxrl_logging.progress_bar(total, disable=not progress, counter=counter, initial=done,
                                        unit="update" if counter == "updates" else "step") as show_progress:
            while completed < num_iterations and not stopped_early:
                length = min(chunk_iterations, num_iterations - completed)
                start = time.perf_counter()
                step_chunk = executable(length)
                compile_seconds += time.perf_counter() - start
                start = time.perf_counter()
                state, metrics = step_chunk(state, run_keys, jnp.int32(completed))
                rows = aggregate(jax.device_get(metrics), metrics_every)
                run_seconds += time.perf_counter() - start
                row_ends = np.minimum(np.arange(metrics_every, length + metrics_every, metrics_every), length)
                rows["iteration"] = np.broadcast_to(completed + row_ends, (seeds, len(row_ends)))
                completed += length
                chunks_run += 1
                history = rows if history is None else {k: np.concatenate([history[k], rows[k]], axis=1)
                                                        for k in history}
                for logger in loggers:
                    logger.write(rows["iteration"][0], {k: v for k, v in rows.items() if k != "iteration"})
                if counter in rows:
                    returns = rows.get("episode_return")
                    show_progress({counter: rows[counter][:, -1],
                                   "episode_return": np.nan if returns is None else latest_finite(returns)})
                if target_return is not None:
                    stopped_early = bool(np.all(_target_values(history, target_metric, target_episodes)
                                                >= target_return))
                last = completed >= num_iterations or stopped_early
                if checkpoint_every is not None and (chunks_run % checkpoint_every == 0 or last):
                    latest_eval = latest_finite(rows["eval_return"]) if "eval_return" in rows else np.nan
                    checkpoints.save(completed, {"state": state, "run_keys": run_keys}, meta=meta, history=history,
                                     eval_return=float(np.mean(latest_eval)))
    finally:
        for logger in loggers:
            logger.close()
        if checkpoints is not None:
            checkpoints.close()
    history = history or {}
    iterations = history.pop("iteration", np.zeros((seeds, 0), np.int64))[0]
    return RunResult(state, history, iterations, completed, stopped_early, compile_seconds, run_seconds)


def _target_values(history: dict, target_metric: str, target_episodes: int | None) -> np.ndarray:
    """Each seed's value that ``target_return`` is checked on: ``[seeds]``."""
    if target_episodes is None:
        return latest_finite(history[target_metric])
    recent = recent_episode_return(history["episode_return"], history["episodes"], target_episodes)
    return np.max(np.where(np.isnan(recent), -np.inf, recent), axis=1)  # the best row so far


def _programs(module: ModuleType, config):
    """``(init_all, chunk, compiled, identity)`` for ``module`` on ``config``, shared by
    every run of the same (hashable) config so that they share compilations.

    ``init_all(keys [S], program_args) -> (state, run_keys)`` (jitted);
    ``chunk(state, run_keys, start, length) -> (state, metrics [S, length])`` (jitted,
    the state donated); ``compiled`` caches executables by signature; ``identity``
    names the programs for :mod:`jaxrl.program_cache` (None: not cached on disk).
    """
    if hasattr(config, "num_reports"):
        # ``run`` shows progress between chunks: its programs leave out in-program reports
        # (host callbacks, which neither JAX's persistent cache nor jaxrl.program_cache
        # can keep), so configs that differ only in them share programs.
        config = dataclasses.replace(config, num_reports=0)
    try:
        return _cached_programs(module, config)
    except TypeError:  # an unhashable config (e.g. arrays as fields): no sharing
        return _cached_programs.__wrapped__(module, config)


def _program_identity(module: ModuleType, config) -> str | None:
    """A string that, with the inputs' types and jaxrl's source, determines the
    programs of ``module`` on ``config``: the algorithm, the config's class and every
    field. None where something outside jaxrl shapes the programs (the user's algorithm
    or config class, a Gymnasium env, a dataset file read while tracing) or a field is
    not plain data."""
    def plain(value):
        if isinstance(value, (tuple, list)):
            return all(plain(v) for v in value)
        return value is None or isinstance(value, (str, int, float, bool))

    config_class = type(config)
    if not (module.__name__.startswith("jaxrl.algorithms.") and dataclasses.is_dataclass(config)
            and config_class.__module__.startswith("jaxrl.")):
        return None
    fields = [(field.name, getattr(config, field.name)) for field in dataclasses.fields(config)]
    if not all(plain(value) for _, value in fields):
        return None
    if str(getattr(config, "env_id", "")).startswith(envs.GYMNASIUM_PREFIX):
        return None
    if getattr(config, "dataset_path", "") and not hasattr(module, "load_config_dataset"):
        return None  # read while tracing: the file's contents would not be in the key (run reads bc's first)
    return f"{module.__name__} {config_class.__module__}.{config_class.__qualname__}{fields!r}"


@functools.lru_cache(maxsize=16)
def _cached_programs(module: ModuleType, config):
    from jaxrl import loop

    def init_all(keys, program_args):
        def one(key):
            init_key, run_key = jax.random.split(key)  # as loop.train splits it
            return module.program(config, **program_args).init(init_key), run_key

        return jax.vmap(one)(keys)

    def chunk(state, run_keys, start, length):
        program = module.program(config)
        return jax.vmap(lambda s, k: loop.iterate(program, s, k, start, length))(state, run_keys)

    return (jax.jit(init_all), jax.jit(chunk, static_argnums=3, donate_argnums=0), {},
            _program_identity(module, config))


def _background(fn) -> concurrent.futures.Future:
    """``fn()`` running in a thread; ``.result()`` waits for it and re-raises its error."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    future = pool.submit(fn)
    pool.shutdown(wait=False)
    return future


def _keep_saved_num_reports(meta: dict, saved: dict) -> None:
    """The runner's programs leave out num_reports (see _programs), so a resumed run may
    change it: ``meta`` takes the saved run's value, as run.json and the checkpoints do."""
    saved_config = saved.get("config")
    if isinstance(saved_config, dict) and "num_reports" in saved_config and "num_reports" in meta["config"]:
        meta["config"]["num_reports"] = saved_config["num_reports"]


def _signature(tree) -> tuple:
    return tuple((leaf.shape, str(leaf.dtype)) for leaf in jax.tree.leaves(tree))


def budget(config) -> tuple[int, str]:
    """``(total, counter)``: env steps for algorithms that interact with the env,
    gradient updates for those that learn from a fixed dataset (BC)."""
    if hasattr(config, "total_timesteps"):
        return config.total_timesteps, "timesteps"
    return config.num_updates, "updates"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("jaxrl")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


