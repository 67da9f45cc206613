"""jaxrl: reinforcement learning as pure functions over pytrees, compiled whole with JAX."""

from jaxrl import algorithms, envs, evaluation, returns, rollout
from jaxrl.config import sweep_axes
from jaxrl.types import Trajectory, TrainOutput

__version__ = "0.1.0"
__all__ = ["algorithms", "envs", "evaluation", "returns", "rollout", "sweep_axes", "Trajectory", "TrainOutput"]
