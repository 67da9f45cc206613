"""jaxrl: reinforcement learning as pure functions over pytrees, compiled whole with JAX."""

import importlib

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
    "sweep_axes",
    "Trajectory",
    "TrainOutput",
]

# Loaded on first use: importing them imports gymnax, whose import runs JAX computations
# and so starts JAX's backends, after which jax.distributed.initialize (see
# jaxrl.distributed.initialize) can no longer join this process to a multi-process run.
_SUBMODULES = ("algorithms", "buffers", "envs", "evaluation", "returns", "rollout")


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"jaxrl.{name}")
    raise AttributeError(f"module 'jaxrl' has no attribute {name!r}")
