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
from jaxrl.algorithms.a2c import (
    State,
    act,
    evaluate,
    first_episode_mask,
    init,
    initial_carry,
    loss_fn,
    make_env,
    make_network,
    policy_and_value,
    program,
    step,
    targets,
    train,
    update,
)
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


def preset(env_id: str, **overrides) -> Config:
    """A Config with settings tuned for ``env_id`` (the defaults where none are known)."""
    return Config(env_id=env_id, **{**PRESETS.get(env_id, {}), **overrides})


__all__ = [  # the algorithm contract: A2C's functions with this Config
    "Config",
    "PRESETS",
    "preset",
    "State",
    "act",
    "evaluate",
    "first_episode_mask",
    "init",
    "initial_carry",
    "loss_fn",
    "make_env",
    "make_network",
    "policy_and_value",
    "program",
    "step",
    "targets",
    "train",
    "update",
]
