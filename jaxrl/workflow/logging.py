"""Host-side progress reporting fed from inside compiled loops: the progress bar and
the loggers that write a run's metric rows.

Training loops call :func:`jaxrl.loop.report` inside ``jit``; it forwards a few scalars
to whatever sinks are active on the host (:func:`jaxrl.loop.sink`, which
:func:`progress_bar` opens). With no active sink a report costs one cheap host callback
and does nothing.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import numpy as np

from jaxrl.loop import report, sink  # noqa: F401 - the channel is the loop's; both stay importable here
from jaxrl.workflow.metrics import COUNTERS


@contextlib.contextmanager
def progress_bar(
    total_timesteps: int,
    description: str = "training",
    disable: bool = False,
    counter: str = "timesteps",
    unit: str = "step",
    initial: int = 0,
):
    """Show a tqdm bar (terminal or notebook) of env steps, steps/s and latest return.

    ``counter`` names the reported metric the bar counts to ``total_timesteps`` in
    units of ``unit``: ``"updates"`` / ``"update"`` for algorithms that learn from a dataset;
    ``initial``: the count already done (a resumed run).

    Reports from vmapped seeds are merged: the bar shows the furthest step count and
    the mean of the latest returns across the seeds that reported one. Yields
    ``update(values)``, the function reports reach it through (values: ``counter`` and
    ``episode_return``, scalars or ``[seeds]``), for callers that have the values on
    the host (:func:`jaxrl.workflow.runner.run`, between chunks).
    """
    from tqdm.auto import tqdm

    bar = tqdm(
        total=int(total_timesteps),
        desc=description,
        unit=unit,
        unit_scale=True,
        dynamic_ncols=True,
        disable=disable,
        mininterval=0.5,
        initial=int(initial),
    )
    latest_returns: list[float] = []
    state = {"step": int(initial)}

    def update(values: dict) -> None:
        step = int(np.max(values.get(counter, 0)))
        episode_return = np.asarray(values.get("episode_return", np.nan), dtype=np.float64).ravel()
        if step > state["step"]:
            state["step"] = step
            latest_returns.clear()
        latest_returns.extend(r for r in episode_return if math.isfinite(r))
        if step > bar.n:
            bar.update(step - bar.n)
        if latest_returns:
            bar.set_postfix(episode_return=f"{np.mean(latest_returns):.1f}", refresh=False)

    try:
        with sink(update):
            yield update
    finally:
        bar.close()


# ----------------------------------------------------------------------------- run loggers
#
# The chunked runner (:mod:`jaxrl.workflow.runner`) hands each logger the rows of one chunk:
# ``write(iterations [R], values {name: [S, R]})`` with one column per seed. Loggers write
# every seed and the mean over seeds, and ``truncate(iteration)`` drops rows after
# ``iteration`` (whose env-step count is ``step``) when a run resumes from a checkpoint,
# so a resumed run's logs read as if it had never stopped.

LOGGER_NAMES = ("console", "csv", "jsonl", "tensorboard", "wandb")


def make_loggers(loggers, logdir: str | None, meta: dict | None = None) -> list:
    """Logger objects for ``loggers``: names from :data:`LOGGER_NAMES` (file loggers
    write into ``logdir`` and are skipped without one) or objects with ``write`` /
    ``truncate`` / ``close``, passed through. ``meta``: the run's description
    (:func:`jaxrl.workflow.rundir.meta`), which ``wandb`` records as the W&B run's config."""
    import os

    made = []
    for logger in loggers:
        if not isinstance(logger, str):
            made.append(logger)
        elif logger not in LOGGER_NAMES:
            raise ValueError(
                f"unknown logger {logger!r}; choose from {', '.join(LOGGER_NAMES)} or pass a logger object"
            )
        elif logger == "console":
            made.append(ConsoleLogger())
        elif logger == "wandb":
            made.append(WandbLogger(logdir, config=meta))
        elif logdir is None:
            continue
        elif logger == "tensorboard":
            made.append(TensorBoardLogger(os.path.join(logdir, "tensorboard")))
        else:
            made.append(FileLogger(os.path.join(logdir, f"metrics.{logger}")))
    return made


