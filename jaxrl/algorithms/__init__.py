"""Algorithms. Each module exposes ``Config``, ``init``, ``act``, ``update``, ``step``,
``train`` and ``program`` (the run as a :class:`jaxrl.loop.Program`, for
:mod:`jaxrl.workflow.runner`); :func:`get` finds one by name."""

from __future__ import annotations

import difflib
import importlib
from types import ModuleType

ALGORITHMS = (
    "ppo",
    "a2c",
    "reinforce",
    "impala",
    "dqn",
    "ddpg",
    "td3",
    "sac",
    "bc",
    "es",
    "alphazero",
    "ippo",
    "mappo",
    "iql",
    "vdn",
)


def get(name: str) -> ModuleType:
    """The algorithm module called ``name`` (e.g. ``get("ppo")``)."""
    if name not in ALGORITHMS:
        close = difflib.get_close_matches(name, ALGORITHMS, n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(f"unknown algorithm {name!r}.{hint} Available: {', '.join(ALGORITHMS)}")
    return importlib.import_module(f"jaxrl.algorithms.{name}")
