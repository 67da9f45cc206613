"""Datasets: what collect_dataset records (checked step by step against the env layout),
the .npz round trip, schema errors naming the field, and atomic saves."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import data

NUM_STEPS, NUM_ENVS = 600, 3


def random_cartpole(params, obs, carry, key):
    return jax.random.randint(key, obs.shape[:1], 0, 2), carry


@pytest.fixture(scope="module")
def dataset():
    """600 random-policy CartPole transitions from 3 envs (episodes of about 20 steps)."""
    return data.collect_dataset(random_cartpole, None, "CartPole-v1", jax.random.key(0), NUM_STEPS, NUM_ENVS)


def as_numpy(dataset):
    return {name: np.asarray(getattr(dataset, name)) for name in data.FIELDS}


def test_shapes_dtypes_and_metadata(dataset):
    assert dataset.size == NUM_STEPS and dataset.env_id == "CartPole-v1" and dataset.num_envs == NUM_ENVS
    assert dataset.obs.shape == dataset.next_obs.shape == (NUM_STEPS, 4)
    assert dataset.action.shape == (NUM_STEPS,) and dataset.action.dtype == jnp.int32
    for name in ("reward", "terminated", "truncated", "episode_return", "episode_length"):
        assert getattr(dataset, name).shape == (NUM_STEPS,), name
    assert dataset.terminated.dtype == jnp.bool_ and dataset.truncated.dtype == jnp.bool_


def test_transitions_chain_within_each_env_block(dataset):
    """Env-major layout: each env's 200 steps are contiguous. Inside a block the next
    observation is the next row's observation unless an episode ended; every episode's
    recorded return is the sum of its rewards (all start inside the block: fresh reset)."""
    d = as_numpy(dataset)
    steps = NUM_STEPS // NUM_ENVS
    done = d["terminated"] | d["truncated"]
    assert done.sum() > NUM_ENVS  # random CartPole play ends episodes every ~20 steps
    for block in range(NUM_ENVS):
        rows = range(block * steps, (block + 1) * steps)
        running_return, running_length = 0.0, 0
        for i in rows:
            running_return += d["reward"][i]
            running_length += 1
            if i + 1 in rows and not done[i]:
                np.testing.assert_array_equal(d["next_obs"][i], d["obs"][i + 1])
            if done[i]:
                if i + 1 in rows:  # the next row is the first observation of a new episode
                    assert not np.array_equal(d["next_obs"][i], d["obs"][i + 1])
                np.testing.assert_allclose(d["episode_return"][i], running_return, rtol=1e-6)
                assert d["episode_length"][i] == running_length
                running_return, running_length = 0.0, 0
            else:
                assert d["episode_return"][i] == 0 and d["episode_length"][i] == 0
    metrics = data.episode_metrics(dataset)
    assert int(metrics["episodes"]) == done.sum()
    np.testing.assert_allclose(metrics["episode_return"], d["episode_return"][done].mean(), rtol=1e-6)


def test_continuous_actions_are_recorded_as_executed():
    """A policy acting outside Pendulum's [-2, 2] is clipped before the env and the data."""

    def wide(params, obs, carry, key):
        return jax.random.uniform(key, (obs.shape[0], 1), minval=-3.0, maxval=3.0), carry

    pendulum = data.collect_dataset(
        wide, None, "Pendulum-v1", jax.random.key(1), 40, num_envs=2, env_kwargs={"max_steps_in_episode": 10}
    )
    action = np.asarray(pendulum.action)
    assert action.shape == (40, 1) and action.min() == -2.0 and action.max() == 2.0
    assert np.asarray(pendulum.truncated).sum() == 4  # the 10-step time limit reached the env


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(num_steps=10, num_envs=3), "num_steps"),
        (dict(num_steps=0), "num_steps"),
        (dict(num_steps=10, num_envs=0), "num_envs"),
        (dict(num_steps=10.0), "num_steps"),
    ],
)
def test_bad_collect_arguments(kwargs, field):
    with pytest.raises(ValueError, match=field):
        data.collect_dataset(random_cartpole, None, "CartPole-v1", jax.random.key(0), **kwargs)


def test_act_fn_with_wrong_action_shape_is_an_error():
    with pytest.raises(ValueError, match=r"act_fn returned actions of shape \(2, 1\), expected \(2,\)"):
        data.collect_dataset(
            lambda p, obs, carry, k: (jnp.zeros((obs.shape[0], 1), jnp.int32), carry),
            None,
            "CartPole-v1",
            jax.random.key(0),
            4,
            num_envs=2,
        )


