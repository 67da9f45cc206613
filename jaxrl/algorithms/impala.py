"""IMPALA (Espeholt et al., 2018, arXiv:1802.01561): actor-critic with V-trace off-policy
correction for actors that act with stale params.

It is :mod:`jaxrl.algorithms.a2c` with ``advantage="vtrace"``, not a copy. The actors
run in lock-step with the learner here, so ``policy_lag`` makes them act with the
params of that many updates ago, which is the staleness V-trace corrects (``rho_bar``,
``c_bar`` truncate the importance weights)::

    config = impala.Config(env_id="CartPole-v1", policy_lag=4)
    out = jax.jit(impala.train)(jax.random.key(0), config)
"""

from __future__ import annotations

from flax import struct

from jaxrl.algorithms import a2c
from jaxrl.algorithms.a2c import (
    State,
    act,
    evaluate,
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
    """A2C's Config with IMPALA's defaults (see :class:`jaxrl.algorithms.a2c.Config`)."""

    advantage: str = static("vtrace")
    policy_lag: int = static(1)


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
