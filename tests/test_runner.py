"""Chunked training (jaxrl.workflow.runner), checkpoints (jaxrl.workflow.checkpoint), run loggers and plots.

The runs are tiny (a few thousand env steps) and share their compiled chunks through
module-scoped fixtures; the crash-and-resume tests run the interrupted and the resumed
halves in fresh processes, as a user's job would. The module's processes share JAX's
persistent cache in one directory (jaxrl's program cache stays off), so that those
processes, and runs whose programs are the same for another config, load what this
process compiled."""

from __future__ import annotations

import csv
import json
import math
import os
import pathlib
import struct
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest
from xla_cache import persistent_cache

from jaxrl.algorithms import a2c, dqn, ppo
from jaxrl.workflow import cli, metrics, runner
from jaxrl.workflow import logging as jaxrl_logging
from jaxrl.workflow.checkpoint import Checkpoints
from jaxrl.workflow.options import RunOptions

TESTS = pathlib.Path(__file__).parent
CHUNK = 8  # iterations per chunk: every run below has 4 chunks
SEEDS = 2


def make_config(name: str):
    """The runs' configs: PPO with running observation statistics in its state, DQN
    with a prioritized n-step replay buffer in its state. Both 32 iterations."""
    if name == "ppo":
        return ppo.Config(
            total_timesteps=2048,
            num_envs=4,
            num_steps=16,
            hidden_sizes=(16, 16),
            num_evals=4,
            num_reports=0,
            normalize_observations=True,
        )
    return dqn.Config(
        total_timesteps=2048,
        num_envs=4,
        num_steps=16,
        num_updates=2,
        batch_size=32,
        buffer_size=1024,
        learning_starts=256,
        hidden_sizes=(16, 16),
        num_evals=4,
        num_reports=0,
    )


@pytest.fixture(scope="module", autouse=True)
def cache_dir(tmp_path_factory):
    """This module's cache directory, on for its tests and off again after."""
    with persistent_cache(tmp_path_factory.mktemp("xla-cache")) as directory:
        yield directory


def straight_run(name: str, logdir):
    return runner.run(
        name,
        make_config(name),
        seeds=SEEDS,
        chunk_iterations=CHUNK,
        metrics_every=2,
        options=RunOptions(logdir=logdir, loggers=("csv", "jsonl", "tensorboard"), checkpoint_every=1),
    )


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("ppo") / "run"
    return logdir, straight_run("ppo", logdir)


def leaves(tree):
    return [
        np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x)
        for x in jax.tree.leaves(tree)
    ]


# ----------------------------------------------------------------------------- aggregation


def test_aggregate_against_a_python_loop():
    rng = np.random.default_rng(0)
    values = rng.normal(size=(3, 10)).astype(np.float32)
    values[rng.random((3, 10)) < 0.4] = np.nan
    values[:, 4:6] = np.nan  # a whole window without a value
    chunk = {
        "episode_return": values,
        "timesteps": np.arange(1, 31).reshape(3, 10) * 7,
        "per_env": np.zeros((3, 10, 4)),
    }
    rows = metrics.aggregate(chunk, every=3)
    assert set(rows) == {"episode_return", "timesteps"}  # non-scalar metrics are dropped
    for seed in range(3):
        for row, start in enumerate(range(0, 10, 3)):
            window = [float(v) for v in values[seed, start : start + 3] if not math.isnan(v)]
            expected = sum(window) / len(window) if window else math.nan
            assert rows["episode_return"][seed, row] == pytest.approx(expected, nan_ok=True)
            assert rows["timesteps"][seed, row] == chunk["timesteps"][seed, min(start + 3, 10) - 1]


def test_aggregate_averages_episode_metrics_over_episodes():
    rng = np.random.default_rng(1)
    episodes = rng.integers(0, 4, size=(2, 9))
    returns = np.where(episodes > 0, rng.normal(size=(2, 9)), np.nan)
    rows = metrics.aggregate({"episode_return": returns, "episodes": episodes}, every=4)
    for seed in range(2):
        for row, start in enumerate(range(0, 9, 4)):
            counts, values = episodes[seed, start : start + 4], returns[seed, start : start + 4]
            total = sum(c * v for c, v in zip(counts, values) if c > 0)
            expected = total / counts.sum() if counts.sum() else math.nan
            assert rows["episodes"][seed, row] == counts.sum()
            assert rows["episode_return"][seed, row] == pytest.approx(expected, nan_ok=True)


