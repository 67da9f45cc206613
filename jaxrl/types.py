"""Data containers shared across the library."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
from flax import struct

Array = jax.Array
PRNGKey = jax.Array
PyTree = Any


@struct.dataclass
class Trajectory:
    """A rollout of ``T`` steps from ``N`` parallel envs; every leaf is ``[T, N, ...]``.

    ``obs[t]`` is the observation the action was chosen from. ``next_obs[t]`` is the
    observation the step produced *before* any auto-reset (the env's
    ``info["final_observation"]``): where an episode ended it is the final observation
    and ``obs[t + 1]`` is already the first observation of the next episode. Targets
    bootstrap from ``next_obs`` through truncation and stop at termination.

    ``valid`` is None for envs whose every step is a transition. An env that pads its
    episodes with steps that are not transitions (envpool's reset step; such envs set
    ``EnvSpec.padding_steps``) reports ``info["valid"]``, stored here as ``[T, N]``
    bool: every loss leaves the False steps out.
    """

    obs: PyTree
    action: Array
    reward: Array  # [T, N] float32
    terminated: Array  # [T, N] bool: the MDP ended; do not bootstrap
    truncated: Array  # [T, N] bool: cut by a time limit; bootstrap from next_obs
    next_obs: PyTree
    episode_return: Array  # [T, N] return of the episode that ended at this step, else 0
    episode_length: Array  # [T, N] int32 length of that episode, else 0
    extras: dict  # policy extras, e.g. {"log_prob": [T, N], "value": [T, N]}
    valid: Array | None = None  # [T, N] bool, or None: every step is a transition

    @property
    def done(self) -> Array:
        """``terminated | truncated``: an episode ended at this step."""
        return self.terminated | self.truncated


class TrainOutput(NamedTuple):
    """What ``train`` returns: the final state and metrics stacked over iterations."""

    state: Any
    metrics: dict
