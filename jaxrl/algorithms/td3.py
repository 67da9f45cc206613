"""TD3 (Fujimoto et al., 2018): DDPG with clipped double-Q (twin critics), delayed
actor and target updates, and target policy smoothing.

It is :mod:`jaxrl.algorithms.ddpg` with TD3's defaults, not a copy: every function is
DDPG's, and ``ddpg.Config(twin_critics=True, policy_delay=2, target_noise=0.2)`` is the
same algorithm. ::

    config = td3.Config(env_id="Pendulum-v1")
    out = jax.jit(td3.train)(jax.random.key(0), config)
"""

from __future__ import annotations

from flax import struct

from jaxrl.algorithms import ddpg
from jaxrl.config import static


@struct.dataclass
class Config(ddpg.Config):
    """DDPG's Config with TD3's defaults (see :class:`jaxrl.algorithms.ddpg.Config`)."""

    ALGORITHM = "TD3"

    twin_critics: bool = static(True)
    policy_delay: int = static(2)
    target_noise: float = 0.2


PRESETS = {
    # Ornstein-Uhlenbeck exploration (rl-baselines3-zoo's choice for TD3 here), sigma 1:
    # its correlated pushes reach the flag, where independent Gaussian noise leaves the
    # policy standing still (benchmarks/RESULTS.md's learning table).
    "MountainCarContinuous-v0": dict(exploration="ou", exploration_noise=1.0, total_timesteps=60_000),
}


algorithm = ddpg.algorithm.variant(
    "td3",
    Config,
    PRESETS,
    summary="TD3: DDPG with twin critics, a delayed actor and target smoothing",
)
__getattr__ = algorithm.module_getattr(__name__)  # td3.train, td3.preset: the record's
