"""Sweeps: seeds x hyper-parameter settings of any algorithm as one compiled program,
and the statistics that summarise them. ::

    from jaxrl.workflow import distributed, sweep
    from jaxrl.workflow.options import RunOptions
    from jaxrl.algorithms import ppo

    settings = sweep.grid(learning_rate=[1e-4, 3e-4, 1e-3], gamma=[0.98, 0.99])   # 6 settings
    result = sweep.run("ppo", ppo.Config(), settings, seeds=8)   # one vmapped program over 48 lanes
    result.metrics["eval_return"]                                # [settings, seeds, iterations]
    # logged per lane, checkpointed and resumable after a crash, the lanes over 4 devices:
    options = RunOptions(logdir="runs/lr-gamma", checkpoint_every=1, mesh=distributed.make_mesh(jax.devices()[:4]))
    result = sweep.run("ppo", ppo.Config(), settings, seeds=8, options=options)
    table = sweep.summarize(result)                              # mean, stderr, IQM, 95% CI per setting
    sweep.best(table)

Only *traced* config fields can be swept this way (numbers the program reads as data:
learning rates, discount, coefficients). Static fields fix shapes or structure (network
widths, env counts, batch sizes, flags): sweeping one is an error; loop over it on the
host, one compiled program per value.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jaxrl.workflow.options import DEFAULTS, RunOptions, with_keywords


@dataclasses.dataclass
class SweepResult:
    """What :func:`run` returns.

    Attributes:
      settings: ``{field: [C]}``, the value of each swept field in each setting.
      metrics: ``{name: [C, S, iterations]}`` (setting, seed, iteration).
      state: the final training states, leaves ``[C, S, ...]``.
      compile_seconds / run_seconds: compiling, and running the compiled sweep.
    """

    settings: dict
    metrics: dict
    state: Any
    compile_seconds: float
    run_seconds: float

    @property
    def num_settings(self) -> int:
        return len(next(iter(self.settings.values())))


def grid(**values) -> dict:
    """The Cartesian product of the given values: ``grid(a=[1, 2], b=[3, 4])`` is
    ``{"a": [1, 1, 2, 2], "b": [3, 4, 3, 4]}`` (4 settings)."""
    if not values:
        raise ValueError("grid needs at least one field=values")
    for name, options in values.items():
        if np.ndim(options) != 1 or len(options) == 0:
            raise ValueError(f"grid values for {name!r} must be a non-empty list of numbers, got {options!r}")
    product = list(itertools.product(*values.values()))
    return {name: np.asarray([setting[i] for setting in product]) for i, name in enumerate(values)}


def random_settings(num: int, seed: int = 0, **ranges) -> dict:
    """``num`` settings drawn at random: each range is ``(low, high)`` (uniform) or
    ``(low, high, "log")`` (log-uniform, for learning rates)."""
    if not isinstance(num, int) or num < 1:
        raise ValueError(f"num must be an int >= 1, got {num!r}")
    rng = np.random.default_rng(seed)
    settings = {}
    for name, spec in ranges.items():
        low, high, *scale = spec
        if not low < high or scale not in ([], ["linear"], ["log"]) or (scale == ["log"] and low <= 0):
            raise ValueError(
                f"range for {name!r} must be (low, high) or (low, high, 'log') with low < high "
                f"(and low > 0 for 'log'), got {spec!r}"
            )
        if scale == ["log"]:
            settings[name] = np.exp(rng.uniform(math.log(low), math.log(high), num))
        else:
            settings[name] = rng.uniform(low, high, num)
    return settings


def run(
    algorithm,
    config,
    settings: dict,
    seeds: int = 1,
    seed: int = 0,
    *,
    chunk_iterations: int | None = None,
    options: RunOptions = DEFAULTS,
    **deprecated,
) -> SweepResult:
    """Train every (setting, seed) lane of ``algorithm`` on ``config``, vmapped: the
    ``C * seeds`` lanes of one program, run in chunks by :func:`jaxrl.workflow.runner.run`
    (rows logged per lane with its setting, checkpoints, and a resume that continues an
    interrupted sweep exactly as if it had never stopped).

    Args:
      algorithm: a name (``"ppo"``), a record (:func:`jaxrl.algorithms.get`) or an algorithm module.
      config: the base config; ``settings`` replace its swept fields.
      settings: ``{field: [C] values}``, e.g. from :func:`grid` or :func:`random_settings`.
      seeds / seed: seed ``i`` of every setting trains from
        ``jax.random.split(jax.random.key(seed), seeds)[i]``, so lane ``(c, i)`` equals
        ``train(that key, config with setting c)``.
      chunk_iterations: iterations per compiled chunk (default: the runner's).
      options: the run options (:class:`jaxrl.workflow.options.RunOptions`); with a
        ``mesh``, the lanes are split over its devices (they must divide over them).
        The same keywords given to ``run`` itself still work, with a DeprecationWarning.
    """
    from jaxrl.workflow import runner

    options = with_keywords(options, deprecated, "sweep.run")
    swept = {name: np.asarray(values) for name, values in settings.items()}  # as given, not float32
    result = runner.run(
        algorithm,
        config,
        seeds=seeds,
        seed=seed,
        settings=settings,
        chunk_iterations=chunk_iterations,
        options=options,
    )
    return SweepResult(
        swept,
        _by_setting(result.metrics, seeds),
        _states_by_setting(result.state, seeds),
        result.compile_seconds,
        result.run_seconds,
    )


def _by_setting(tree, seeds: int):
    """Leaves ``[C * S, ...]`` (the runner's lanes) as ``[C, S, ...]``."""
    return jax.tree.map(lambda leaf: leaf.reshape((-1, seeds) + leaf.shape[1:]), tree)


# One program for the whole state, where reshaping leaf by leaf compiles one per shape.
_states_by_setting = jax.jit(_by_setting, static_argnums=1)


# ----------------------------------------------------------------------------- statistics


def final_scores(metrics: dict, metric: str = "eval_return") -> np.ndarray:
    """Each lane's last finite value of ``metric`` (``[..., iterations] -> [...]``;
    NaN for a lane that never reported one)."""
    if metric not in metrics:
        raise ValueError(f"no metric {metric!r}; metrics: {', '.join(sorted(metrics))}")
    values = np.asarray(metrics[metric], dtype=np.float64)
    finite = np.isfinite(values)
    last = values.shape[-1] - 1 - np.argmax(finite[..., ::-1], axis=-1)
    picked = np.take_along_axis(values, last[..., None], axis=-1)[..., 0]
    return np.where(finite.any(axis=-1), picked, np.nan)


def iqm(values, axis: int = -1) -> np.ndarray:
    """Interquartile mean: the mean of the middle half of the values along ``axis``
    (``floor(n / 4)`` dropped at each end, as ``scipy.stats.trim_mean(x, 0.25)``)."""
    values = np.sort(np.asarray(values, dtype=np.float64), axis=axis)
    n = values.shape[axis]
    cut = n // 4
    return np.mean(np.take(values, np.arange(cut, n - cut), axis=axis), axis=axis)


def bootstrap_ci(
    values, statistic: Callable = np.mean, level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile-bootstrap confidence interval of ``statistic`` over the seeds.

    ``values`` is ``[S, ...]`` (seeds first); ``statistic(sample, axis=0)`` reduces the
    seed axis. Seeds are resampled with replacement ``resamples`` times, drawn with
    ``numpy.random.default_rng(seed).integers(0, S, (resamples, S))``. Returns
    ``(low, high)``, each ``[...]``.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    values = np.asarray(values, dtype=np.float64)
    picks = np.random.default_rng(seed).integers(0, values.shape[0], size=(resamples, values.shape[0]))
    stats = np.stack([statistic(values[pick], axis=0) for pick in picks])
    low, high = np.nanpercentile(stats, [50 * (1 - level), 50 * (1 + level)], axis=0)
    return low, high


def summarize(result: SweepResult, metric: str = "eval_return", level: float = 0.95) -> list[dict]:
    """One row per setting: the swept values, then statistics over seeds of each lane's
    final ``metric``: ``mean``, ``stderr`` (sample standard deviation / sqrt(seeds)),
    ``iqm``, and the bootstrap ``ci_low`` / ``ci_high`` of the mean."""
    scores = final_scores(result.metrics, metric)  # [C, S]
    rows = []
    for c in range(scores.shape[0]):
        lane = scores[c][np.isfinite(scores[c])]
        low, high = bootstrap_ci(lane, level=level) if lane.size else (np.nan, np.nan)
        rows.append(
            {
                **{name: values[c].item() for name, values in result.settings.items()},
                "seeds": int(lane.size),
                "mean": float(np.mean(lane)) if lane.size else math.nan,
                "stderr": float(np.std(lane, ddof=1) / math.sqrt(lane.size)) if lane.size > 1 else math.nan,
                "iqm": float(iqm(lane)) if lane.size else math.nan,
                "ci_low": float(low),
                "ci_high": float(high),
            }
        )
    return rows


def best(rows: list[dict], by: str = "mean") -> dict:
    """The row with the highest ``by`` (NaN rows last)."""
    if not rows or by not in rows[0]:
        raise ValueError(f"cannot rank by {by!r}; columns: {', '.join(rows[0]) if rows else 'none'}")
    return max(rows, key=lambda row: -math.inf if math.isnan(row[by]) else row[by])


def format_table(rows: list[dict], by: str = "mean") -> str:
    """The rows as aligned text; the row with the highest ``by`` is marked with ``*``."""
    if not rows:
        return ""
    top = best(rows, by)
    columns = list(rows[0])
    cells = [[f"{row[c]:.4g}" if isinstance(row[c], float) else str(row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths))]
    lines += [
        "  ".join(v.rjust(w) for v, w in zip(r, widths)) + (" *" if row is top else "") for r, row in zip(cells, rows)
    ]
    return "\n".join(lines)
