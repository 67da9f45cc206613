"""Presets that learn: what ``python -m jaxrl train ALGO --env ENV`` uses by default, on
the tasks where an algorithm's plain defaults fail (benchmarks/learning_table.py has the
full table). Each test states env, budget and threshold and checks a majority of 4
vmapped seeds' final deterministic evaluation (32 episodes)."""

import jax
import numpy as np
import pytest

from jaxrl.algorithms import get, ppo, reinforce, td3


def final_returns(module, config) -> np.ndarray:
    out = jax.jit(jax.vmap(module.train, in_axes=(0, None)))(jax.random.split(jax.random.key(0), 4), config)
    evals = np.asarray(out.metrics["eval_return"])
    return evals[:, ~np.isnan(evals[0])][:, -1]


EVAL = dict(num_evals=1, eval_episodes=32, num_reports=0)


def test_every_algorithm_has_presets_and_the_command_line_uses_them():
    from jaxrl import algorithms, cli

    for name in algorithms.ALGORITHMS:
        module = get(name)
        assert isinstance(module.PRESETS, dict) and callable(module.preset), name
    args = cli.build_parser().parse_args(["train", "ppo", "--env", "MountainCar-v0"])
    assert cli.make_config(get("ppo"), args) == ppo.preset("MountainCar-v0")


@pytest.mark.slow
def test_reinforce_defaults_solve_cartpole():
    """CartPole-v1 at REINFORCE's defaults (8 envs of whole episodes, learning rate 1e-2)
    and its default budget, 200k env steps: >= 475 in at least 3 of 4 seeds."""
    final = final_returns(reinforce, reinforce.Config(**EVAL))
    assert np.sum(final >= 475) >= 3, final


@pytest.mark.slow
def test_ppo_preset_solves_mountain_car():
    """MountainCar-v0 at PPO's preset (observation normalisation, 16 x 16 steps, GAE
    lambda 0.98), 1M env steps: >= -125 in at least 3 of 4 seeds, near gymnax-blines'
    trained agent (-118), which the seeds' final policies straddle; the defaults never
    leave the valley (-200)."""
    final = final_returns(ppo, ppo.preset("MountainCar-v0", **EVAL))
    assert np.sum(final >= -125) >= 3, final


@pytest.mark.slow
def test_td3_preset_solves_mountain_car_continuous():
    """MountainCarContinuous-v0 at TD3's preset (Ornstein-Uhlenbeck exploration, sigma
    1), 60k env steps: >= 85 (the flag reached with little fuel spent) in at least 3 of
    4 seeds; with Gaussian noise TD3 learns to stand still (0)."""
    final = final_returns(td3, td3.preset("MountainCarContinuous-v0", **EVAL))
    assert np.sum(final >= 85) >= 3, final
