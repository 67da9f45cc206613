"""Metrics on the host: chunks of per-iteration metrics reduced to rows, and the rules
that read a run's rows (latest value, recent-episode mean, a target reached).

All functions take NumPy arrays ``[seeds, rows]`` (or ``[seeds, iterations]``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

COUNTERS = ("timesteps", "updates")  # monotone counts: a row keeps its last value
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
        if name in COUNTERS:
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


def latest_finite(values) -> np.ndarray:
    """``[seeds, rows] -> [seeds]``: each seed's last finite value (NaN if none)."""
    values = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values)
    last = np.where(finite.any(axis=1), values.shape[1] - 1 - np.argmax(finite[:, ::-1], axis=1), 0)
    return np.where(finite.any(axis=1), values[np.arange(values.shape[0]), last], np.nan)


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
    cum_counts = np.concatenate([zero, np.cumsum(counts, axis=1)], axis=1)  # [seeds, rows + 1]
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


@dataclasses.dataclass(frozen=True)
class Target:
    """When a run may stop early: every seed has reached ``value``.

    Checked on each seed's latest ``metric`` (the deterministic ``eval_return`` by
    default), or, with ``episodes``, on the mean return of the last that many finished
    training episodes (:func:`recent_episode_return`; the "solved" rule of the classic
    control tasks uses 100). Solving is then an event: a seed counts as solved from the
    first row where that mean reached ``value``, as if each seed were a run of its own
    that stopped there.
    """

    value: float
    metric: str = "eval_return"
    episodes: int | None = None

    def __post_init__(self):
        if self.episodes is not None and (not isinstance(self.episodes, int) or self.episodes < 1):
            raise ValueError(
                f"target episodes must be an int >= 1 (finished episodes to average), got {self.episodes!r}"
            )

    @property
    def needs(self) -> tuple[str, ...]:
        """The metrics the rule reads."""
        return ("episode_return", "episodes") if self.episodes is not None else (self.metric,)

    def values(self, history: dict) -> np.ndarray:
        """Each seed's value the rule compares with ``value``: ``[seeds]``."""
        if self.episodes is None:
            return latest_finite(history[self.metric])
        recent = recent_episode_return(history["episode_return"], history["episodes"], self.episodes)
        return np.max(np.where(np.isnan(recent), -np.inf, recent), axis=1)  # the best row so far

    def reached(self, history: dict) -> bool:
        return bool(np.all(self.values(history) >= self.value))
