"""``python -m jaxrl evaluate`` and ``record`` on saved runs (jaxrl.workflow.saved): repeating a
run's own last evaluation exactly, fresh evaluations, recurrent policies, video of a
Gymnasium env, a recorded dataset that behaviour cloning learns from, and one-line
errors with exit status 2.

Compiles dominate on a 2-core CPU: each saved run is trained once per module (a
module-scoped fixture, one per xdist worker) and every test reads it.
"""

from __future__ import annotations

import csv
import json
import shutil

import jax
import numpy as np
import pytest

from jaxrl import data
from jaxrl.workflow import cli, saved

pytestmark = pytest.mark.slow  # compiles or runs whole training programs: see pyproject.toml

SEEDS = 2
# PPO on CartPole-v1: 64 iterations of 8 envs x 64 steps (16 per chunk, a checkpoint
# after each), good enough (~250) to clone. Six evaluations, after iterations 11, 22,
# 32, 43, 54 and 64: the checkpoints after 32 and 64 iterations hold evaluated policies,
# the one after 48 does not.
PPO = [
    "--env",
    "CartPole-v1",
    "--total-timesteps",
    "32768",
    "--set",
    "num_envs=8",
    "--set",
    "num_steps=64",
    "--set",
    "hidden_sizes=32,32",
    "--set",
    "learning_rate=2e-3",
    "--set",
    "num_evals=6",
    "--chunks",
    "4",
]
# A GRU policy on CartPole with a 16-step time limit (tests/test_memory.py's CONFIG):
# 4 iterations in 2 chunks.
RECURRENT = [
    "--env",
    "CartPole-v1",
    "--total-timesteps",
    "288",
    "--env-param",
    "max_steps_in_episode=16",
    *("--set", "num_envs=3", "--set", "num_steps=24", "--set", "hidden_sizes=8", "--set", "memory=gru"),
    *("--set", "memory_size=6", "--set", "sequence_length=8", "--set", "num_minibatches=3"),
    *("--set", "num_evals=2", "--set", "eval_episodes=2", "--chunks", "2"),
]


def train(logdir, arguments, algorithm="ppo", seeds=SEEDS):
    common = ["--logdir", str(logdir), "--checkpoint-every", "1", "--no-progress", "--no-cache"]
    assert cli.main(["train", algorithm, "--seeds", str(seeds), *arguments, *common]) == 0
    return logdir


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory):
    return train(tmp_path_factory.mktemp("ppo") / "run", PPO)


@pytest.fixture(scope="module")
def recurrent_run(tmp_path_factory):
    return train(tmp_path_factory.mktemp("gru") / "run", RECURRENT)


def evaluate(run_dir, tmp_path, *options) -> dict:
    path = tmp_path / "evaluation.json"
    assert cli.main(["evaluate", str(run_dir), "--json", str(path), "--no-cache", *options]) == 0
    return json.loads(path.read_text())


def logged_eval_returns(run_dir, up_to: int | None = None) -> list[float]:
    """Each seed's last eval_return in metrics.csv (rows up to iteration ``up_to``)."""
    latest = {}
    with open(run_dir / "metrics.csv") as f:
        for row in csv.DictReader(f):
            if row["seed"] != "mean" and row["eval_return"] and (up_to is None or int(row["iteration"]) <= up_to):
                latest[int(row["seed"])] = float(row["eval_return"])
    return [latest[seed] for seed in sorted(latest)]


# ----------------------------------------------------------------------------- evaluate


def test_evaluate_repeats_the_runs_final_evaluation(ppo_run, tmp_path, capsys):
    result = evaluate(ppo_run, tmp_path)
    out = capsys.readouterr().out
    assert "checkpoint at iteration 64 of 64" in out and "the keys of iteration 64's evaluation" in out
    assert "run's eval" in out and out.strip().splitlines()[-1].startswith("  mean")
    assert result["checkpoint_step"] == 64 and result["episodes"] == 10 and result["deterministic"]
    assert result["keys"] == "run" and np.shape(result["returns"]) == (SEEDS, 10)
    final = logged_eval_returns(ppo_run)
    assert final == result["run_eval_return"]
    # The run's own keys and params in another program: equal where the two programs round
    # alike; where they do not (the suite's emitters, on some CPUs: tests/conftest.py), an
    # episode of CartPole can end some steps apart (CI once: 245.3 against 243.0).
    assert result["mean_return"] == pytest.approx(final, rel=0.02)
    assert min(final) > 100  # a policy worth recording below


