"""Presets: what ``python -m jaxrl train ALGO --env ENV`` uses by default, on the tasks
where an algorithm's plain defaults fail. A preset's learning is PPO's Pendulum-v1 test
(tests/test_ppo.py) and the memory notebook's MaskedCartPole-v1; ``python
benchmarks/learning_table.py --quick`` runs PPO's MountainCar-v0 with the REINFORCE
CartPole-v1 and TD3 MountainCarContinuous-v0 rows, and the full table every preset
(RESULTS.md)."""

import numpy as np
import pytest

from jaxrl.algorithms import get, ppo


def test_every_algorithm_has_presets_and_the_command_line_uses_them():
    from jaxrl import algorithms
    from jaxrl.workflow import cli

    for name in algorithms.names():
        record = get(name)
        assert all(isinstance(settings, dict) for settings in record.presets.values()) and callable(record.preset), name
    args = cli.build_parser().parse_args(["train", "ppo", "--env", "MountainCar-v0"])
    assert cli.make_config(get("ppo"), args) == ppo.preset("MountainCar-v0")


def test_learning_table_statistics_against_numpy():
    """The table's IQM (a quarter of the seeds, rounded down, trimmed off each end), its
    seeds-at-reference count and steps to the reference, on hand-made evaluations; and
    ``--set``'s parsing."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import learning_table

    rng = np.random.default_rng(0)
    for n in (4, 5, 8):
        values = rng.normal(size=n)
        cut = n // 4
        assert learning_table.iqm(values) == pytest.approx(np.sort(values)[cut : n - cut].mean())
    row = learning_table.Row("ppo", "CartPole-v1", 300)
    result = {"eval_returns": [[100, 500, 500], [100, 200, 499], [500, 400, 500]], "eval_steps": [100, 200, 300]}
    summary = learning_table.summarise(result, row, rng)
    assert summary["reached"] == 2 and summary["steps_to_reference"] == 150  # median of 200 and 100
    assert summary["reached_zoo"] == 2  # rl-baselines3-zoo's PPO: 500 too
    low, high = summary["ci"]
    assert 499 <= low <= summary["iqm"] <= high <= 500
    # A row with a reference of its own: DQN on MinAtar beside the MinAtar paper's DQN (8.3
    # at 500k steps on Breakout), not gymnax-blines' PPO (28 at 10M).
    minatar = learning_table.Row("dqn", "Breakout-MinAtar", 500_000)
    summary = learning_table.summarise({"eval_returns": [[9.0], [5.0]], "eval_steps": [500_000]}, minatar, rng)
    assert summary["reached"] == 1
    # Below 10M a MinAtar PPO row is set beside gymnax-blines' logged run at its budget
    # (linear between the log's points); at 10M, or before the log's first point, beside
    # gymnax's README.
    steps, returns = learning_table.BLINES_LOG_STEPS, learning_table.BLINES_LOG_RETURNS["SpaceInvaders"]
    for budget in rng.integers(steps[0], steps[-1], size=5):
        k = np.searchsorted(steps, budget)
        fraction = (budget - steps[k - 1]) / (steps[k] - steps[k - 1])
        expected = returns[k - 1] + fraction * (returns[k] - returns[k - 1])
        reference = learning_table.reference_for(learning_table.Row("ppo", "SpaceInvaders-MinAtar", int(budget)))
        assert (reference.value, reference.budget) == (pytest.approx(expected, abs=0.05), budget)
    for budget in (10_000_000, 100_000):
        reference = learning_table.reference_for(learning_table.Row("ppo", "SpaceInvaders-MinAtar", budget))
        assert (reference.value, reference.budget) == (131.0, 10_000_000)
    overrides = learning_table.parse_overrides("n_step=3 hidden_sizes=(256,256) exploration=ou")
    assert overrides == {"n_step": 3, "hidden_sizes": (256, 256), "exploration": "ou"}
    # A row's settings replace the preset's fields, and --set replaces the row's.
    (row,) = [row for row in learning_table.ROWS if row.env_id.startswith("xminigrid:")]
    _, config = learning_table.config_for(row, {"learning_rate": 3e-4})
    assert (config.num_envs, config.num_steps, config.learning_rate) == (16, 32, 3e-4)
    assert config.total_timesteps == row.budget and config.num_evals == learning_table.EVALS
    # Every row's settings make a Config (the moved learning tests' settings among them).
    for row in learning_table.ROWS:
        if row.settings:
            _, config = learning_table.config_for(row)
            assert config.replace(**row.settings) == config, row  # each setting in place
