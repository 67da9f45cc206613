"""Host-side progress reporting fed from inside compiled loops.

Algorithms call :func:`report` inside ``jit``; it forwards a few scalars to whatever
sinks are active on the host (for example the :func:`progress_bar` context). With no
active sink a report costs one cheap host callback and does nothing.
"""

from __future__ import annotations

import contextlib
import math
from typing import Callable

import jax
import numpy as np

_sinks: list[Callable[[dict], None]] = []


def report(metrics: dict) -> None:
    """Send a dict of scalars (e.g. ``timesteps``, ``episode_return``) to the host sinks.

    Safe under ``jit``, ``scan`` and ``vmap`` (under ``vmap`` each lane reports)."""
    jax.debug.callback(_dispatch, metrics)


def _dispatch(metrics: dict) -> None:
    if not _sinks:
        return
    values = {k: np.asarray(v) for k, v in metrics.items()}
    for sink in list(_sinks):
        sink(values)


@contextlib.contextmanager
def sink(fn: Callable[[dict], None]):
    """Activate ``fn(metrics)`` as a sink for reports made while the context is open."""
    _sinks.append(fn)
    try:
        yield fn
    finally:
        _sinks.remove(fn)


@contextlib.contextmanager
def progress_bar(total_timesteps: int, description: str = "training", disable: bool = False,
                 counter: str = "timesteps", unit: str = "step"):
    """Show a tqdm bar (terminal or notebook) of env steps, steps/s and latest return.

    ``counter`` names the reported metric the bar counts to ``total_timesteps`` in
    ``unit``s: ``"updates"`` / ``"update"`` for algorithms that learn from a dataset.

    Reports from vmapped seeds are merged: the bar shows the furthest step count and
    the mean of the latest returns across the seeds that reported one.
    """
    from tqdm.auto import tqdm

    bar = tqdm(total=int(total_timesteps), desc=description, unit=unit, unit_scale=True,
               dynamic_ncols=True, disable=disable, mininterval=0.5)
    latest_returns: list[float] = []
    state = {"step": 0}

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
            yield bar
    finally:
        bar.close()
