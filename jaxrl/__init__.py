"""jaxrl: reinforcement learning as pure functions over pytrees, compiled whole with JAX."""

from jaxrl._xla import configure as _configure_xla

_configure_xla()

from jaxrl import algorithms, buffers, envs, evaluation, returns, rollout  # noqa: E402
from jaxrl.config import sweep_axes  # noqa: E402
from jaxrl.types import Trajectory, TrainOutput  # noqa: E402

__version__ = "0.1.0"
__all__ = ["algorithms", "buffers", "envs", "evaluation", "returns", "rollout", "sweep_axes", "Trajectory", "TrainOutput"]