@pytest.mark.parametrize("window", [1, 5, 12])
def test_recent_episode_return_against_a_python_loop(window):
    rng = np.random.default_rng(window)
    episodes = rng.integers(0, 5, size=(3, 30))
    returns = np.where(episodes > 0, rng.normal(size=(3, 30)) * 50, np.nan)
    recent = metrics.recent_episode_return(returns, episodes, window)
    for seed in range(3):
        for row in range(30):
            count, total, start = 0, 0.0, row
            while start >= 0 and count < window:  # rows back until the window is full
                if episodes[seed, start]:
                    taken = min(episodes[seed, start], window - count)  # the oldest row: part of it
                    count += taken
                    total += taken * returns[seed, start]
                start -= 1
            expected = total / window if count == window else math.nan
            assert recent[seed, row] == pytest.approx(expected, nan_ok=True, abs=1e-9)


def test_default_chunk_iterations_prefers_a_divisor():
    assert runner.default_chunk_iterations(1000) == 50
    assert 1000 % runner.default_chunk_iterations(1000, chunks=7) == 0
    assert runner.default_chunk_iterations(39) in (1, 3)  # 39 = 3 x 13: the divisors near 2
    assert runner.default_chunk_iterations(5, chunks=20) == 1


def test_latest_finite():
    values = np.array([[1.0, np.nan, 3.0, np.nan], [np.nan] * 4, [5.0, 6.0, 7.0, 8.0]])
    np.testing.assert_array_equal(metrics.latest_finite(values), [3.0, np.nan, 8.0])


# ----------------------------------------------------------------------------- a run


def test_run_covers_every_iteration_in_rows(ppo_run):
    _, result = ppo_run
    assert result.completed == 32 and not result.stopped_early
    np.testing.assert_array_equal(result.iterations, np.arange(2, 33, 2))
    np.testing.assert_array_equal(result.metrics["timesteps"], np.broadcast_to(np.arange(2, 33, 2) * 64, (SEEDS, 16)))
    assert np.sum(np.isfinite(result.metrics["eval_return"])) == SEEDS * 4  # num_evals=4 per seed


def test_csv_and_jsonl_hold_the_returned_metrics_per_seed_and_mean(ppo_run):
    logdir, result = ppo_run
    with open(logdir / "metrics.csv", newline="") as f:
        records = list(csv.DictReader(f))
    with open(logdir / "metrics.jsonl") as f:
        json_records = [json.loads(line) for line in f]
    assert len(records) == len(json_records) == len(result.iterations) * (SEEDS + 1)
    for record, json_record in zip(records, json_records):
        row = list(result.iterations).index(int(record["iteration"]))
        for name, values in result.metrics.items():
            if record["seed"] == "mean":
                finite = values[:, row][np.isfinite(values[:, row])]
                expected = (
                    (np.max(finite) if name in jaxrl_logging.COUNTERS else np.mean(finite)) if finite.size else math.nan
                )
            else:
                expected = values[int(record["seed"]), row]
            got = float(record[name]) if record[name] else math.nan
            assert got == pytest.approx(float(expected), rel=1e-6, nan_ok=True), (name, record)
            got_json = math.nan if json_record[name] is None else json_record[name]
            assert got_json == pytest.approx(float(expected), rel=1e-6, nan_ok=True), (name, json_record)


def read_tensorboard_scalars(directory) -> dict:
    """``{tag: [(step, value)]}`` from the event files in ``directory``, read record by
    record (length, CRC, payload, CRC) and parsed with TensorBoard's Event proto."""
    from tensorboardX.proto import event_pb2

    scalars = {}
    for path in sorted(pathlib.Path(directory).glob("events.out.tfevents.*")):
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset : offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12 : offset + 12 + length])
            offset += 12 + length + 4
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def test_tensorboard_events_hold_the_scalars(ppo_run):
    logdir, result = ppo_run
    scalars = read_tensorboard_scalars(logdir / "tensorboard")
    timesteps = result.metrics["timesteps"][0]
    for seed in range(SEEDS):
        finite = np.isfinite(result.metrics["eval_return"][seed])
        expected = list(zip(timesteps[finite], result.metrics["eval_return"][seed][finite]))
        got = scalars[f"eval_return/seed_{seed}"]
        assert [step for step, _ in got] == [int(step) for step, _ in expected]
        np.testing.assert_allclose([v for _, v in got], [v for _, v in expected], rtol=1e-6)
    assert len(scalars["policy_loss/mean"]) == len(result.iterations)
    assert "timesteps/mean" not in scalars  # the x axis, not a curve


