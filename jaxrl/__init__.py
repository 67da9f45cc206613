"""jaxrl: reinforcement learning as pure functions over pytrees, compiled whole with JAX."""

import importlib
import os

from jaxrl.config import sweep_axes
from jaxrl.types import TrainOutput, Trajectory

__version__ = "0.1.0"
__all__ = [
    "algorithms",
    "buffers",
    "envs",
    "evaluation",
    "returns",
    "rollout",
    "workflow",
    "sweep_axes",
    "Trajectory",
    "TrainOutput",
]

# Loaded on first use: importing them imports gymnax, whose import runs JAX computations
# and so starts JAX's backends, after which jax.distributed.initialize (see
# jaxrl.workflow.distributed.initialize) can no longer join this process to a multi-process run.
_SUBMODULES = ("algorithms", "buffers", "envs", "evaluation", "returns", "rollout", "workflow")

# The old paths of modules that moved (``jaxrl.runner``, ...) resolve to shims there, which
# warn and hand over the moved module (see jaxrl/_deprecated/__init__.py).
__path__.append(os.path.join(os.path.dirname(__file__), "_deprecated"))


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"jaxrl.{name}")
    raise AttributeError(f"module 'jaxrl' has no attribute {name!r}")
