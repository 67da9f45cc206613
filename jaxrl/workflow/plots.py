"""Learning curves to PNG: the mean over seeds with a bootstrap confidence band, for
metrics returned by a run or read back from run directories written with a ``logdir``. ::

    plots.plot_metrics({"ppo": result.metrics}, "curves.png")
    plots.plot_runs(["runs/ppo", "runs/a2c"], "compare.png", metric="eval_return")

Needs the ``plots`` extra (matplotlib).
"""

from __future__ import annotations

import csv
import json
import os
import warnings

import numpy as np


def confidence_band(values: np.ndarray, level: float = 0.95, resamples: int = 1000, seed: int = 0):
    """Mean over seeds and a percentile-bootstrap confidence interval of that mean.

    ``values`` is ``[seeds, points]``; NaN entries (a seed with no value at that point)
    are left out. Returns ``(mean, low, high)``, each ``[points]``.
    """
    from jaxrl.workflow.sweep import bootstrap_ci

    values = np.asarray(values, dtype=np.float64)
    with warnings.catch_warnings():  # all-NaN columns give NaN, which is what we want
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(values, axis=0)
        low, high = bootstrap_ci(values, statistic=np.nanmean, level=level, resamples=resamples, seed=seed)
    return mean, low, high


def load_run(run_dir: str) -> tuple[dict, dict]:
    """Read a run directory: ``(meta, metrics)`` with ``metrics[name]`` ``[seeds, rows]``
    (from ``metrics.csv``, else ``metrics.jsonl``) and ``metrics["iteration"]``."""
    meta_path = os.path.join(run_dir, "run.json")
    if not os.path.exists(meta_path):
        raise FileNotFoundError(f"{run_dir!r} is not a run directory (no run.json): write one with --logdir")
    with open(meta_path) as f:
        meta = json.load(f)
    records = _read_records(run_dir)
    per_seed = [r for r in records if r["seed"] != "mean"]
    if not per_seed:
        raise ValueError(f"run {run_dir!r} has no metrics rows yet")
    seeds = sorted({int(r["seed"]) for r in per_seed})
    iterations = sorted({int(r["iteration"]) for r in per_seed})
    names = [name for name in per_seed[0] if name not in ("seed", "iteration")]
    metrics = {name: np.full((len(seeds), len(iterations)), np.nan) for name in names}
    row_of = {iteration: row for row, iteration in enumerate(iterations)}
    for record in per_seed:
        for name in names:
            value = record.get(name)
            if value not in (None, ""):
                metrics[name][int(record["seed"]), row_of[int(record["iteration"])]] = float(value)
    metrics["iteration"] = np.broadcast_to(np.asarray(iterations, np.float64), (len(seeds), len(iterations)))
    return meta, metrics


def _read_records(run_dir: str) -> list[dict]:
    csv_path, jsonl_path = os.path.join(run_dir, "metrics.csv"), os.path.join(run_dir, "metrics.jsonl")
    if os.path.exists(csv_path):
        with open(csv_path, newline="") as f:
            return list(csv.DictReader(f))
    if os.path.exists(jsonl_path):
        with open(jsonl_path) as f:
            return [json.loads(line) for line in f if line.strip()]
    raise FileNotFoundError(f"run {run_dir!r} has no metrics.csv or metrics.jsonl (log with the csv or jsonl logger)")


def plot_metrics(runs: dict, path: str, metric: str = "eval_return", x: str = "timesteps", title: str | None = None):
    """Plot ``metric`` of each run (``{label: {name: [seeds, rows]}}``) against ``x``
    (a counter in the metrics, or ``"iteration"`` / the row index if absent), as the
    mean over seeds with a 95 % bootstrap band, and save a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    for label, metrics in runs.items():
        if metric not in metrics:
            raise ValueError(f"run {label!r} has no metric {metric!r}; it has {', '.join(sorted(metrics))}")
        values = np.asarray(metrics[metric], dtype=np.float64)
        xs = np.asarray(metrics[x], dtype=np.float64)[0] if x in metrics else np.arange(1, values.shape[1] + 1)
        points = np.isfinite(values).any(axis=0)  # e.g. the rows with an evaluation
        mean, low, high = confidence_band(values[:, points])
        (line,) = axes.plot(xs[points], mean, label=f"{label} ({values.shape[0]} seeds)")
        axes.fill_between(xs[points], low, high, color=line.get_color(), alpha=0.25, linewidth=0)
    axes.set_xlabel(x if any(x in m for m in runs.values()) else "row")
    axes.set_ylabel(metric)
    axes.set_title(title or metric)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def plot_runs(run_dirs, path: str, metric: str = "eval_return", x: str = "timesteps"):
    """Compare run directories (see :func:`load_run`) in one PNG; each is labelled by
    its algorithm, env and directory name."""
    runs = {}
    for run_dir in run_dirs:
        meta, metrics = load_run(run_dir)
        env_id = meta.get("config", {}).get("env_id", "?")
        runs[f"{meta.get('algorithm', '?')} {env_id} [{os.path.basename(os.path.normpath(run_dir))}]"] = metrics
    return plot_metrics(runs, path, metric=metric, x=x)
