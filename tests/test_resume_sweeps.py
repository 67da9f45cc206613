"""Sweeps and PBT in chunks: logged per lane with its hyper-parameters, checkpointed, and
resumed after the process is killed, equal bit for bit to the run that never stopped.

This module's processes share JAX's persistent cache in one directory (jaxrl's program
cache stays off in-process), so that a killed process and a resume load what the
uninterrupted run compiled: ``pbt.train`` compiles its programs anew at every call."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from interrupt import kill_after_checkpoints
from xla_cache import persistent_cache

from jaxrl.algorithms import ppo
from jaxrl.workflow import pbt, saved, sweep
from jaxrl.workflow.options import RunOptions

pytestmark = pytest.mark.slow  # compiles or runs whole training programs: see pyproject.toml

# 8 iterations of 64 env steps, 4 chunks of 2.
SWEEP_CONFIG = ppo.Config(
    total_timesteps=512,
    num_envs=4,
    num_steps=16,
    hidden_sizes=(16, 16),
    num_evals=4,
    num_reports=0,
    num_minibatches=2,
    num_epochs=2,
    normalize_observations=True,
)
SETTINGS = {"learning_rate": [3e-4, 3e-3]}
SEEDS = 2
# 16 iterations in 4 rounds of 4, one round a chunk.
PBT_CONFIG = SWEEP_CONFIG.replace(total_timesteps=1024)
BOUNDS = {"learning_rate": (1e-4, 3e-3), "ent_coef": (1e-4, 0.05)}
POPULATION, INTERVAL = 4, 4


@pytest.fixture(scope="module", autouse=True)
def cache_dir(tmp_path_factory):
    """This module's cache directory, on for its tests (the command line's too) and off again after."""
    directory = tmp_path_factory.mktemp("xla-cache")
    with persistent_cache(directory, JAXRL_CACHE_DIR=str(directory)):
        yield directory


def killed(run: str, logdir, cache) -> str:
    """The call, for :func:`interrupt.kill_after_checkpoints`, of ``run(logdir)`` with this module's cache."""
    return f"from xla_cache import use_cache; use_cache({str(cache)!r}); t.{run}({str(logdir)!r})"


def run_sweep(logdir, resume=False):
    return sweep.run(
        "ppo",
        SWEEP_CONFIG,
        SETTINGS,
        seeds=SEEDS,
        chunk_iterations=2,
        options=RunOptions(logdir=logdir, loggers=("csv", "jsonl"), checkpoint_every=1, resume=resume),
    )


def run_pbt(logdir, resume=False):
    return pbt.train(
        "ppo",
        PBT_CONFIG,
        BOUNDS,
        population=POPULATION,
        interval=INTERVAL,
        rounds_per_chunk=1,
        options=RunOptions(logdir=logdir, loggers=("csv", "jsonl"), checkpoint_every=1, resume=resume),
    )


def leaves(tree):
    return [
        np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x)
        for x in jax.tree.leaves(tree)
    ]


