"""Sweeps (jaxrl.workflow.sweep): grids, one compiled program for every lane, and the statistics."""

from __future__ import annotations

import json
import math

import jax
import numpy as np
import pytest

from jaxrl.algorithms import ppo
from jaxrl.workflow import cli, runner, sweep

# 8 iterations of 64 env steps: small enough to also run every lane on its own.
CONFIG = ppo.Config(
    total_timesteps=512,
    num_envs=4,
    num_steps=16,
    hidden_sizes=(16, 16),
    num_evals=2,
    num_reports=0,
    num_minibatches=2,
    num_epochs=2,
)
LEARNING_RATES = [1e-4, 3e-4, 1e-3, 3e-3]
SEEDS = 3


def test_grid_is_the_cartesian_product():
    settings = sweep.grid(learning_rate=[1, 2], gamma=[0.9, 0.99, 0.999])
    pairs = list(zip(settings["learning_rate"], settings["gamma"]))
    assert pairs == [(a, b) for a in [1, 2] for b in [0.9, 0.99, 0.999]]
    with pytest.raises(ValueError, match="non-empty list"):
        sweep.grid(learning_rate=[])


def test_random_settings_stay_in_their_ranges():
    settings = sweep.random_settings(500, seed=1, learning_rate=(1e-5, 1e-2, "log"), gamma=(0.9, 0.999))
    lr, gamma = settings["learning_rate"], settings["gamma"]
    assert lr.shape == gamma.shape == (500,)
    assert np.all((1e-5 <= lr) & (lr <= 1e-2)) and np.all((0.9 <= gamma) & (gamma <= 0.999))
    # log-uniform: about half the draws below the geometric middle
    assert 0.4 < np.mean(lr < math.sqrt(1e-5 * 1e-2)) < 0.6
    with pytest.raises(ValueError, match="low > 0 for 'log'"):
        sweep.random_settings(3, learning_rate=(0.0, 1.0, "log"))


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"hidden_sizes": [1, 2]}, "'hidden_sizes' is a static field of Config .* loop over its values on the host"),
        ({"num_envs": [4, 8]}, "'num_envs' is a static field"),
        ({"learnin_rate": [1e-3]}, "has no field 'learnin_rate'. Did you mean 'learning_rate'"),
        ({"learning_rate": [1e-3, 1e-4], "gamma": [0.9]}, "same number of values"),
        ({"learning_rate": [-1.0]}, "out of range: learning_rate must lie in"),
        ({"env_id": ["a"]}, "static field"),
        ({}, "at least one field"),
    ],
)
def test_bad_sweeps_are_clear_errors(settings, message):
    with pytest.raises(ValueError, match=message):
        sweep.run("ppo", CONFIG, settings)


def test_iqm_against_a_sorted_loop():
    rng = np.random.default_rng(0)
    for n in range(1, 13):
        values = rng.normal(size=n)
        ordered = sorted(values)
        cut = n // 4
        middle = ordered[cut : n - cut]
        assert sweep.iqm(values) == pytest.approx(sum(middle) / len(middle))
    table = rng.normal(size=(5, 8))
    np.testing.assert_allclose(sweep.iqm(table, axis=1), [sweep.iqm(row) for row in table])


def test_bootstrap_ci_against_a_resampling_loop():
    values = np.random.default_rng(1).normal(size=7)
    low, high = sweep.bootstrap_ci(values, level=0.9, resamples=500, seed=3)
    rng = np.random.default_rng(3)
    draws = rng.integers(0, 7, size=(500, 7))
    means = sorted(sum(values[i] for i in draw) / 7 for draw in draws)

    # numpy's default percentile interpolates linearly between order statistics
    def percentile(q):
        position = q / 100 * (len(means) - 1)
        below = math.floor(position)
        return means[below] + (position - below) * (means[min(below + 1, len(means) - 1)] - means[below])

    assert low == pytest.approx(percentile(5)) and high == pytest.approx(percentile(95))
    assert low < np.mean(values) < high


