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
from jaxrl.config import static


@struct.dataclass
class Config(a2c.Config):
    """A2C's Config with IMPALA's defaults (see :class:`jaxrl.algorithms.a2c.Config`)."""

    advantage: str = static("vtrace")
    policy_lag: int = static(1)


PRESETS = {}


algorithm = a2c.algorithm.variant(
    "impala",
    Config,
    PRESETS,
    summary="IMPALA: actor-critic with V-trace for actors acting with stale params",
)
__getattr__ = algorithm.module_getattr(__name__)  # impala.train, impala.preset: the record's