def test_checkpoints_keep_the_latest_and_the_best(ppo_run):
    logdir, result = ppo_run
    with Checkpoints(logdir / "checkpoints", keep=3) as checkpoints:
        steps = checkpoints.steps()
        assert steps[-3:] == [16, 24, 32]
        eval_means = {step: checkpoints.meta(step)["eval_return"] for step in steps}
        best = checkpoints.best_step()
        assert best in steps and eval_means[best] == max(v for v in eval_means.values() if v is not None)
        assert len(steps) == 3 + (best == 8)


def test_plot_command_writes_a_png(ppo_run, tmp_path, capsys):
    logdir, result = ppo_run
    out = tmp_path / "compare.png"
    assert cli.main(["plot", str(logdir), str(logdir), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    assert cli.main(["plot", str(logdir), "--metric", "nope", "--out", str(out)]) == cli.USAGE_ERROR
    assert "no metric 'nope'" in capsys.readouterr().err


def test_load_run_reads_back_the_metrics(ppo_run):
    from jaxrl.workflow import plots

    logdir, result = ppo_run
    meta, rows = plots.load_run(str(logdir))
    assert meta["algorithm"] == "ppo" and meta["seeds"] == SEEDS
    np.testing.assert_allclose(rows["eval_return"], result.metrics["eval_return"], rtol=1e-6)
    np.testing.assert_array_equal(rows["iteration"][0], result.iterations)


def test_confidence_band_contains_the_mean_and_narrows_with_agreement():
    from jaxrl.workflow import plots

    rng = np.random.default_rng(1)
    spread = rng.normal(size=(10, 5))
    mean, low, high = plots.confidence_band(spread)
    np.testing.assert_allclose(mean, spread.mean(axis=0))
    assert np.all(low <= mean) and np.all(mean <= high)
    _, low_same, high_same = plots.confidence_band(np.ones((10, 5)))
    np.testing.assert_array_equal(low_same, high_same)


# ----------------------------------------------------------------------------- stop, resume, errors


def test_a_second_run_of_a_config_compiles_nothing(ppo_run):
    """The init program (compiled in a thread beside the first chunk) and the chunk are
    kept per config: the same run again compiles neither and gives the same metrics."""
    _, first = ppo_run
    compiles = []

    def listener(event, seconds, **kwargs):  # every XLA compile, AOT or on a jit cache miss
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(seconds)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        again = runner.run("ppo", make_config("ppo"), seeds=SEEDS, chunk_iterations=CHUNK, metrics_every=2)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert compiles == []
    for name in first.metrics:
        np.testing.assert_array_equal(again.metrics[name], first.metrics[name], err_msg=name)


def test_target_return_stops_early_and_saves(tmp_path):
    config = make_config("ppo")
    result = runner.run(
        "ppo",
        config,
        seeds=SEEDS,
        chunk_iterations=CHUNK,
        metrics_every=2,
        target=1.0,
        options=RunOptions(logdir=tmp_path / "run", checkpoint_every=4),
    )
    assert result.stopped_early and result.completed == CHUNK  # the first evaluation is at iteration 8
    with Checkpoints(tmp_path / "run" / "checkpoints") as checkpoints:
        assert checkpoints.steps() == [CHUNK]  # the stop saved, though 4 chunks had not passed


def test_target_episodes_checks_the_recent_training_episodes():
    # Random CartPole episodes last about 20 steps, so the first chunk (512 env steps
    # per seed) finishes more than 10 episodes with returns above 5 but none reaches 100.
    config = make_config("ppo")
    result = runner.run("ppo", config, seeds=SEEDS, chunk_iterations=CHUNK, target=metrics.Target(5.0, episodes=10))
    assert result.stopped_early and result.completed == CHUNK
    recent = metrics.recent_episode_return(result.metrics["episode_return"], result.metrics["episodes"], 10)
    assert np.all(recent[:, -1] >= 5.0)
    result = runner.run("ppo", config, seeds=SEEDS, chunk_iterations=CHUNK, target=metrics.Target(100.0, episodes=10))
    assert not result.stopped_early and result.completed == 32


def test_a_logdir_holding_a_run_is_not_overwritten(ppo_run):
    logdir, _ = ppo_run
    before = (logdir / "metrics.csv").read_bytes()
    with pytest.raises(ValueError, match="already holds a run.*resume=True"):
        runner.run("ppo", make_config("ppo"), seeds=SEEDS, chunk_iterations=CHUNK, options=RunOptions(logdir=logdir))
    with pytest.raises(ValueError, match="learning_rate"):
        runner.run(
            "ppo",
            make_config("ppo").replace(learning_rate=1e-3),
            seeds=SEEDS,
            chunk_iterations=CHUNK,
            metrics_every=2,
            options=RunOptions(logdir=logdir, resume=True),
        )
    with pytest.raises(ValueError, match="algorithm: saved 'ppo', this run 'a2c'"):
        runner.run("a2c", a2c.Config(), seeds=SEEDS, options=RunOptions(logdir=logdir, resume=True))
    assert (logdir / "metrics.csv").read_bytes() == before


def test_a_checkpoint_of_another_structure_is_a_clear_error(ppo_run, tmp_path):
    logdir, result = ppo_run
    with Checkpoints(logdir / "checkpoints") as checkpoints:
        with pytest.raises(ValueError, match="does not match this run's state structure"):
            checkpoints.restore({"state": result.state.params, "run_keys": 0})
        with pytest.raises(FileNotFoundError, match="no checkpoint step 3"):
            checkpoints.restore(result.state, step=3)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"chunk_iterations": 0}, "chunk_iterations must be an int in \\[1, 32\\]"),
        ({"chunk_iterations": 33}, "chunk_iterations must be an int in \\[1, 32\\]"),
        ({"chunk_iterations": 8, "metrics_every": 3}, "metrics_every must be an int >= 1 dividing chunk_iterations=8"),
        ({"seeds": 0}, "seeds must be an int >= 1"),
        ({"target": {"value": 1.0, "episodes": 0}}, "target episodes must be an int >= 1"),
        ({"dataset": {"obs": np.zeros(3)}}, "ppo learns from its env alone"),
    ],
)
def test_bad_arguments_are_clear_errors(kwargs, message):
    config = kwargs.pop("config", make_config("ppo"))
    with pytest.raises((ValueError, TypeError), match=message):
        if isinstance(kwargs.get("target"), dict):
            kwargs["target"] = metrics.Target(**kwargs["target"])
        runner.run("ppo", config, **kwargs)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"checkpoint_every": 0, "logdir": "x"}, "checkpoint_every must be an int >= 1"),
        ({"checkpoint_every": 2.0, "logdir": "x"}, "checkpoint_every must be an int >= 1"),
        ({"checkpoint_every": 1}, "need a logdir"),
        ({"resume": True}, "need a logdir"),
        ({"keep_checkpoints": 0}, "keep_checkpoints must be an int >= 1"),
        ({"loggers": ("console", "neptune")}, "unknown logger 'neptune' in loggers"),
        ({"loggers": "csv"}, "loggers must be a sequence of logger names or objects"),
        ({"loggers": (object(),)}, "loggers: .* is neither a logger name nor has write / truncate / close"),
        ({"progress": "yes"}, "progress must be a bool"),
        ({"logdir": 3}, "logdir must be a path or None"),
        ({"mesh": ["cpu:0"]}, "mesh must be a jax.sharding.Mesh or None, got list"),
    ],
)
def test_bad_run_options_are_clear_errors_naming_the_field(options, message):
    with pytest.raises(ValueError, match=message):
        RunOptions(**options)
    assert RunOptions(logdir=pathlib.Path("runs/a"), loggers=["csv"]) == RunOptions("runs/a", ("csv",))


