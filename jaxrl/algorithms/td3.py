"""TD3 (Fujimoto et al., 2018): DDPG with clipped double-Q (twin critics), delayed
actor and target updates, and target policy smoothing.

It is :mod:`jaxrl.algorithms.ddpg` with TD3's Config, not a copy: every function is
DDPG's, which reads ``twin_critics``, ``policy_delay``, ``target_noise`` and
``target_noise_clip`` from the Config (constants in DDPG's, fields here). ::

    config = td3.Config(env_id="Pendulum-v1")
    out = jax.jit(td3.train)(jax.random.key(0), config)
"""

from __future__ import annotations

from flax import struct

from jaxrl.algorithms import ddpg
from jaxrl.config import require_int, require_range, static
from jaxrl.exploration import OrnsteinUhlenbeck


@struct.dataclass
class Config(ddpg.Config):
    """DDPG's Config (:class:`jaxrl.algorithms.ddpg.Config`) with TD3's fields: one
    iteration's ``num_updates`` critic updates move the actor ``num_updates /
    policy_delay`` times."""

    ALGORITHM = "TD3"

    twin_critics: bool = static(True)  # the target takes the minimum of two target critics
    policy_delay: int = static(2)  # critic updates per actor / target update
    target_noise: float = 0.2  # target smoothing std, in units of the half action range
    target_noise_clip: float = 0.5

    def __post_init__(self):
        super().__post_init__()
        require_int(self, "policy_delay", 1)
        if self.num_updates % self.policy_delay:
            raise ValueError(
                f"num_updates ({self.num_updates}) must be a multiple of policy_delay ({self.policy_delay}), "
                "so every iteration runs whole actor-update periods"
            )

    def check_traced(self) -> None:
        super().check_traced()
        for field in ("target_noise", "target_noise_clip"):
            require_range(self, field, 0.0, float("inf"))


PRESETS = {
    # Ornstein-Uhlenbeck exploration (rl-baselines3-zoo's choice for TD3 here), sigma 1:
    # its correlated pushes reach the flag, where independent Gaussian noise leaves the
    # policy standing still (benchmarks/RESULTS.md's learning table).
    "MountainCarContinuous-v0": dict(exploration=OrnsteinUhlenbeck(sigma=1.0), total_timesteps=60_000),
}


algorithm = ddpg.algorithm.variant(
    "td3",
    Config,
    PRESETS,
    summary="TD3: DDPG with twin critics, a delayed actor and target smoothing",
)
__getattr__ = algorithm.module_getattr(__name__)  # td3.train, td3.preset: the record's