def seed_mean(values: np.ndarray) -> np.ndarray:
    """Mean over the seed axis (0), ignoring NaN; NaN where every seed is NaN."""
    values = np.asarray(values, dtype=np.float64)
    count = np.sum(np.isfinite(values), axis=0)
    total = np.sum(np.where(np.isfinite(values), values, 0.0), axis=0)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _records(iterations: np.ndarray, values: dict):
    """One dict per (row, seed), then the row's ``seed="mean"`` record."""
    num_seeds = next(iter(values.values())).shape[0]
    means = {name: np.max(column, axis=0) if name in COUNTERS else seed_mean(column) for name, column in values.items()}
    for row, iteration in enumerate(iterations):
        for seed in range(num_seeds):
            yield {"iteration": int(iteration), "seed": seed, **{n: _scalar(v[seed, row]) for n, v in values.items()}}
        yield {"iteration": int(iteration), "seed": "mean", **{n: _scalar(v[row]) for n, v in means.items()}}


def _scalar(value):
    value = np.asarray(value).item()
    return None if isinstance(value, float) and not math.isfinite(value) else value


class FileLogger:
    """Rows as CSV (``path`` ending ``.csv``) or JSON lines (``.jsonl``): one record per
    iteration row and seed, plus one with ``seed="mean"``. Empty cells are NaN
    (no episode finished, no evaluation at that row). Flushed after every chunk."""

    def __init__(self, path: str):
        import os

        if not path.endswith((".csv", ".jsonl")):
            raise ValueError(f"FileLogger path must end in .csv or .jsonl, got {path!r}")
        self.path = path
        self.csv = path.endswith(".csv")
        self._columns: list[str] | None = None
        if self.csv and os.path.exists(path):
            with open(path) as f:
                header = f.readline().strip()
            self._columns = header.split(",") if header else None

    def write(self, iterations: np.ndarray, values: dict) -> None:
        import csv
        import json

        records = list(_records(iterations, values))
        with open(self.path, "a", newline="") as f:
            if not self.csv:
                f.writelines(json.dumps(record) + "\n" for record in records)
                return
            if self._columns is None:
                self._columns = list(records[0])
                f.write(",".join(self._columns) + "\n")
            writer = csv.DictWriter(f, self._columns, extrasaction="ignore", restval="")
            writer.writerows({k: ("" if v is None else v) for k, v in record.items()} for record in records)

    def truncate(self, iteration: int, step: int) -> None:
        """Drop the rows after ``iteration`` (rewriting the file atomically)."""
        import json
        import os

        if not os.path.exists(self.path):
            return
        with open(self.path) as f:
            lines = f.readlines()
        if self.csv:
            column = lines[0].split(",").index("iteration") if lines else 0
            kept = lines[:1] + [line for line in lines[1:] if int(line.split(",")[column]) <= iteration]
        else:
            kept = [line for line in lines if json.loads(line)["iteration"] <= iteration]
        temporary = self.path + ".tmp"
        with open(temporary, "w") as f:
            f.writelines(kept)
        os.replace(temporary, self.path)

    def close(self) -> None:
        pass