def test_evaluate_an_earlier_checkpoint_repeats_the_evaluation_there(ppo_run, tmp_path, capsys):
    result = evaluate(ppo_run, tmp_path, "--checkpoint", "32")
    assert "from the keys of iteration 32's evaluation\n" in capsys.readouterr().out.replace(" (compiling...)", "")
    assert result["checkpoint_step"] == 32
    assert logged_eval_returns(ppo_run, up_to=32) == result["run_eval_return"]
    # The same episodes from the same keys: equal returns where the two programs round
    # alike (XLA's default emitters do here), within a step or two of CartPole's episodes
    # under the suite's (tests/conftest.py), which round the training program apart.
    assert result["mean_return"] == pytest.approx(result["run_eval_return"], rel=0.01)


def test_evaluate_a_checkpoint_the_run_did_not_evaluate(ppo_run, tmp_path, capsys):
    """After 48 iterations (the run evaluated after 43): the keys the run would have
    used at 48, and no column of the run's evaluation to compare with."""
    result = evaluate(ppo_run, tmp_path, "--checkpoint", "48")
    out = capsys.readouterr().out
    assert "the keys of iteration 48's evaluation (the run made none there)" in out and "run's eval" not in out
    assert result["checkpoint_step"] == 48 and "run_eval_return" not in result and result["keys"] == "run"
    assert evaluate(ppo_run, tmp_path, "--checkpoint", "48")["returns"] == result["returns"]


def test_evaluate_afresh_with_sampled_actions(ppo_run, tmp_path, capsys):
    best = saved.load(ppo_run, "best")
    result = evaluate(ppo_run, tmp_path, "--checkpoint", "best", "--episodes", "3", "--seed", "5", "--sampled")
    out = capsys.readouterr().out
    assert "3 sampled episode(s) per seed, from seed 5" in out and "run's eval" not in out
    assert result["checkpoint_step"] == best.step and not result["deterministic"] and result["keys"] == "seed 5"
    returns = np.array(result["returns"])
    assert returns.shape == (SEEDS, 3) and np.all(returns >= 1) and np.all(returns <= 500)
    assert "run_eval_return" not in result
    again = evaluate(ppo_run, tmp_path, "--checkpoint", "best", "--episodes", "3", "--seed", "5", "--sampled")
    assert again["returns"] == result["returns"]  # the same key, the same episodes


def test_saved_run_rebuilds_the_config_and_state(ppo_run):
    run = saved.load(ppo_run)
    assert run.algorithm == "ppo" and run.lanes == SEEDS and run.step == 64
    assert run.config.hidden_sizes == (32, 32) and run.config.learning_rate == 2e-3 and run.config.num_envs == 8
    assert run.evaluated_at_step() and run.history["eval_return"].shape == (SEEDS, 64)
    assert run.run_keys.shape == (SEEDS,)
    assert all(leaf.shape[0] == SEEDS for leaf in jax.tree.leaves(run.state.params))


def test_recurrent_policy_evaluates_and_records(recurrent_run, tmp_path, capsys):
    run = saved.load(recurrent_run)
    assert run.config.memory == "gru" and dict(run.config.env_kwargs) == {"max_steps_in_episode": 16}
    result = evaluate(recurrent_run, tmp_path)
    assert result["mean_return"] == logged_eval_returns(recurrent_run) == result["run_eval_return"]
    assert all(1 <= r <= 16 for r in result["mean_return"])  # the 16-step time limit came back from run.json
    out = tmp_path / "gru.npz"
    assert (
        cli.main(["record", str(recurrent_run), "--steps", "64", "--envs", "2", "--out", str(out), "--no-cache"]) == 0
    )
    assert "--env-param max_steps_in_episode=16" in capsys.readouterr().out
    dataset = data.load_dataset(out, env_id="CartPole-v1")
    assert dataset.size == 64 and dataset.num_envs == 2 and int(np.max(dataset.episode_length)) <= 16


# ----------------------------------------------------------------------------- record


def test_recorded_dataset_teaches_behaviour_cloning(ppo_run, tmp_path, capsys):
    """4,000 transitions of seed 0's deterministic policy; BC (500 updates) on the file
    then plays CartPole far better than a uniformly random policy (~22)."""
    out = tmp_path / "expert.npz"
    assert cli.main(["record", str(ppo_run), "--steps", "4000", "--envs", "4", "--out", str(out), "--no-cache"]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}: 4,000 transitions" in printed
    assert f"train bc --env CartPole-v1 --set dataset_path={out}" in printed
    dataset = data.load_dataset(out, env_id="CartPole-v1")
    assert dataset.size == 4000 and dataset.num_envs == 4 and dataset.env_id == "CartPole-v1"
    expert = data.episode_metrics(dataset)
    assert int(expert["episodes"]) >= 4 and float(expert["episode_return"]) > 100

    summary = tmp_path / "bc.json"
    bc = ["--set", f"dataset_path={out}", "--set", "num_updates=500", "--set", "batch_size=64"]
    bc += ["--set", "hidden_sizes=32,32", "--set", "num_evals=1", "--chunks", "1", "--json", str(summary)]
    assert cli.main(["train", "bc", "--env", "CartPole-v1", *bc, "--no-cache", "--no-progress"]) == 0
    cloned = json.loads(summary.read_text())["eval_return"][0]
    assert cloned > 100, cloned