def assert_trees_equal(a, b):
    for x, y in zip(leaves(a), leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.fixture(scope="module")
def straight_sweep(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("sweep") / "run"
    return logdir, run_sweep(logdir)


@pytest.fixture(scope="module")
def straight_pbt(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("pbt") / "run"
    return logdir, run_pbt(logdir)


def test_a_chunked_sweep_equals_the_one_program_sweep(straight_sweep):
    _, chunked = straight_sweep
    fused = sweep.run("ppo", SWEEP_CONFIG, SETTINGS, seeds=SEEDS)
    assert chunked.metrics["eval_return"].shape == fused.metrics["eval_return"].shape == (2, SEEDS, 8)
    for name, values in fused.metrics.items():
        np.testing.assert_allclose(chunked.metrics[name], values, rtol=1e-4, atol=1e-5, err_msg=name)
    for x, y in zip(leaves(chunked.state.params), leaves(fused.state.params), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6)


def test_sweep_logs_one_row_per_lane_with_its_setting(straight_sweep):
    logdir, result = straight_sweep
    with open(logdir / "metrics.csv") as f:
        rows = [row for row in csv.DictReader(f) if row["seed"] != "mean"]
    assert len(rows) == 8 * 2 * SEEDS  # iterations x lanes
    for row in rows:
        lane = int(row["seed"])
        setting = lane // SEEDS
        assert int(row["setting"]) == setting
        assert float(row["sweep_learning_rate"]) == pytest.approx(SETTINGS["learning_rate"][setting])
        assert row["learning_rate"]  # PPO's own metric (the annealed rate) is kept beside it
        logged = row["episode_return"]
        expected = result.metrics["episode_return"][setting, lane % SEEDS, int(row["iteration"]) - 1]
        assert (logged == "" and np.isnan(expected)) or float(logged) == pytest.approx(expected, rel=1e-6)


def test_a_killed_sweep_resumes_to_the_uninterrupted_sweep(straight_sweep, cache_dir, tmp_path):
    straight_dir, straight = straight_sweep
    logdir = tmp_path / "run"
    kill_after_checkpoints("test_resume_sweeps", killed("run_sweep", logdir, cache_dir), tmp_path)
    resumed = run_sweep(logdir, resume=True)
    for name, values in straight.metrics.items():
        np.testing.assert_array_equal(resumed.metrics[name], values, err_msg=name)
    assert_trees_equal(resumed.state, straight.state)
    for log in ("metrics.csv", "metrics.jsonl"):
        assert (logdir / log).read_text() == (straight_dir / log).read_text()


def test_a_sweep_with_the_old_keywords_warns_and_runs_as_with_options(straight_sweep, tmp_path):
    _, straight = straight_sweep
    with pytest.warns(DeprecationWarning, match=r"pass options=RunOptions\(logdir=..., checkpoint_every=...\)"):
        old = sweep.run("ppo", SWEEP_CONFIG, SETTINGS, SEEDS, chunk_iterations=2, logdir=tmp_path, checkpoint_every=1)
    for name, values in straight.metrics.items():
        np.testing.assert_array_equal(old.metrics[name], values, err_msg=name)
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        sweep.run("ppo", SWEEP_CONFIG, SETTINGS, logdri=tmp_path)


def test_resuming_a_sweep_with_other_settings_is_a_clear_error(straight_sweep):
    logdir, _ = straight_sweep
    with pytest.raises(ValueError, match="from a different run; settings: saved"):
        sweep.run(
            "ppo",
            SWEEP_CONFIG,
            {"learning_rate": [1e-4, 3e-3]},
            seeds=SEEDS,
            chunk_iterations=2,
            options=RunOptions(logdir=logdir, resume=True),
        )


def test_pbt_in_chunks_logs_each_members_hyperparameters_and_lineage(straight_pbt):
    logdir, result = straight_pbt
    rounds = 16 // INTERVAL
    assert result.parents.shape == result.scores.shape == (rounds, POPULATION)
    assert result.hyperparams["learning_rate"].shape == (rounds + 1, POPULATION)
    assert not any(name.startswith("pbt_") for name in result.metrics)
    np.testing.assert_array_equal(result.parents[-1], np.arange(POPULATION))
    with open(logdir / "metrics.csv") as f:
        rows = [row for row in csv.DictReader(f) if row["seed"] != "mean"]
    assert len(rows) == 16 * POPULATION
    for row in rows:
        member, round_index = int(row["seed"]), (int(row["iteration"]) - 1) // INTERVAL
        for field in BOUNDS:
            expected = result.hyperparams[field][round_index, member]
            assert float(row[f"pbt_{field}"]) == pytest.approx(expected, rel=1e-6)
        assert float(row["pbt_parent"]) == result.parents[round_index, member]


def test_a_killed_population_resumes_to_the_uninterrupted_one(straight_pbt, cache_dir, tmp_path):
    straight_dir, straight = straight_pbt
    logdir = tmp_path / "run"
    kill_after_checkpoints("test_resume_sweeps", killed("run_pbt", logdir, cache_dir), tmp_path)
    resumed = run_pbt(logdir, resume=True)
    for name, values in straight.metrics.items():
        np.testing.assert_array_equal(resumed.metrics[name], values, err_msg=name)
    for name, values in straight.hyperparams.items():
        np.testing.assert_array_equal(resumed.hyperparams[name], values, err_msg=name)
    np.testing.assert_array_equal(resumed.parents, straight.parents)
    np.testing.assert_array_equal(resumed.scores, straight.scores)
    assert_trees_equal(resumed.state, straight.state)
    for log in ("metrics.csv", "metrics.jsonl"):
        assert (logdir / log).read_text() == (straight_dir / log).read_text()


@pytest.mark.parametrize("kind", ["sweep", "pbt"])
def test_evaluate_repeats_the_final_evaluation_of_every_lane_or_member(kind, straight_sweep, straight_pbt):
    from jaxrl.workflow import saved

    logdir, result = straight_sweep if kind == "sweep" else straight_pbt
    run = saved.load(logdir)
    assert run.lanes == (2 * SEEDS if kind == "sweep" else POPULATION)
    evaluated = np.asarray(saved.evaluate(run, run.eval_keys()).returns).mean(axis=1)
    final = result.metrics["eval_return"][..., -1].reshape(-1)  # [lanes]
    np.testing.assert_allclose(evaluated, final, rtol=1e-6)


def test_pbt_chunking_errors_are_clear():
    with pytest.raises(ValueError, match=r"rounds_per_chunk must be an int in \[1, 4\]"):
        pbt.train("ppo", PBT_CONFIG, BOUNDS, population=POPULATION, interval=INTERVAL, rounds_per_chunk=5)
    with pytest.raises(ValueError, match="need a logdir"):
        pbt.train("ppo", PBT_CONFIG, BOUNDS, population=POPULATION, interval=INTERVAL, options=RunOptions(resume=True))


# ----------------------------------------------------------------------------- command line

# SWEEP_CONFIG and SEEDS: the command-line runs below are the in-process ones, and take
# their programs (the sweep's from this process, the population's from the cache).
SMALL = [
    "--no-preset",
    "--seeds",
    "2",
    "--set",
    "num_envs=4",
    "--set",
    "num_steps=16",
    "--set",
    "hidden_sizes=16,16",
    "--set",
    "num_evals=4",
    "--set",
    "num_minibatches=2",
    "--set",
    "num_epochs=2",
    "--set",
    "normalize_observations=true",
    "--set",
    "num_reports=0",
]


def test_cli_sweep_with_a_logdir_runs_in_chunks_and_resumes(tmp_path, capsys):
    from jaxrl.workflow import cli

    logdir = tmp_path / "sweep"
    command = ["sweep", "ppo", "--total-timesteps", "512", *SMALL, "--grid", "lr=3e-4,3e-3", "--chunks", "4"]
    command += ["--logdir", str(logdir), "--checkpoint-every", "1", "--loggers", "csv"]
    assert cli.main(command) == 0
    first = capsys.readouterr().out
    assert json.loads((logdir / "run.json").read_text())["settings"] == {"learning_rate": [3e-4, 3e-3]}
    assert {"setting", "sweep_learning_rate"} <= set((logdir / "metrics.csv").read_text().splitlines()[0].split(","))
    assert cli.main([*command, "--resume"]) == 0  # finished: the summary again, from the last checkpoint
    table = lambda out: out[out.index("final eval_return") :]  # noqa: E731
    assert table(capsys.readouterr().out) == table(first)


def test_cli_pbt_trains_a_population_and_logs_its_members(tmp_path, capsys):
    from jaxrl.workflow import cli

    logdir = tmp_path / "pbt"
    command = ["pbt", "ppo", "--total-timesteps", "1024", *SMALL, "--population", "4", "--interval", "4"]
    command += ["--bounds", "lr=1e-4:3e-3", "--bounds", "ent_coef=1e-4:0.05"]  # BOUNDS
    command += ["--logdir", str(logdir), "--checkpoint-every", "1", "--out", str(tmp_path / "m.csv")]
    assert cli.main(command) == 0
    out = capsys.readouterr().out
    assert "member learning_rate ent_coef eval_return last_score lineage" in " ".join(out.split())
    with open(tmp_path / "m.csv") as f:
        members = list(csv.DictReader(f))
    assert [int(m["member"]) for m in members] == [0, 1, 2, 3]
    for member in members:  # bounds in float32
        for field, (low, high) in BOUNDS.items():
            assert low * (1 - 1e-6) <= float(member[field]) <= high * (1 + 1e-6)
        assert len(member["lineage"].split("-")) == 5  # rounds + 1
    header = (logdir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"pbt_learning_rate", "pbt_score", "pbt_parent"} <= set(header)


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "give at least one --bounds field=low:high"),
        (["--bounds", "lr=abc"], "cannot parse --bounds learning_rate='abc': expected low:high"),
        (["--bounds", "lr=1e-4:1e-3", "--interval", "7"], "--interval must be an int >= 1 dividing the run's"),
        (["--bounds", "num_envs=1:8"], "'num_envs' is a static field"),
        (["--bounds", "lr=1e-4:1e-3", "--resume"], "need a logdir"),
    ],
)
def test_cli_pbt_bad_input_is_one_line_and_exit_status_2(args, message, capsys):
    from jaxrl.workflow import cli

    assert cli.main(["pbt", "ppo", "--total-timesteps", "1024", *SMALL, "--interval", "4", *args]) == 2
    assert message in capsys.readouterr().err