def test_the_lanes_must_divide_over_the_mesh():
    from jaxrl.workflow import distributed

    with pytest.raises(ValueError, match="ppo's seeds: 3 lanes do not divide over the mesh's 2 devices"):
        distributed.check_lanes(3, distributed.make_mesh([jax.devices()[0]] * 2), "ppo's seeds")


def test_an_unknown_target_metric_is_a_clear_error():
    with pytest.raises(
        ValueError, match="target metric 'eval_retrun' is not a metric of ppo; its metrics: .*eval_return"
    ):
        runner.run(
            "ppo",
            make_config("ppo"),
            seeds=SEEDS,
            chunk_iterations=CHUNK,
            target=metrics.Target(1.0, metric="eval_retrun"),
        )


# ----------------------------------------------------------------------------- crashes

CRASHING_SAVE = """
import os, sys
sys.path.insert(0, {tests!r})
from orbax.checkpoint._src.path import atomicity
from jaxrl.workflow import runner
from test_runner import CHUNK, SEEDS, RunOptions, make_config
from xla_cache import use_cache

use_cache({cache!r})

async def crash_on_second_commit(source, target):
    # Dies with the second checkpoint (step 2 * CHUNK) fully written to its temporary
    # directory, just before the rename that commits it: the worst moment for a crash.
    if os.path.basename(str(target)) == str(2 * CHUNK):
        os._exit(9)
    await original_rename(source, target)

original_rename = atomicity.async_path.rename
atomicity.async_path.rename = crash_on_second_commit
runner.run({name!r}, make_config({name!r}), seeds=SEEDS, chunk_iterations=CHUNK, metrics_every=2,
           options=RunOptions({logdir!r}, ("csv", "jsonl", "tensorboard"), checkpoint_every=1))
"""

