"""The Weights & Biases run logger (jaxrl.workflow.logging.WandbLogger), offline: what it writes
is read back from the run's ``.wandb`` transaction log with wandb's own reader."""

from __future__ import annotations

import json
import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from jaxrl.algorithms import ppo
from jaxrl.workflow import logging as jaxrl_logging
from jaxrl.workflow import runner
from jaxrl.workflow.options import RunOptions

pytest.importorskip("wandb")


@pytest.fixture(autouse=True)
def offline_wandb(tmp_path, monkeypatch):
    """No network, nothing in the user's home: W&B offline, its directories in tmp.
    W&B reads the environment once per process (its ``wandb.setup`` singleton), so
    each test starts and ends with the singleton torn down."""
    import wandb

    wandb.teardown()
    for name in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        directory = tmp_path / "wandb-home" / name.lower()
        directory.mkdir(parents=True)
        monkeypatch.setenv(name, str(directory))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    for name in ("WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_ENTITY", "WANDB_PROJECT", "WANDB_NAME", "WANDB_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    for name in ("WANDB_RESUME", "WANDB_RUN_GROUP", "WANDB_TAGS", "WANDB_NOTES", "WANDB_CONSOLE"):
        monkeypatch.delenv(name, raising=False)
    yield
    wandb.teardown()


def read_offline_runs(wandb_dir) -> list[dict]:
    """The offline runs in ``wandb_dir`` (``<logdir>/wandb``), oldest first, each
    ``{"run": run record, "history": [rows]}``. Read with wandb's own transaction-log
    reader, ``wandb leet inspect --json`` (wandb-core decodes each record of the
    ``.wandb`` file to one JSON line)."""
    runs = []
    for path in pathlib.Path(wandb_dir).glob("offline-run-*/run-*.wandb"):
        result = subprocess.run(
            [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        records = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
        run = next(record["run"] for record in records if record["type"] == "run")
        history = [record["history"] for record in records if record["type"] == "history"]
        for row in history:
            assert int(row["step"]["num"]) == row["item"]["_step"]
        runs.append({"run": run, "history": [row["item"] for row in history]})
    return sorted(runs, key=lambda run: run["run"]["start_time"])


def metrics_of(row: dict) -> dict:
    return {key: value for key, value in row.items() if not key.startswith("_")}


def expected_rows(iterations, values: dict, x_name: str) -> list[dict]:
    """What W&B should hold, by a plain loop: per row, the x value, and for every
    metric but the counters each seed's finite value and the mean of those."""
    rows = []
    for row, iteration in enumerate(iterations):
        x = int(max(values[x_name][:, row])) if x_name in values else int(iteration)
        expected = {x_name: x}
        for name, column in values.items():
            if name in ("timesteps", "updates"):
                continue
            finite = [float(v) for v in column[:, row] if math.isfinite(v)]
            for seed, value in enumerate(column[:, row]):
                if math.isfinite(value):
                    expected[f"{name}/seed_{seed}"] = float(value)
            if finite:
                expected[f"{name}/mean"] = sum(finite) / len(finite)
        rows.append(expected)
    return rows


def chunks(num_chunks: int = 3, rows: int = 4, seeds: int = 2, counters=("timesteps", "updates")):
    """Chunks of rows as the runner writes them: counters, episode returns with empty
    cells, an evaluation every other row, and a lane's hyper-parameter column."""
    rng = np.random.default_rng(0)
    for chunk in range(num_chunks):
        iterations = np.arange(chunk * rows + 1, (chunk + 1) * rows + 1)
        episode_return = rng.normal(size=(seeds, rows)) * 100
        episode_return[rng.random((seeds, rows)) < 0.3] = np.nan
        episode_return[:, 1] = np.nan  # a row no seed finished an episode in
        eval_return = np.where(iterations % 2 == 0, rng.normal(size=(seeds, rows)), np.nan)
        values = {
            "timesteps": np.broadcast_to(iterations * 64, (seeds, rows)).copy(),
            "updates": np.broadcast_to(iterations * 4, (seeds, rows)).copy(),
            "episode_return": episode_return,
            "eval_return": eval_return,
            "learning_rate": np.broadcast_to(np.array([3e-4, 1e-3])[:seeds, None], (seeds, rows)).copy(),
        }
        yield iterations, {k: v for k, v in values.items() if k not in ("timesteps", "updates") or k in counters}


def assert_history(history: list[dict], expected: list[dict], x_name: str) -> None:
    assert [row["_step"] for row in history] == [row[x_name] for row in expected]
    for got, want in zip(history, expected):
        assert metrics_of(got) == pytest.approx(want, rel=1e-12), (got, want)


def test_history_holds_each_seed_and_the_mean_against_env_steps(tmp_path):
    logdir = tmp_path / "ppo-cartpole"
    logger = jaxrl_logging.WandbLogger(str(logdir), project="jaxrl-tests", group="g", tags=["a", "b"], config={"x": 1})
    written = list(chunks())
    for iterations, values in written:
        logger.write(iterations, values)
    logger.close()

    (run,) = read_offline_runs(logdir / "wandb")
    expected = [row for iterations, values in written for row in expected_rows(iterations, values, "timesteps")]
    assert_history(run["history"], expected, "timesteps")
    assert "episode_return/mean" not in run["history"][1]  # NaN cells are not logged
    assert "updates/mean" not in run["history"][0] and "timesteps/mean" not in run["history"][0]
    assert run["run"]["project"] == "jaxrl-tests" and run["run"]["display_name"] == "ppo-cartpole"
    assert run["run"]["run_group"] == "g" and run["run"]["tags"] == ["a", "b"]
    assert run["run"]["config"]["update"]["x"] == 1
    assert (logdir / "wandb" / "jaxrl-run-id").read_text() == run["run"]["run_id"]


def test_without_a_counter_the_x_axis_is_the_iteration_and_no_logdir_is_needed(tmp_path, monkeypatch):
    (logger,) = jaxrl_logging.make_loggers(("wandb",), None, meta={"algorithm": "bc"})
    assert isinstance(logger, jaxrl_logging.WandbLogger)
    written = list(chunks(num_chunks=2, counters=()))
    for iterations, values in written:
        logger.write(iterations, values)
    logger.close()
    logger.close()  # closing twice is harmless

    (run,) = read_offline_runs(pathlib.Path(tmp_path / "wandb-home" / "wandb_dir" / "wandb"))
    expected = [row for iterations, values in written for row in expected_rows(iterations, values, "iteration")]
    assert_history(run["history"], expected, "iteration")
    assert run["run"]["config"]["update"]["algorithm"] == "bc"


def test_a_resumed_run_continues_the_same_wandb_run(tmp_path):
    logdir = tmp_path / "run"
    written = list(chunks(num_chunks=3))
    first = jaxrl_logging.WandbLogger(str(logdir))
    for iterations, values in written[:2]:  # the run stops after two chunks, checkpointed after one
        first.write(iterations, values)
    first.close()
    resumed = jaxrl_logging.WandbLogger(str(logdir))
    resumed.truncate(int(written[0][0][-1]), int(written[0][1]["timesteps"][0, -1]))
    for iterations, values in written[1:]:
        resumed.write(iterations, values)
    resumed.close()

    before, after = read_offline_runs(logdir / "wandb")
    assert before["run"]["run_id"] == after["run"]["run_id"] and after["run"]["resume"]
    rows = [expected_rows(iterations, values, "timesteps") for iterations, values in written]
    assert_history(before["history"], rows[0] + rows[1], "timesteps")
    # offline, the resumed part holds the rows after the checkpoint (logged again)
    assert_history(after["history"], rows[1] + rows[2], "timesteps")


def test_rewind_asks_wandb_to_cut_the_history_at_the_checkpoint(tmp_path):
    logdir = tmp_path / "run"
    (iterations, values), *_ = chunks(num_chunks=1)
    first = jaxrl_logging.WandbLogger(str(logdir))
    first.write(iterations, values)
    first.close()
    resumed = jaxrl_logging.WandbLogger(str(logdir), rewind=True)
    resumed.truncate(2, 128)
    resumed.write(iterations[2:], {k: v[:, 2:] for k, v in values.items()})
    resumed.close()
    before, after = read_offline_runs(logdir / "wandb")
    assert after["run"]["branch_point"] == {"run": before["run"]["run_id"], "metric": "_step", "value": 129}
    assert [row["_step"] for row in after["history"]] == [192, 256]


def test_a_missing_wandb_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ImportError, match=r'pip install "jaxrl\[wandb\]"'):
        jaxrl_logging.make_loggers(("wandb",), None)


@pytest.mark.slow
def test_the_runner_logs_each_seeds_evaluation_to_wandb(tmp_path):
    # The sizes of tests/test_runner.py's PPO run: no new program shapes to compile.
    config = ppo.Config(
        total_timesteps=2048,
        num_envs=4,
        num_steps=16,
        hidden_sizes=(16, 16),
        num_evals=4,
        num_reports=0,
        normalize_observations=True,
    )
    logdir = tmp_path / "ppo"
    result = runner.run(
        "ppo", config, seeds=2, chunk_iterations=8, metrics_every=2, options=RunOptions(logdir, ("wandb",))
    )
    (run,) = read_offline_runs(logdir / "wandb")
    history = run["history"]
    timesteps = result.metrics["timesteps"][0]
    assert [row["_step"] for row in history] == [int(t) for t in timesteps]
    for seed in range(2):
        got = [(row["_step"], row[f"eval_return/seed_{seed}"]) for row in history if f"eval_return/seed_{seed}" in row]
        finite = np.isfinite(result.metrics["eval_return"][seed])
        assert len(got) == finite.sum() > 0
        assert [step for step, _ in got] == [int(t) for t in timesteps[finite]]
        np.testing.assert_allclose([v for _, v in got], result.metrics["eval_return"][seed][finite], rtol=1e-12)
    config_logged = run["run"]["config"]["update"]
    assert config_logged["algorithm"] == "ppo" and config_logged["config"]["num_envs"] == 4
    assert config_logged["seeds"] == 2
