"""Datasets the offline algorithms' tests learn from, built in the test (nothing is
downloaded): mixtures (:func:`jaxrl.data.collect_mixture`) of a policy stopped early and
uniformly random actions, each from fixed seeds, so every run of the suite sees the
same data."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxrl import data
from jaxrl.algorithms import ppo, sac

# SAC on Pendulum-v1 stopped early, about a third of the way from a random policy to an
# expert: D4RL's "medium" (each part's return: data.describe of the dataset).
MEDIUM_PENDULUM_STEPS = 3_000
# PPO on CartPole-v1 stopped after 8,192 env steps: its sampled actions keep the pole up
# for about 150 steps, far from the 500 of a solved policy.
MIXED_CARTPOLE_STEPS = 8_192


def _mixture(algorithm, config, env_id: str, share: float, others=()) -> data.Dataset:
    """20,000 transitions of ``env_id`` on 10 envs: ``share`` from ``algorithm`` trained
    at ``config`` (its sampled actions), then ``others`` (parts), 20% uniformly random."""
    params = jax.jit(algorithm.train)(jax.random.key(0), config).state.params
    parts = [
        data.Part("policy", functools.partial(algorithm.act, config=config), params, (), share),
        *others,
        data.random_part(env_id, 0.2),
    ]
    return data.collect_mixture(parts, env_id, jax.random.key(1), num_steps=20_000, num_envs=10)


def _mostly_left(params, obs, carry, key):
    """CartPole's action 0 (push left) 80% of the time: a poor, consistent behaviour."""
    return jnp.where(jax.random.uniform(key, obs.shape[:1]) < 0.8, 0, 1).astype(jnp.int32), carry


@functools.lru_cache(maxsize=1)
def medium_pendulum() -> data.Dataset:
    """The medium SAC policy above and random actions on Pendulum-v1 (100 episodes)."""
    config = sac.Config(
        env_id="Pendulum-v1", total_timesteps=MEDIUM_PENDULUM_STEPS, learning_starts=1_000, num_evals=0, num_reports=0
    )
    return _mixture(sac, config, "Pendulum-v1", 0.8)


@functools.lru_cache(maxsize=1)
def mixed_cartpole() -> data.Dataset:
    """CartPole-v1: 40% the early PPO policy above, 40% :func:`_mostly_left`, 20% random
    (mean episode return about 22). Behaviour cloning learns the mixture's most common
    action, which is left where the two policies meet, and falls at once (about 10);
    an offline RL algorithm can pick the policy's actions by their returns."""
    config = ppo.preset("CartPole-v1", total_timesteps=MIXED_CARTPOLE_STEPS, num_evals=0, num_reports=0)
    mostly_left = data.Part("mostly left", _mostly_left, (), (), 0.4)
    return _mixture(ppo, config, "CartPole-v1", 0.4, [mostly_left])