class TensorBoardLogger:
    """TensorBoard event files in ``logdir`` (``pip install "jaxrl[tensorboard]"``):
    scalars ``<metric>/seed_<i>`` and ``<metric>/mean``, against env steps where the
    run counts them (else the iteration)."""

    def __init__(self, logdir: str):
        try:
            from tensorboardX import SummaryWriter
        except ImportError as error:  # pragma: no cover - depends on the install
            raise ImportError('TensorBoard logging needs tensorboardX: pip install "jaxrl[tensorboard]"') from error
        self._make_writer = lambda **kwargs: SummaryWriter(logdir, **kwargs)
        self._writer = None
        self._purge_step = None

    def write(self, iterations: np.ndarray, values: dict) -> None:
        if self._writer is None:
            self._writer = self._make_writer(purge_step=self._purge_step)
        counter = next((values[name] for name in COUNTERS if name in values), None)
        steps = iterations if counter is None else np.max(counter, axis=0)
        means = {name: seed_mean(column) for name, column in values.items()}
        for row, step in enumerate(steps):
            for name, column in values.items():
                if name in COUNTERS:
                    continue
                for seed in range(column.shape[0]):
                    if math.isfinite(column[seed, row]):
                        self._writer.add_scalar(f"{name}/seed_{seed}", float(column[seed, row]), int(step))
                if math.isfinite(means[name][row]):
                    self._writer.add_scalar(f"{name}/mean", float(means[name][row]), int(step))
        self._writer.flush()

    def truncate(self, iteration: int, step: int) -> None:
        """Tell TensorBoard to discard events after ``step``, the resume point's x value
        (env steps, or the iteration where the run counts none)."""
        self._purge_step = int(step) + 1

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