def test_summarize_and_best_on_known_scores():
    eval_return = np.full((2, 4, 3), np.nan)
    eval_return[0, :, 1] = [1.0, 2.0, 3.0, 4.0]
    eval_return[1, :, 2] = [10.0, 10.0, 30.0, 100.0]
    eval_return[1, 0, 1] = 999.0  # not the last evaluation: ignored
    result = sweep.SweepResult({"learning_rate": np.array([1e-3, 1e-4])}, {"eval_return": eval_return}, None, 0, 0)
    rows = sweep.summarize(result)
    assert rows[0]["learning_rate"] == 1e-3 and rows[0]["mean"] == 2.5 and rows[0]["iqm"] == 2.5
    assert rows[0]["stderr"] == pytest.approx(np.std([1, 2, 3, 4], ddof=1) / 2)
    assert rows[1]["mean"] == 37.5 and rows[1]["iqm"] == 20.0
    assert rows[1]["ci_low"] <= 37.5 <= rows[1]["ci_high"]
    assert sweep.best(rows) is rows[1] and sweep.best(rows, by="iqm") is rows[1]
    assert "*" in sweep.format_table(rows).splitlines()[2]


@pytest.mark.slow
def test_a_grid_compiles_once_and_every_lane_equals_its_own_run():
    runner._cached_programs.cache_clear()  # whatever ran before, this sweep compiles its own programs
    jax.random.split(jax.random.key(0), SEEDS)  # compile the key split outside the count
    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, duration, fun_name="", **kwargs: (
            compiles.append(fun_name) if event.endswith("backend_compile_duration") else None
        )
    )
    result = sweep.run("ppo", CONFIG, sweep.grid(learning_rate=LEARNING_RATES), seeds=SEEDS)
    # one program initialises every lane and one runs a chunk of every lane (the chunks
    # are all as long); besides them only a scalar cast and the results' reshape
    training = [name for name in compiles if name not in ("jit(convert_element_type)", "jit(_by_setting)")]
    assert training == ["jit(init_all)", "jit(chunk)"], compiles
    assert result.metrics["eval_return"].shape == (4, SEEDS, 8)
    np.testing.assert_array_equal(result.settings["learning_rate"], LEARNING_RATES)

    single = jax.jit(ppo.train)
    keys = jax.random.split(jax.random.key(0), SEEDS)
    for c, lr in enumerate(LEARNING_RATES):
        for s in range(SEEDS):
            out = single(keys[s], CONFIG.replace(learning_rate=lr))
            # vmapped and single programs may round differently: equal to float tolerance
            np.testing.assert_allclose(
                result.metrics["policy_loss"][c, s], out.metrics["policy_loss"], rtol=1e-3, atol=1e-5
            )
            np.testing.assert_allclose(result.metrics["eval_return"][c, s], out.metrics["eval_return"], rtol=1e-4)
            for lane, alone in zip(jax.tree.leaves(result.state.params), jax.tree.leaves(out.state.params)):
                np.testing.assert_allclose(lane[c, s], alone, rtol=1e-3, atol=1e-5)
    # the learning rates really differ per lane: the final policies are not all the same
    first_leaf = jax.tree.leaves(result.state.params["network"])[0]
    assert not np.allclose(first_leaf[0, 0], first_leaf[3, 0])


@pytest.mark.slow
def test_sweep_command_prints_and_writes_the_summary(tmp_path, capsys):
    # The grid above on CONFIG: the command line runs the programs compiled for it.
    out = tmp_path / "summary.json"
    args = [
        "sweep",
        "ppo",
        "--no-preset",
        "--no-cache",
        "--seeds",
        "3",
        "--total-timesteps",
        "512",
        "--set",
        "num_envs=4",
        "--set",
        "num_steps=16",
        "--set",
        "hidden_sizes=16,16",
        "--set",
        "num_evals=2",
        "--set",
        "num_reports=0",
        "--set",
        "num_minibatches=2",
        "--set",
        "num_epochs=2",
        "--grid",
        "lr=1e-4,3e-4,1e-3,3e-3",
        "--out",
        str(out),
    ]
    assert cli.main(args) == 0
    printed = capsys.readouterr().out
    assert "learning_rate" in printed and "ci_low" in printed and " *" in printed
    rows = json.loads(out.read_text())
    assert [row["learning_rate"] for row in rows] == LEARNING_RATES and all(row["seeds"] == SEEDS for row in rows)
    csv_out = tmp_path / "summary.csv"
    assert cli.main(args[:-1] + [str(csv_out)]) == 0
    assert csv_out.read_text().splitlines()[0] == "learning_rate,seeds,mean,stderr,iqm,ci_low,ci_high"

    assert cli.main(["sweep", "ppo", "--grid", "hidden_sizes=8,16"]) == cli.USAGE_ERROR
    assert "static field" in capsys.readouterr().err
    assert cli.main(["sweep", "ppo"]) == cli.USAGE_ERROR
    assert "at least one --grid" in capsys.readouterr().err
