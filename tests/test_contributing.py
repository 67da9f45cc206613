"""The worked examples of docs/contributing.md (files under docs/examples/, which the page
includes), run as they are shown: a registered algorithm through the runner, a toy env
suite behind a prefix trained on by PPO, and a logger that the runner writes to."""

from __future__ import annotations

import importlib.util
import pathlib

import jax
import numpy as np
import pytest

pytestmark = pytest.mark.slow  # compiles or runs whole training programs: see pyproject.toml

EXAMPLES = pathlib.Path(__file__).parent.parent / "docs" / "examples"


@pytest.fixture(autouse=True)
def _forget_what_the_examples_register():
    """The examples register an algorithm and an env prefix: the other tests meet the
    registries as they were."""
    from jaxrl import algorithms
    from jaxrl.envs import registry

    saved = [(table, dict(table)) for table in (algorithms._REGISTERED, registry._REGISTRY, registry._PREFIXES)]
    yield
    for table, before in saved:
        table.clear()
        table.update(before)


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"jaxrl_docs_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pages_include_every_example():
    page = (EXAMPLES.parent / "contributing.md").read_text()
    for path in EXAMPLES.glob("*.py"):
        assert f"examples/{path.name}" in page, path.name


def test_a_registered_algorithm_trains_through_the_runner(tmp_path):
    from jaxrl import algorithms

    example = load("register_algorithm")
    assert algorithms.get("my_ppo_es") is example.record and "my_ppo_es" in algorithms.names()
    result = example.train_small(str(tmp_path / "run"))
    assert result.completed == 3 and np.asarray(result.metrics["timesteps"]).shape == (2, 3)
    assert (tmp_path / "run" / "metrics.csv").exists()


def test_the_toy_suite_speaks_the_gymnax_api():
    from jaxrl import envs

    load("toy_suite")  # registers the "toy:" prefix
    env, params = envs.make("toy:Corridor-3", max_steps_in_episode=4)
    assert envs.make("toy:Corridor-3")[1].max_steps_in_episode == 20
    obs, state = env.reset(jax.random.key(0), params)
    np.testing.assert_array_equal(obs, [1, 0, 0])
    # Two steps right: the end, terminated (not truncated), reward 1, then a reset with
    # the ending observation in info.
    obs, state, reward, terminated, truncated, info = env.step(jax.random.key(1), state, 1, params)
    assert not terminated and float(reward) == 0.0
    obs, state, reward, terminated, truncated, info = env.step(jax.random.key(2), state, 1, params)
    assert bool(terminated) and not bool(truncated) and float(reward) == 1.0
    np.testing.assert_array_equal(info["final_observation"], [0, 0, 1])
    np.testing.assert_array_equal(obs, [1, 0, 0])
    # Walking left until the time limit: truncated, not terminated.
    for i in range(4):
        obs, state, reward, terminated, truncated, info = env.step(jax.random.key(3 + i), state, 0, params)
    assert bool(truncated) and not bool(terminated)
    with pytest.raises(ValueError, match="toy ids are Corridor-<length>"):
        envs.make("toy:Maze-3")
    with pytest.raises(ValueError, match="unknown env parameter"):
        envs.make("toy:Corridor-3", max_steps=5)


@pytest.mark.learns
def test_ppo_learns_the_toy_corridor():
    """PPO on ``toy:Corridor-5`` for 1,920 env steps (the example's settings), 4 vmapped
    seeds: the last evaluation walks the shortest way (4 steps right, return 1) in at
    least 3 of them."""
    out = load("toy_suite").train_ppo(seeds=4)
    returns, lengths = np.asarray(out.metrics["eval_return"])[:, -1], np.asarray(out.metrics["eval_length"])[:, -1]
    assert np.sum((returns == 1.0) & (lengths == 4.0)) >= 3, (returns, lengths)


def test_the_markdown_logger_gets_the_runners_rows(tmp_path):
    example = load("markdown_logger")
    result = example.train_with_logger(str(tmp_path))
    lines = (tmp_path / "metrics.md").read_text().splitlines()
    assert lines[0] == "| iteration | timesteps | episode_return | eval_return |"
    rows = lines[2:]
    assert [int(line.split("|")[1]) for line in rows] == list(result.iterations)
    assert float(rows[-1].split("|")[2]) == float(np.max(result.metrics["timesteps"][:, -1]))
    # A resume from iteration 4 drops the rows after it.
    logger = example.MarkdownLogger(str(tmp_path / "metrics.md"))
    logger.truncate(4, 4 * 64)
    kept = (tmp_path / "metrics.md").read_text().splitlines()[2:]
    assert [int(line.split("|")[1]) for line in kept] == [i for i in result.iterations if i <= 4]
