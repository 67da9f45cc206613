"""The command line: help, one-line errors with exit status 2, and a tiny training run."""

import json
import os
import subprocess
import sys

import pytest


def run(*args, timeout=600, **env):
    env = {**os.environ, "JAXRL_CACHE_DIR": os.environ.get("JAXRL_CACHE_DIR", ""), **env}
    return subprocess.run(
        [sys.executable, "-m", "jaxrl", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.mark.parametrize("name", ["ppo", "reinforce"])
def test_help_lists_every_config_field_with_its_default(name, capsys):
    import dataclasses

    from jaxrl.algorithms import get
    from jaxrl.workflow import cli

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", name, "--help"])
    assert exit_info.value.code == 0
    stdout = capsys.readouterr().out
    for field in dataclasses.fields(get(name).Config):
        if field.name in ("env_id", "env_kwargs"):
            continue
        assert field.name in stdout, field.name
    assert {"ppo": "learning_rate            0.00025", "reinforce": "num_steps                None"}[name] in stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (("train", "dqnn"), "unknown algorithm 'dqnn'"),
        (("train", "ppo", "--env", "CartPol-v1"), "unknown env_id 'CartPol-v1'. Did you mean 'CartPole-v1'"),
        (("train", "ppo", "--set", "lr=3e-4"), "unknown config field 'lr'"),
        (("train", "ppo", "--set", "num_envs=abc"), "cannot parse num_envs='abc'"),
        (("train", "ppo", "--set", "num_minibatches=3"), "num_minibatches (3) must divide"),
        (("train", "ppo", "--env-param", "max_steps=5"), "unknown env parameter(s) ['max_steps']"),
        (("train", "ppo", "--seeds", "0"), "--seeds must be >= 1"),
        (("train", "dqn", "--env", "Pendulum-v1"), "DQN needs a discrete action space"),
        (("train", "dqn", "--set", "buffer_size=10"), "buffer_size (10) must be at least batch_size"),
        (("train", "td3", "--env", "CartPole-v1"), "TD3 needs a continuous (Box) action space"),
        (("train", "sac", "--env", "CartPole-v1"), "set discrete=True"),
        (("train", "sac", "--set", "target_entropy=abc"), "cannot parse target_entropy='abc' as a number or 'none'"),
        (("train", "reinforce", "--set", "num_steps=100"), "num_steps (100) must be at least the env's time limit"),
        (("train", "impala", "--set", "baseline=false"), "unknown config field 'baseline' for impala"),
    ],
)
def test_bad_input_is_one_line_and_exit_status_2(args, message, capsys):
    """In-process (a subprocess per case would pay JAX's start-up each time); the
    subprocess path is checked once below."""
    from jaxrl.workflow import cli

    assert cli.main(list(args)) == 2
    stderr = capsys.readouterr().err
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], stderr


@pytest.mark.slow
def test_python_m_jaxrl_exits_with_status_2_on_bad_input():
    result = run("train", "ppo", "--env", "CartPol-v1")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Did you mean 'CartPole-v1'" in lines[0], result.stderr


@pytest.mark.slow
def test_tiny_training_run_prints_a_table(tmp_path):
    summary = tmp_path / "summary.json"
    result = run(
        "train",
        "ppo",
        "--env",
        "CartPole-v1",
        "--seeds",
        "2",
        "--total-timesteps",
        "2048",
        "--set",
        "num_evals=1",
        "--set",
        "hidden_sizes=8,8",
        "--env-param",
        "max_steps_in_episode=200",
        "--no-cache",
        "--json",
        str(summary),
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "compiled in" in out and "env steps/s" in out and "mean" in out
    data = json.loads(summary.read_text())
    assert data["seeds"] == 2 and len(data["eval_return"]) == 2
    assert all(1 <= r <= 200 for r in data["eval_return"])  # the 200-step override reached the env


def test_variant_flag_starts_from_the_named_settings():
    from jaxrl import exploration, value_heads
    from jaxrl.algorithms import dqn
    from jaxrl.workflow.cli import build_parser, make_config

    args = build_parser().parse_args(["train", "dqn", "--variant", "rainbow", "--set", "n_step=5"])
    config = make_config(dqn, args)
    assert isinstance(config.head, value_heads.Categorical) and isinstance(config.exploration, exploration.NoisyNets)
    assert config.prioritized and config.double
    assert config.n_step == 5  # explicit --set wins over the variant


def test_set_chooses_a_part_then_its_fields():
    """``--set exploration=ou`` picks TD3's Ornstein-Uhlenbeck noise, whose own fields
    (not the default Gaussian's) ``--set exploration.sigma`` then reaches; setting a field
    of SAC's optional gSDE part turns it on at its other defaults."""
    from jaxrl.algorithms import get, sac, td3
    from jaxrl.buffers.sequence import Windows
    from jaxrl.exploration import GSDE, OrnsteinUhlenbeck
    from jaxrl.value_heads import Categorical
    from jaxrl.workflow.cli import build_parser, make_config

    args = build_parser().parse_args(["train", "td3", "--set", "exploration=ou", "--set", "exploration.sigma=1"])
    assert make_config(td3, args).exploration == OrnsteinUhlenbeck(sigma=1.0)
    args = build_parser().parse_args(["train", "sac", "--set", "sde.sample_freq=8"])
    assert make_config(sac, args).sde == GSDE(sample_freq=8)
    args = build_parser().parse_args(["train", "sac", "--env", "MountainCarContinuous-v0", "--set", "sde=none"])
    assert make_config(sac, args).sde is None  # the preset's gSDE turned off
    for algorithm in ("sac", "ppo"):  # an optional part switched on at its defaults
        args = build_parser().parse_args(
            ["train", algorithm, "--env", "Pendulum-v1", "--no-preset", "--set", "sde=true"]
        )
        assert make_config(get(algorithm), args).sde == GSDE()
    args = build_parser().parse_args(["train", "dqn", "--variant", "rainbow", "--set", "head.v_max=200"])
    assert make_config(get("dqn"), args).head == Categorical(v_max=200.0)  # the variant's part, then its field
    # A part's fields are set before the Config's checks, which see windows of 4, not the default 20.
    small = ["learning_starts=8", "num_envs=1", "num_steps=1", "n_step=1", "buffer_size=64", "batch_size=4"]
    windows = ["windows.length=4", "windows.burn_in=1", "windows.period=1"]
    args = build_parser().parse_args(["train", "r2d2", *[w for s in small + windows for w in ("--set", s)]])
    assert make_config(get("r2d2"), args).windows == Windows(4, 1, 1)