def test_record_is_deterministic_given_its_seed(ppo_run, tmp_path):
    paths = [tmp_path / f"{name}.npz" for name in ("a", "b")]
    for path in paths:
        args = ["record", str(ppo_run), "--steps", "64", "--policy-seed", "1", "--sampled", "--seed", "3"]
        assert cli.main([*args, "--out", str(path), "--no-cache"]) == 0
    first, second = (data.load_dataset(path) for path in paths)
    assert np.array_equal(first.action, second.action) and np.array_equal(first.obs, second.obs)


# ----------------------------------------------------------------------------- video


def test_video_of_a_gymnasium_env(tmp_path, capsys):
    pytest.importorskip("gymnasium")
    pytest.importorskip("pygame")  # Gymnasium's classic-control renderer
    run_dir = train(
        tmp_path / "run",
        [
            *("--env", "gymnasium:CartPole-v1", "--total-timesteps", "512", "--chunks", "1"),
            *("--set", "num_envs=4", "--set", "num_steps=32", "--set", "hidden_sizes=8"),
            *("--set", "num_evals=1", "--set", "eval_episodes=2"),
        ],
        seeds=1,
    )
    videos = tmp_path / "videos"
    result = evaluate(run_dir, tmp_path, "--video", str(videos))
    assert result["mean_return"] == logged_eval_returns(run_dir)  # host envs repeat their evaluation too
    frames = np.load(videos / "seed0.npz")["frames"]
    assert frames.dtype == np.uint8 and frames.ndim == 4 and frames.shape[1:] == (400, 600, 3)
    episode = result["videos"][0]
    assert episode["frames"] == len(frames) and episode["return"] == len(frames) - 1  # CartPole: 1 per step
    assert len(frames) > 2 and not np.array_equal(frames[0], frames[-1])  # the pole moved
    from PIL import Image

    with Image.open(videos / "seed0.gif") as gif:
        assert gif.n_frames > 1 and gif.size == (600, 400)
    assert f"video of seed 0: {videos / 'seed0.npz'}, {videos / 'seed0.gif'}" in capsys.readouterr().out


# ----------------------------------------------------------------------------- bad input


@pytest.fixture(scope="module")
def run_without_checkpoints(ppo_run, tmp_path_factory):
    """A run directory as ``train --logdir`` without ``--checkpoint-every`` leaves it."""
    directory = tmp_path_factory.mktemp("no-checkpoints")
    shutil.copy(ppo_run / "run.json", directory / "run.json")
    return directory


@pytest.mark.parametrize(
    "args, message",
    [
        (("evaluate", "{missing}"), "no run directory"),
        (("evaluate", "{empty}"), "holds no run: it has no run.json"),
        (("evaluate", "{bare}"), "has no checkpoints: train the run with --checkpoint-every"),
        (("record", "{bare}", "--steps", "8", "--out", "{tmp}/d.npz"), "has no checkpoints"),
        (("evaluate", "{run}", "--checkpoint", "7"), "has no checkpoint at step 7; its steps: ["),
        (("evaluate", "{run}", "--checkpoint", "newest"), "--checkpoint must be latest, best or a step number"),
        (("evaluate", "{run}", "--episodes", "0"), "--episodes must be >= 1, got 0"),
        (("evaluate", "{run}", "--video", "{tmp}/v"), "env 'CartPole-v1' cannot render; only rendering envs"),
        (("record", "{run}", "--steps", "0", "--out", "{tmp}/d.npz"), "--steps must be >= 1, got 0"),
        (("record", "{run}", "--steps", "8", "--envs", "0", "--out", "{tmp}/d.npz"), "--envs must be >= 1"),
        (("record", "{run}", "--steps", "10", "--envs", "4", "--out", "{tmp}/d.npz"), "must be a multiple of --envs"),
        (("record", "{run}", "--steps", "8", "--out", "{tmp}/d.csv"), "--out must end in .npz"),
        (("record", "{run}", "--steps", "8", "--out", "{tmp}/no/d.npz"), "no such directory"),
        (("record", "{run}", "--steps", "8", "--policy-seed", "2", "--out", "{tmp}/d.npz"), "--policy-seed must be in"),
    ],
)
def test_bad_input_is_one_line_and_exit_status_2(args, message, ppo_run, run_without_checkpoints, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    paths = {
        "run": ppo_run,
        "bare": run_without_checkpoints,
        "missing": tmp_path / "missing",
        "empty": tmp_path / "empty",
        "tmp": tmp_path,
    }
    assert cli.main([arg.format(**paths) for arg in args] + ["--no-cache"]) == 2
    stderr = capsys.readouterr().err
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr and len(lines) == 1 and message in lines[0], stderr
    assert not (tmp_path / "d.npz").exists()
