"""REINFORCE (Williams, 1992): the policy gradient with whole-episode Monte-Carlo returns
and an optional learned baseline.

Each iteration resets every one of the ``num_envs`` envs, runs them for ``num_steps``
steps (by default the env's time limit, so every first episode ends) and learns from
each env's first episode alone, in one gradient step (the loss and update of
:class:`jaxrl.algorithms.policy_gradient.PolicyGradient`): keeping later, partial
episodes would favour short ones. The returns bootstrap only at time-limit truncations,
and only from a learned ``baseline``, which is then subtracted from them. ``timesteps``
counts every simulated step; the reported episodes are the first ones. ::

    config = reinforce.Config(env_id="CartPole-v1", env_kwargs={"max_steps_in_episode": 200})
    out = jax.jit(reinforce.train)(jax.random.key(0), config)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import envs, returns, rollout
from jaxrl.algorithms import onpolicy
from jaxrl.algorithms.policy_gradient import PolicyGradient, normalized, step_mask
from jaxrl.config import freeze_mapping, require_choice, static
from jaxrl.types import Trajectory


@struct.dataclass
class Config(onpolicy.SingleAgent, onpolicy.Config):
    """REINFORCE settings: :class:`jaxrl.algorithms.onpolicy.Config`'s with REINFORCE's
    defaults, :class:`jaxrl.algorithms.onpolicy.SingleAgent`'s (reward scaling, gSDE),
    the baseline and advantage normalisation. Static fields fix the program; the rest
    can be traced and vmapped."""

    num_envs: int = static(8)
    num_steps: Any = static(None)  # None: the env's time limit, so that every first episode ends
    total_timesteps: int = static(200_000)
    anneal_lr: bool = static(False)
    normalize_advantages: bool = static(True)
    baseline: bool = static(True)  # learn the critic's value and subtract it from the returns
    # Solves CartPole-v1 at 200k steps where 3e-3 was too slow (benchmarks/RESULTS.md's
    # learning table).
    learning_rate: float = 1e-2

    def __post_init__(self):
        # num_steps=None resolves from the env before the shared checks run.
        object.__setattr__(self, "env_kwargs", freeze_mapping(self.env_kwargs, "env_kwargs"))
        time_limit = envs.config_spec(self).max_episode_steps
        if self.num_steps is None:
            if time_limit is None:
                raise ValueError(f"num_steps=None (the env's time limit) needs an env with a time limit: {self.env_id}")
            object.__setattr__(self, "num_steps", time_limit)
        super().__post_init__()
        require_choice(self, "baseline", (True, False))
        if self.num_steps < (time_limit or 0):
            raise ValueError(
                f"REINFORCE uses whole episodes: num_steps ({self.num_steps}) must be at least the env's time limit "
                f"({time_limit}); pass num_steps=None for exactly that"
            )


PRESETS = {}


def first_episode_mask(trajectory: Trajectory) -> jax.Array:
    """``[T, N]`` True up to and including each env's first episode end."""
    done = trajectory.done.astype(jnp.int32)
    return (jnp.cumsum(done, axis=0) - done) == 0


def targets(value: jax.Array, value_next: jax.Array, log_prob: jax.Array, trajectory: Trajectory, config: Config):
    """Each env's first episode's discounted returns as value targets, the returns less
    the critic's value (without ``baseline``: the returns) as advantages (normalised with
    ``normalize_advantages`` over those steps) and the mask of those steps, all ``[T,
    N]``; ``log_prob`` is not needed (REINFORCE is on-policy)."""
    r, term, trunc = trajectory.reward, trajectory.terminated, trajectory.truncated
    mask = step_mask(trajectory)
    # Bootstrapped only at time-limit truncations, and only from a learned baseline.
    target = returns.discounted_returns(
        r, value_next if config.baseline else jnp.zeros_like(r), term, trunc, config.gamma
    )
    advantage = target - value if config.baseline else target
    mask = mask & first_episode_mask(trajectory)
    return normalized(advantage, mask, config), target, mask


def collect_episodes(state: onpolicy.State, key: jax.Array, config: Config):
    """Every env reset, then ``num_steps`` steps acting with ``state.params``
    (:func:`jaxrl.algorithms.onpolicy.collect` with ``fresh_start``): each env's first
    episode whole, from its first step."""
    return onpolicy.collect(state, state.params, key, config, fresh_start=True)


def first_episode_metrics(trajectory: Trajectory) -> dict:
    """The episode statistics of the episodes learned from: each env's first."""
    first = first_episode_mask(trajectory)
    return rollout.episode_metrics(
        trajectory.replace(terminated=trajectory.terminated & first, truncated=trajectory.truncated & first)
    )


_learner = PolicyGradient(targets)
init, loss_fn, update = _learner.init, _learner.loss_fn, _learner.update

algorithm = onpolicy.Learner(init, update, collect=collect_episodes, episode_metrics=first_episode_metrics).algorithm(
    "reinforce",
    Config,
    PRESETS,
    summary="REINFORCE: whole-episode Monte-Carlo policy gradient",
)
__getattr__ = algorithm.module_getattr(__name__)  # reinforce.step, reinforce.train, reinforce.preset: the record's
