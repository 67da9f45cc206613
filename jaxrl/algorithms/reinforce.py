"""REINFORCE (Williams, 1992): the policy gradient with whole-episode Monte-Carlo returns
and an optional learned baseline.

It is :mod:`jaxrl.algorithms.a2c` with ``advantage="monte_carlo"``, not a copy. Each
iteration resets ``num_envs`` envs, runs them for the env's time limit and learns from
each env's first episode (``timesteps`` counts every simulated step)::

    config = reinforce.Config(env_id="CartPole-v1", env_kwargs={"max_steps_in_episode": 200})
    out = jax.jit(reinforce.train)(jax.random.key(0), config)
"""

from __future__ import annotations

from typing import Any

from flax import struct

from jaxrl.algorithms import a2c
from jaxrl.config import static


@struct.dataclass
class Config(a2c.Config):
    """A2C's Config with REINFORCE's defaults (see :class:`jaxrl.algorithms.a2c.Config`)."""

    advantage: str = static("monte_carlo")
    num_envs: int = static(8)
    num_steps: Any = static(None)  # the env's time limit: every first episode ends
    normalize_advantages: bool = static(True)
    anneal_lr: bool = static(False)
    # Solves CartPole-v1 at 200k steps where 3e-3 was too slow (benchmarks/RESULTS.md's
    # learning table).
    learning_rate: float = 1e-2


PRESETS = {}


algorithm = a2c.algorithm.variant(
    "reinforce",
    Config,
    PRESETS,
    summary="REINFORCE: whole-episode Monte-Carlo policy gradient",
)
__getattr__ = algorithm.module_getattr(__name__)  # reinforce.train, reinforce.preset: the record's