class WandbLogger:
    """A Weights & Biases run (``pip install "jaxrl[wandb]"``) holding the scalars
    TensorBoard gets: ``<metric>/seed_<i>`` and ``<metric>/mean`` (NaN cells skipped).
    Each row is logged at W&B step = the env steps where the run counts them (else the
    iteration); that counter is logged too and is every metric's x axis
    (``define_metric``). The run starts at the first ``write``, so a run refused
    before training leaves no W&B run behind, and ``close`` finishes it.

    With no network, set ``WANDB_MODE=offline`` (or pass ``mode="offline"``): the run
    is written under ``<logdir>/wandb/offline-run-*`` and ``wandb sync DIR`` uploads it
    later. Unset arguments are left to W&B, which reads ``WANDB_PROJECT``,
    ``WANDB_ENTITY``, ``WANDB_NAME``, ``WANDB_RUN_GROUP``, ``WANDB_TAGS``,
    ``WANDB_MODE`` ... itself.

    Args:
      logdir: W&B's files go to ``<logdir>/wandb`` (without one: ``WANDB_DIR`` or
        ``./wandb``), and the run's id to ``<logdir>/wandb/jaxrl-run-id``, so that a
        resumed jaxrl run continues the same W&B run.
      project / name / group / tags: as ``wandb.init``'s. ``name`` defaults to the
        logdir's last component (unless ``WANDB_NAME`` is set).
      config: the run's config in W&B, over the run's ``<logdir>/run.json`` (the
        algorithm, every config field, seeds, chunking) when there is one.
      rewind: on a resume, rewind the W&B run to the checkpoint (below).
      **init_kwargs: passed on to ``wandb.init`` (``entity``, ``notes``, ``mode``,
        ``settings``, ...).

    Resuming (``truncate(iteration, step)``): W&B cannot delete logged rows. The
    resumed run reopens the W&B run whose id the logdir holds (``resume="allow"``) and
    logs the rows after the checkpoint again, with the values logged before the stop
    (resumes are exact). Online, W&B continues the run from its last step and ignores
    rows logged at lower steps, so each row is in the history once (W&B's documented
    resume; jaxrl's tests run offline and do not reach a server). Offline, each part
    of the run is its own ``offline-run-*`` directory under the same run id, the
    resumed one holding the rows after the checkpoint: synced, the rows between the
    checkpoint and the stop may appear twice, with equal values. With ``rewind=True``
    the resumed run starts with ``resume_from="<id>?_step=<step + 1>"`` instead: W&B
    cuts the run's history after the checkpoint's row (W&B's "rewind", a server
    feature in preview that not every account has; an offline run carries the request
    to ``wandb sync``).
    """

    def __init__(
        self,
        logdir: str | None = None,
        *,
        project: str | None = None,
        name: str | None = None,
        group: str | None = None,
        tags: list[str] | None = None,
        config: dict | None = None,
        rewind: bool = False,
        **init_kwargs,
    ):
        import os

        try:
            import wandb
        except ImportError as error:
            raise ImportError('Weights & Biases logging needs wandb: pip install "jaxrl[wandb]"') from error
        self._wandb = wandb
        self.logdir = logdir
        if name is None and logdir is not None and "WANDB_NAME" not in os.environ:
            name = os.path.basename(os.path.normpath(logdir))
        named = {"project": project, "name": name, "group": group, "tags": tags}
        self._init_kwargs = {**{k: v for k, v in named.items() if v is not None}, **init_kwargs}
        self._config = config
        self._rewind = rewind
        self._resume_step: int | None = None
        self.run = None

    def _start(self, step_metric: str) -> None:
        import json
        import os

        kwargs = {"reinit": "create_new", **self._init_kwargs}  # never another run of the process
        config, id_path = {}, None
        if self.logdir is not None:
            kwargs.setdefault("dir", self.logdir)
            os.makedirs(os.path.join(self.logdir, "wandb"), exist_ok=True)
            id_path = os.path.join(self.logdir, "wandb", "jaxrl-run-id")
            if os.path.exists(id_path):
                with open(id_path) as f:
                    run_id = f.read().strip()
                if self._rewind and self._resume_step is not None:
                    kwargs["resume_from"] = f"{run_id}?_step={self._resume_step + 1}"
                else:
                    kwargs.update(id=run_id, resume="allow")
            meta_path = os.path.join(self.logdir, "run.json")
            if os.path.exists(meta_path):
                with open(meta_path) as f:
                    config = json.load(f)
        config.update(self._config or {})
        self.run = self._wandb.init(config=config or None, **kwargs)
        if id_path is not None:
            with open(id_path, "w") as f:
                f.write(self.run.id)
        self.run.define_metric(step_metric)
        self.run.define_metric("*", step_metric=step_metric)

    def write(self, iterations: np.ndarray, values: dict) -> None:
        counter = next((name for name in COUNTERS if name in values), None)
        steps = iterations if counter is None else np.max(values[counter], axis=0)
        step_metric = counter or "iteration"
        if self.run is None:
            self._start(step_metric)
        means = {name: seed_mean(column) for name, column in values.items() if name not in COUNTERS}
        for row, step in enumerate(steps):
            logged = {step_metric: int(step)}
            for name, mean in means.items():
                column = values[name]
                for seed in range(column.shape[0]):
                    if math.isfinite(column[seed, row]):
                        logged[f"{name}/seed_{seed}"] = float(column[seed, row])
                if math.isfinite(mean[row]):
                    logged[f"{name}/mean"] = float(mean[row])
            self.run.log(logged, step=int(step), commit=True)

    def truncate(self, iteration: int, step: int) -> None:
        """Note the resume point: ``step``, its x value (see the class)."""
        self._resume_step = int(step)

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


class ConsoleLogger:
    """One line per chunk: iteration, env steps, steps/s and the seed-mean returns."""

    def __init__(self, print_fn: Callable[[str], None] = print):
        import time

        self._print = print_fn
        self._clock = time.perf_counter
        self._last = None

    def write(self, iterations: np.ndarray, values: dict) -> None:
        now = self._clock()
        counter = next((name for name in COUNTERS if name in values), None)
        parts = [f"iteration {int(iterations[-1]):>7}"]
        if counter is not None:
            count = int(np.max(values[counter][:, -1]))
            parts.append(f"{counter} {count:>9,}")
            if self._last is not None and now > self._last[0]:
                parts.append(f"{(count - self._last[1]) * values[counter].shape[0] / (now - self._last[0]):>9,.0f}/s")
            self._last = (now, count)
        for name in ("episode_return", "eval_return"):
            means = seed_mean(values[name]) if name in values else np.array([])
            means = means[np.isfinite(means)]
            if means.size:
                parts.append(f"{name} {means[-1]:8.1f}")
        self._print("  ".join(parts))

    def truncate(self, iteration: int, step: int) -> None:
        pass

    def close(self) -> None:
        pass