def test_save_load_round_trip(dataset, tmp_path):
    path = tmp_path / "cartpole.npz"
    data.save_dataset(path, dataset)
    loaded = data.load_dataset(path, env_id="CartPole-v1")
    assert loaded.env_id == "CartPole-v1" and loaded.num_envs == NUM_ENVS
    for name, value in as_numpy(dataset).items():
        np.testing.assert_array_equal(np.asarray(getattr(loaded, name)), value)
        assert getattr(loaded, name).dtype == value.dtype, name
    with np.load(path) as file:
        assert int(file["_format_version"]) == data.FORMAT_VERSION and str(file["_env_id"]) == "CartPole-v1"
    assert os.listdir(tmp_path) == ["cartpole.npz"]  # no temporary file left behind


def write_npz(path, dataset, **changes):
    """A dataset file as save_dataset writes it, with fields replaced (None: removed)."""
    contents = {
        **as_numpy(dataset),
        "_format_version": np.int64(data.FORMAT_VERSION),
        "_env_id": np.str_(dataset.env_id),
        "_num_envs": np.int64(dataset.num_envs),
        **changes,
    }
    np.savez(path, **{k: v for k, v in contents.items() if v is not None})
    return path


def test_a_file_written_before_structured_observations_loads(dataset, tmp_path):
    """Array observations are stored as they always were (one array per field), so
    format version 1 files load unchanged."""
    path = write_npz(tmp_path / "old.npz", dataset)
    loaded = data.load_dataset(path, env_id="CartPole-v1")
    for name, value in as_numpy(dataset).items():
        np.testing.assert_array_equal(np.asarray(getattr(loaded, name)), value)
    assert data.FORMAT_VERSION == 1


@pytest.mark.parametrize(
    "changes, env_id, message",
    [
        (dict(action=None), None, "field 'action' is missing"),
        (dict(next_obs=None), "CartPole-v1", "field 'next_obs' is missing"),
        (dict(reward=np.zeros((NUM_STEPS, 1), np.float32)), None, r"field 'reward' must have shape \(600,\)"),
        (dict(terminated=np.zeros(NUM_STEPS - 1, bool)), None, r"field 'terminated' must have shape \(600,\)"),
        (dict(terminated=np.zeros(NUM_STEPS, np.float32)), None, "field 'terminated' must have a bool dtype"),
        (dict(obs=np.float32(0.0)), None, r"field 'obs' must be \[S, \.\.\.\] \(rank >= 1\)"),
        (dict(next_obs=np.zeros((NUM_STEPS, 3), np.float32)), None, "field 'next_obs' must have the shape of obs"),
        (dict(action=np.zeros((NUM_STEPS - 1,), np.int32)), None, "field 'action' must be"),
        (dict(_num_envs=np.int64(7)), None, "num_envs"),
        (dict(extra=np.zeros(3)), None, "field 'extra'"),
        (dict(_format_version=None), None, "_format_version"),
        (dict(_format_version=np.int64(99)), None, "_format_version 99"),
        # The env check: recorded elsewhere, or (no env recorded) shapes that do not fit.
        ({}, "Acrobot-v1", "env_id is 'CartPole-v1', expected 'Acrobot-v1'"),
        (dict(_env_id=np.str_("")), "Pendulum-v1", r"field 'obs' has observations of shape \(4,\), expected \(3,\)"),
        (
            dict(
                _env_id=np.str_(""),
                obs=np.zeros((NUM_STEPS, 3), np.float32),
                next_obs=np.zeros((NUM_STEPS, 3), np.float32),
            ),
            "Pendulum-v1",
            r"field 'action' has actions of shape \(\), expected \(1,\)",
        ),
        (dict(action=np.zeros(NUM_STEPS, np.float32)), "CartPole-v1", "field 'action' must be integers"),
    ],
)
def test_schema_errors_name_the_field(dataset, tmp_path, changes, env_id, message):
    path = write_npz(tmp_path / "bad.npz", dataset, **changes)
    with pytest.raises(ValueError, match=message):
        data.load_dataset(path, env_id=env_id)


def test_missing_file():
    with pytest.raises(FileNotFoundError):
        data.load_dataset("/nonexistent/dataset.npz")


def test_a_failed_save_leaves_the_old_file_intact(dataset, tmp_path, monkeypatch):
    path = tmp_path / "data.npz"
    data.save_dataset(path, dataset)
    before = path.read_bytes()

    def crash(file, **arrays):
        file.write(b"half a zip file")
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", crash)
    with pytest.raises(KeyboardInterrupt):
        data.save_dataset(path, jax.tree.map(lambda x: x[:300], dataset))
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["data.npz"]


def test_sample_draws_rows_with_replacement(dataset):
    batch = jax.jit(data.sample, static_argnums=2)(dataset, jax.random.key(5), 1000)
    assert batch.obs.shape == (1000, 4) and batch.env_id == "CartPole-v1"
    rows = {tuple(row) for row in np.asarray(dataset.obs)}
    assert all(tuple(row) in rows for row in np.asarray(batch.obs))
    assert len({tuple(row) for row in np.asarray(batch.obs)}) < 1000  # 1000 draws from 600 rows repeat