RESUME = """
import sys
sys.path.insert(0, {tests!r})
import numpy as np
from jaxrl.workflow import runner
from test_runner import CHUNK, SEEDS, RunOptions, leaves, make_config
from xla_cache import use_cache

use_cache({cache!r})

result = runner.run({name!r}, make_config({name!r}), seeds=SEEDS, chunk_iterations=CHUNK, metrics_every=2,
                    options=RunOptions({logdir!r}, ("csv", "jsonl", "tensorboard"), checkpoint_every=1, resume=True))
np.savez({out!r}, completed=result.completed, iterations=result.iterations,
         **{{"metric_" + k: v for k, v in result.metrics.items()}},
         **{{f"leaf_{{i}}": leaf for i, leaf in enumerate(leaves(result.state))}})
"""


def python(code: str, tmp_path) -> subprocess.CompletedProcess:
    script = tmp_path / f"script_{len(list(tmp_path.glob('script_*')))}.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_crash_mid_save_then_resume_gives_the_uninterrupted_run(ppo_run, cache_dir, tmp_path):
    """Run 4 chunks straight; separately, run until the process dies while committing
    its second checkpoint, then resume in a fresh process: the previous checkpoint is
    intact, and metrics, logs and the whole final state (parameters, optimiser, env
    states, observation statistics, keys) equal the straight run's."""
    name = "ppo"
    straight_dir, straight = ppo_run
    logdir = tmp_path / "run"
    fill = dict(tests=str(TESTS), cache=str(cache_dir), name=name, logdir=str(logdir))

    crashed = python(CRASHING_SAVE.format(**fill), tmp_path)
    assert crashed.returncode == 9, crashed.stderr[-3000:]
    with Checkpoints(logdir / "checkpoints") as checkpoints:
        assert checkpoints.steps() == [CHUNK]  # the half-written second one is not a checkpoint
        assert (
            checkpoints.restore(
                {"state": straight.state, "run_keys": jax.random.split(jax.random.key(0), SEEDS)}, step=CHUNK
            )[2]["step"]
            == CHUNK
        )
    csv_rows = (logdir / "metrics.csv").read_text().splitlines()
    assert int(csv_rows[-1].split(",")[0]) == 2 * CHUNK  # the crashed chunk's rows were logged...

    out = tmp_path / "resumed.npz"
    resumed = python(RESUME.format(**fill, out=str(out)), tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    saved = np.load(out)
    assert int(saved["completed"]) == 32
    np.testing.assert_array_equal(saved["iterations"], straight.iterations)
    for key, values in straight.metrics.items():
        np.testing.assert_array_equal(saved["metric_" + key], values, err_msg=key)
    for i, leaf in enumerate(leaves(straight.state)):
        np.testing.assert_array_equal(saved[f"leaf_{i}"], leaf)
    # ...and rewritten once: the resumed logs equal the straight run's, row for row.
    assert (logdir / "metrics.csv").read_text() == (straight_dir / "metrics.csv").read_text()
    assert (logdir / "metrics.jsonl").read_text() == (straight_dir / "metrics.jsonl").read_text()


@pytest.mark.slow
def test_resume_restores_the_replay_buffer_exactly(tmp_path):
    """DQN's state holds a prioritized n-step replay buffer: resuming from the second
    checkpoint of a finished run (in this process, as after a crash that lost the
    later ones) reproduces the rest of the run exactly, logs included. A changed
    config is refused, except for ``num_reports``, also when run.json is gone."""
    straight = straight_run("dqn", tmp_path / "straight")
    import shutil

    shutil.copytree(tmp_path / "straight", tmp_path / "resumed")
    for step in (3 * CHUNK, 4 * CHUNK):
        shutil.rmtree(tmp_path / "resumed" / "checkpoints" / str(step))
    resume = dict(
        seeds=SEEDS,
        chunk_iterations=CHUNK,
        metrics_every=2,
        options=RunOptions(tmp_path / "resumed", ("csv", "jsonl", "tensorboard"), checkpoint_every=1, resume=True),
    )
    with pytest.raises(ValueError, match=r"is from a different run; config: saved .*'learning_rate': 0.0003"):
        runner.run("dqn", make_config("dqn").replace(learning_rate=3e-4), **resume)
    # num_reports only drives in-program progress reports, which the runner leaves out;
    # with run.json gone, the checkpoints alone say how the run began.
    (tmp_path / "resumed" / "run.json").unlink()
    resumed = runner.run("dqn", make_config("dqn").replace(num_reports=3), **resume)
    np.testing.assert_array_equal(resumed.iterations, straight.iterations)
    for key, values in straight.metrics.items():
        np.testing.assert_array_equal(resumed.metrics[key], values, err_msg=key)
    for ours, theirs in zip(leaves(resumed.state), leaves(straight.state)):
        np.testing.assert_array_equal(ours, theirs)
    for log in ("metrics.csv", "metrics.jsonl"):
        assert (tmp_path / "resumed" / log).read_text() == (tmp_path / "straight" / log).read_text()


def test_an_interrupted_save_leaves_the_previous_checkpoint_loadable(tmp_path):
    """A process killed (SIGKILL) while writing a large checkpoint: the earlier one
    still restores, and the directory takes new saves afterwards."""
    directory = tmp_path / "checkpoints"
    code = f"""
    import os, signal, sys, threading, time
    import jax, numpy as np
    from jaxrl.workflow.checkpoint import Checkpoints
    checkpoints = Checkpoints({str(directory)!r}, keep=5)
    small = {{"w": np.arange(10.0), "key": jax.random.key(3)}}
    checkpoints.save(1, small, meta={{"run": "a"}}, eval_return=1.0)
    big = {{"w": np.random.default_rng(0).normal(size=(64, 1024, 1024)), "key": jax.random.key(4)}}
    # Kill this process from a thread once the second save has begun writing.
    def kill_when_writing():
        while not any(".orbax-checkpoint-tmp" in p for p in os.listdir({str(directory)!r})):
            time.sleep(0.001)
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=kill_when_writing, daemon=True).start()
    checkpoints.save(2, big, meta={{"run": "a"}})
    print("save 2 completed")
    """
    result = python(code, tmp_path)
    assert result.returncode == -9, (result.returncode, result.stdout, result.stderr[-2000:])
    assert "save 2 completed" not in result.stdout
    assert any(".orbax-checkpoint-tmp" in p.name for p in directory.iterdir())  # it did die mid-write
    template = {"w": np.zeros(10), "key": jax.random.key(0)}
    with Checkpoints(directory, keep=5) as checkpoints:
        assert checkpoints.steps() == [1]
        state, history, meta = checkpoints.restore(template, expect_meta={"run": "a"})
        np.testing.assert_array_equal(state["w"], np.arange(10.0))
        np.testing.assert_array_equal(jax.random.key_data(state["key"]), jax.random.key_data(jax.random.key(3)))
        assert history is None and meta["eval_return"] == 1.0
        checkpoints.save(2, template, meta={"run": "a"})
        assert checkpoints.steps() == [1, 2]


# ----------------------------------------------------------------------------- command line


@pytest.mark.slow
def test_cli_logdir_checkpoints_target_plot_and_resume(tmp_path, capsys):
    logdir = tmp_path / "run"
    args = [
        "train",
        "ppo",
        "--env",
        "CartPole-v1",
        "--seeds",
        "2",
        "--total-timesteps",
        "2048",
        "--set",
        "num_envs=4",
        "--set",
        "num_steps=16",
        "--set",
        "hidden_sizes=16,16",
        "--set",
        "num_evals=4",
        *("--set", "normalize_observations=true", "--set", "num_reports=0"),  # make_config("ppo"): its programs
        "--no-preset",
        "--no-cache",
        "--no-progress",
        "--chunks",
        "4",
        "--logdir",
        str(logdir),
        "--loggers",
        "csv,tensorboard",
        "--checkpoint-every",
        "2",
        "--plot",
        "--json",
        str(tmp_path / "s.json"),
    ]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "compiled in" in out and "learning curves:" in out
    assert (logdir / "curves.png").exists() and (logdir / "metrics.csv").exists()
    assert any((logdir / "tensorboard").iterdir())
    with Checkpoints(logdir / "checkpoints") as checkpoints:
        assert checkpoints.steps() == [16, 32]
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["timesteps_done"] == 2048 and not summary["stopped_early"]

    assert cli.main(args) == cli.USAGE_ERROR  # the logdir holds a run
    assert "already holds a run" in capsys.readouterr().err
    assert cli.main(args + ["--resume"]) == 0  # already complete: nothing to run
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["timesteps_done"] == 2048
    assert cli.main(["train", "ppo", "--checkpoint-every", "1"]) == cli.USAGE_ERROR
    assert "need a logdir" in capsys.readouterr().err
    # The same program (compiled already), stopped by the solved rule over training episodes.
    quick = args[: args.index("--logdir")] + ["--target-return", "5", "--target-episodes", "10"]
    assert cli.main(quick) == 0
    assert (
        "every seed reached the target return 5 (mean return of its last 10 training episodes) after 512 env steps"
        in capsys.readouterr().out
    )


def small_bc_run():
    """A random CartPole dataset of 64 transitions and a BC config of 20 updates."""
    from jaxrl import data
    from jaxrl.algorithms import bc

    rng = np.random.default_rng(0)
    dataset = data.Dataset(
        obs=rng.normal(size=(64, 4)).astype(np.float32),
        action=rng.integers(0, 2, size=64).astype(np.int32),
        reward=np.ones(64, np.float32),
        terminated=np.zeros(64, bool),
        truncated=np.zeros(64, bool),
        next_obs=rng.normal(size=(64, 4)).astype(np.float32),
        episode_return=np.zeros(64, np.float32),
        episode_length=np.zeros(64, np.int32),
        env_id="CartPole-v1",
    )
    config = bc.Config(
        env_id="CartPole-v1",
        num_updates=20,
        batch_size=8,
        num_evals=1,
        eval_episodes=1,
        hidden_sizes=(8,),
        num_reports=0,
    )
    return dataset, config


@pytest.mark.slow
def test_bc_runs_in_chunks_from_a_dataset_and_equals_the_fused_train():
    from jaxrl.algorithms import bc

    dataset, config = small_bc_run()
    result = runner.run("bc", config, seeds=2, dataset=dataset, chunk_iterations=10)
    assert result.completed == 20 and result.metrics["updates"][:, -1].tolist() == [20, 20]
    fused = jax.jit(jax.vmap(bc.train, in_axes=(0, None, None)))(
        jax.random.split(jax.random.key(0), 2), config, dataset
    )
    # same keys per iteration whatever the chunking; only XLA's fusion (float rounding) may differ
    np.testing.assert_allclose(result.metrics["loss"], np.asarray(fused.metrics["loss"]), rtol=1e-5)
    for ours, theirs in zip(leaves(result.state.params), leaves(fused.state.params)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_runner_module_is_importable_without_the_extras():
    # (matplotlib is not optional in practice: gymnax imports it.)
    code = (
        "import sys; sys.modules['orbax'] = None; sys.modules['tensorboardX'] = None; "
        "import jaxrl.workflow.runner, jaxrl.workflow.cli; print('ok')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**os.environ}
    )
    assert result.stdout.strip() == "ok", result.stderr
