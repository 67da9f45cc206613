"""Advantage actor-critic (A2C; Mnih et al., 2016, arXiv:1602.01783).

Each iteration collects ``num_steps`` steps from ``num_envs`` envs (the lock-step JAX
form of A3C's parallel actors) and takes one gradient step on::

    loss = -mean(log pi(a|s) * A) + vf_coef * 0.5 * mean((v(s) - target)^2) - ent_coef * entropy

with GAE(lambda) advantages ``A`` from the critic (:func:`targets`); ``gae_lambda=1`` is
the classic n-step return to the end of the rollout. The loss and the update are
:class:`jaxrl.algorithms.policy_gradient.PolicyGradient`'s, which REINFORCE
(:mod:`~jaxrl.algorithms.reinforce`, Monte-Carlo returns) and IMPALA
(:mod:`~jaxrl.algorithms.impala`, V-trace) build from their own targets. ::

    config = a2c.Config(env_id="CartPole-v1")
    out = jax.jit(a2c.train)(jax.random.key(0), config)
"""

from __future__ import annotations

import warnings
from typing import Any

import jax
from flax import struct

from jaxrl import returns
from jaxrl.algorithms import onpolicy, reinforce
from jaxrl.algorithms.policy_gradient import PolicyGradient, normalized, step_mask
from jaxrl.config import require_choice, require_range, static
from jaxrl.types import Trajectory


@struct.dataclass
class Config(onpolicy.SingleAgent, onpolicy.Config):
    """A2C settings: :class:`jaxrl.algorithms.onpolicy.Config`'s with A2C's defaults,
    :class:`jaxrl.algorithms.onpolicy.SingleAgent`'s (reward scaling, gSDE), GAE's
    lambda, the optimiser and advantage normalisation. Static fields fix the program;
    the rest can be traced and vmapped."""

    num_envs: int = static(16)
    num_steps: Any = static(8)
    total_timesteps: int = static(200_000)
    optimizer: str = static("adam")  # "adam" or "rmsprop" (the A2C paper's)
    normalize_advantages: bool = static(False)
    learning_rate: float = 1e-3
    gae_lambda: float = 0.95  # 1: n-step returns to the rollout's end

    def __post_init__(self):
        require_choice(self, "optimizer", onpolicy.OPTIMIZERS)
        super().__post_init__()

    def check_traced(self) -> None:
        super().check_traced()
        require_range(self, "gae_lambda", 0.0, 1.0)


PRESETS = {
    # No entropy bonus and a learning rate of 3e-3 (the defaults otherwise): a hand sweep
    # at gymnax-blines' 150k-step budget, in benchmarks/RESULTS.md's learning table.
    "CartPole-v1": dict(total_timesteps=150_000, ent_coef=0.0, learning_rate=3e-3),
    # rl-baselines3-zoo's A2C for MountainCar-v0 normalises observations, has no entropy
    # bonus and trains 1M steps; GAE lambda 0.98 (PPO's MountainCar preset) and a learning
    # rate of 3e-3 from a hand sweep there (benchmarks/RESULTS.md's learning table).
    "MountainCar-v0": dict(
        total_timesteps=1_000_000,
        normalize_observations=True,
        ent_coef=0.0,
        gae_lambda=0.98,
        learning_rate=3e-3,
    ),
}


def targets(value: jax.Array, value_next: jax.Array, log_prob: jax.Array, trajectory: Trajectory, config: Config):
    """GAE(lambda) advantages (normalised with ``normalize_advantages``), value targets
    and the mask of steps to learn from, all ``[T, N]``, from the learner's critic on
    ``obs`` / ``next_obs`` (``log_prob`` is not needed: A2C is on-policy)."""
    r, term, trunc = trajectory.reward, trajectory.terminated, trajectory.truncated
    mask = step_mask(trajectory)
    advantage = returns.gae(r, value, value_next, term, trunc, config.gamma, config.gae_lambda)
    target = advantage + value
    return normalized(advantage, mask, config), target, mask


_learner = PolicyGradient(targets)
init, loss_fn, update = _learner.init, _learner.loss_fn, _learner.update

algorithm = onpolicy.Learner(init, update).algorithm(
    "a2c",
    Config,
    PRESETS,
    summary="Advantage actor-critic: one gradient step per rollout, GAE(lambda) advantages",
)
__getattr__ = algorithm.module_getattr(__name__)  # a2c.step, a2c.train, a2c.preset: the record's


def first_episode_mask(trajectory: Trajectory) -> jax.Array:
    """Deprecated: :func:`jaxrl.algorithms.reinforce.first_episode_mask` (REINFORCE is its own module)."""
    warnings.warn(
        "a2c.first_episode_mask moved to jaxrl.algorithms.reinforce.first_episode_mask",
        DeprecationWarning,
        stacklevel=2,
    )
    return reinforce.first_episode_mask(trajectory)