# ----------------------------------------------------------------------------- on 4 devices, from the command line

# Every process of one comparison compiles alike, on 4 forced host devices (beside the
# suite's own XLA flags).
FOUR_DEVICES = "--xla_force_host_platform_device_count=4"
COMMANDS = {
    "sweep": ["sweep", "ppo", "--total-timesteps", "512", *SMALL, "--grid", "lr=3e-4,3e-3"],  # 2 x 2 lanes
    "pbt": ["pbt", "ppo", "--total-timesteps", "1024", *SMALL, "--bounds", "lr=1e-4:3e-3", "--population", "4"],
}


def on_four_devices(kind: str, logdir, *more) -> list[str]:
    """``kind``'s command, its lanes over 4 devices, in 4 chunks, each checkpointed."""
    rounds = ["--interval", "4"] if kind == "pbt" else []
    options = ["--devices", "4", "--chunks", "4", "--checkpoint-every", "1", "--loggers", "csv,jsonl"]
    return [*COMMANDS[kind], *rounds, *options, "--logdir", str(logdir), *more]


def cli_main(args: list[str]) -> None:
    """The command line in this process (the killed run's)."""
    from jaxrl.workflow import cli

    assert cli.main(args) == 0


def python_m_jaxrl(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jaxrl", *args], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("kind", ["sweep", "pbt"])
def test_on_4_devices_a_killed_command_line_run_resumes_bit_for_bit(kind, tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", f"{os.environ.get('XLA_FLAGS', '')} {FOUR_DEVICES}".strip())
    straight_dir, logdir = tmp_path / "straight", tmp_path / "run"
    straight_run = python_m_jaxrl(on_four_devices(kind, straight_dir))
    assert straight_run.returncode == 0, straight_run.stderr[-3000:]
    kill_after_checkpoints("test_resume_sweeps", f"t.cli_main({on_four_devices(kind, logdir)!r})", tmp_path)
    resumed_run = python_m_jaxrl(on_four_devices(kind, logdir, "--resume"))
    assert resumed_run.returncode == 0, resumed_run.stderr[-3000:]

    for log in ("metrics.csv", "metrics.jsonl"):  # every logged metric, as written
        assert (logdir / log).read_text() == (straight_dir / log).read_text()
    straight, resumed = saved.load(straight_dir), saved.load(logdir)
    assert resumed.lanes == straight.lanes == 4 and resumed.step == straight.step
    assert_trees_equal(resumed.state, straight.state)  # final params, optimiser state, envs
    assert resumed.history.keys() == straight.history.keys()
    for name, values in straight.history.items():
        np.testing.assert_array_equal(resumed.history[name], values, err_msg=name)


def test_on_4_devices_lanes_that_do_not_divide_and_too_many_devices_are_usage_errors(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", f"{os.environ.get('XLA_FLAGS', '')} {FOUR_DEVICES}".strip())
    script = """
import sys
from jaxrl.workflow import cli
for args in (["sweep", "ppo", "--grid", "lr=1e-3,3e-3", "--seeds", "3"],
             ["pbt", "ppo", "--bounds", "lr=1e-4:1e-3", "--population", "6", "--interval", "1"],
             ["train", "ppo", "--devices", "5"]):
    assert cli.main(args + ["--devices", "4"] * ("--devices" not in args)) == 2
"""
    checked = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert checked.returncode == 0, checked.stderr[-3000:]
    errors = checked.stderr.strip().splitlines()
    assert "6 lanes do not divide over the mesh's 4 devices" in errors[0]
    assert "6 lanes do not divide over the mesh's 4 devices" in errors[1]
    assert "--devices 5: there are 4 device(s)" in errors[2]
