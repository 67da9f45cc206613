"""Datasets that say what they are: mixtures of policies (shares, metadata, per-part
return statistics), ``describe``, D4RL- and Minari-style HDF5 files read from local
paths (checked against plain NumPy loops written here), ``load`` by suffix, clear
errors for missing keys and files and for datasets larger than the device's memory,
and ``python -m jaxrl record`` with several parts."""

from __future__ import annotations

import math

import h5py
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import data, envs
from jaxrl.buffers import replay
from jaxrl.workflow import cli

# ----------------------------------------------------------------------------- references


def file_episodes(reward, done):
    """Per step, the return and length of its episode (episodes end where ``done``), by a loop."""
    totals, lengths = np.zeros(len(reward)), np.zeros(len(reward), int)
    start, running = 0, 0.0
    for i in range(len(reward)):
        running += float(reward[i])
        if done[i] or i == len(reward) - 1:
            totals[start : i + 1], lengths[start : i + 1] = running, i + 1 - start
            start, running = i + 1, 0.0
    return totals, lengths


def reference_d4rl(arrays, with_next):
    """The transitions a D4RL file holds, row by row: all of them with next_observations;
    without, D4RL's qlearning_dataset (no last row, no timeout row) and the row before a
    dropped timeout marked truncated. Episode statistics are the file's episodes'."""
    obs, act, rew = arrays["observations"], arrays["actions"], arrays["rewards"]
    term, tout = arrays["terminals"].astype(bool), arrays["timeouts"].astype(bool)
    totals, lengths = file_episodes(rew, term | tout)
    rows = []
    for i in range(len(rew) if with_next else len(rew) - 1):
        if with_next:
            next_obs, terminated, truncated = arrays["next_observations"][i], term[i], tout[i]
        else:
            if tout[i]:
                continue
            next_obs, terminated, truncated = obs[i + 1], term[i], bool(tout[i + 1] and not term[i])
        done = terminated or truncated
        rows.append(
            dict(
                obs=obs[i],
                action=act[i],
                reward=rew[i],
                terminated=terminated,
                truncated=truncated,
                next_obs=next_obs,
                episode_return=totals[i] if done else 0.0,
                episode_length=lengths[i] if done else 0,
            )
        )
    return {name: np.array([row[name] for row in rows]) for name in rows[0]}


def d4rl_arrays(size=60, seed=0, with_next=True):
    rng = np.random.default_rng(seed)
    terminals = rng.random(size) < 0.08
    timeouts = (rng.random(size) < 0.08) & ~terminals
    terminals[[10, size - 1]] = True  # a terminal inside, and the file's last row
    timeouts[[20, 21, 40]] = True  # a one-step episode that times out, and a timeout
    terminals[[20, 21, 40]] = False
    terminals[30], timeouts[31] = True, True  # a terminal right before a one-step timeout episode
    arrays = {
        "observations": rng.normal(size=(size, 3)),  # float64 in the file: float32 in the dataset
        "actions": rng.uniform(-2, 2, size=(size, 1)),
        "rewards": rng.normal(size=size),
        "terminals": terminals.astype(np.float32),  # D4RL stores floats or bools
        "timeouts": timeouts,
    }
    if with_next:
        arrays["next_observations"] = rng.normal(size=(size, 3))
    return arrays


def write_d4rl(path, arrays):
    with h5py.File(path, "w") as file:
        for key, value in arrays.items():
            file.create_dataset(key, data=value)
    return path


def assert_holds(dataset, expected):
    for name, value in expected.items():
        got = np.asarray(getattr(dataset, name))
        assert got.shape == value.shape, name
        np.testing.assert_allclose(got, value, rtol=1e-5, atol=1e-5, err_msg=name)


# ----------------------------------------------------------------------------- D4RL


@pytest.mark.parametrize("with_next", [True, False])
def test_d4rl_file_matches_a_numpy_reference(tmp_path, with_next):
    arrays = d4rl_arrays(with_next=with_next)
    path = write_d4rl(tmp_path / "pendulum.hdf5", arrays)
    dataset = data.load_d4rl(path, env_id="Pendulum-v1")
    expected = reference_d4rl(arrays, with_next)
    assert_holds(dataset, expected)
    dropped = 0 if with_next else 1 + int(arrays["timeouts"][:-1].sum())  # the last row and the timeouts
    assert dataset.size == 60 - dropped
    assert dataset.obs.dtype == jnp.float32 and dataset.action.dtype == jnp.float32
    assert dataset.terminated.dtype == jnp.bool_ and dataset.episode_length.dtype == jnp.int32
    assert dataset.env_id == "Pendulum-v1" and dataset.num_envs == 1
    assert data.metadata(dataset)["source"] == {"format": "d4rl", "path": str(path)}
    if not with_next:  # the stream chains wherever no episode ends
        done = np.asarray(dataset.done)
        chained = np.asarray(dataset.next_obs)[:-1][~done[:-1]] == np.asarray(dataset.obs)[1:][~done[:-1]]
        assert chained.all()


def test_d4rl_discrete_actions_become_int32(tmp_path):
    arrays = d4rl_arrays()
    arrays["observations"] = arrays["next_observations"] = np.zeros((60, 4), np.float32)
    arrays["actions"] = np.arange(60, dtype=np.int64) % 2
    dataset = data.load(write_d4rl(tmp_path / "cartpole.h5", arrays), env_id="CartPole-v1")
    assert dataset.action.dtype == jnp.int32 and dataset.action.shape == (60,)
    np.testing.assert_array_equal(dataset.action, arrays["actions"])


# ----------------------------------------------------------------------------- Minari


def minari_episodes(structured: bool, seed: int = 0):
    """Eleven episodes (ids 0..10: numeric order is not string order) of 1 to 6 steps,
    ending terminated, truncated or cut (neither)."""
    rng = np.random.default_rng(seed)
    episodes = []
    for index in range(11):
        steps = 1 + index % 6
        observations = rng.normal(size=(steps + 1, 4)).astype(np.float32)
        if structured:
            observations = {
                "position": observations,
                "pair": (rng.integers(0, 5, size=(steps + 1,)), rng.normal(size=(steps + 1, 2))),
            }
        ending = ("terminated", "truncated", "cut")[index % 3]
        terminations, truncations = np.zeros(steps, bool), np.zeros(steps, bool)
        terminations[-1], truncations[-1] = ending == "terminated", ending == "truncated"
        episodes.append(
            dict(
                observations=observations,
                actions=rng.integers(0, 2, size=steps),
                rewards=rng.normal(size=steps),
                terminations=terminations,
                truncations=truncations,
            )
        )
    return episodes


def write_minari(path, episodes):
    def write(group, key, value):
        if isinstance(value, dict):
            sub = group.create_group(key)
            for name, leaf in value.items():
                write(sub, name, leaf)
        elif isinstance(value, tuple):
            sub = group.create_group(key)
            for index, leaf in enumerate(value):
                write(sub, f"_index_{index}", leaf)
        else:
            group.create_dataset(key, data=value)

    with h5py.File(path, "w") as file:
        for index, episode in enumerate(episodes):
            group = file.create_group(f"episode_{index}")
            group.attrs["id"], group.attrs["total_steps"] = index, len(episode["rewards"])
            for key, value in episode.items():
                write(group, key, value)
            group.create_group("infos")  # not read
    return path


def reference_minari(episodes):
    """Each episode's steps in order of id, a cut episode's last step truncated, its
    return and length on its last step; observations float32."""
    rows = []
    for episode in episodes:
        steps = len(episode["rewards"])
        for t in range(steps):
            last = t == steps - 1
            terminated = bool(episode["terminations"][t])
            truncated = bool(episode["truncations"][t]) or (last and not terminated)
            rows.append(
                dict(
                    obs=jax.tree.map(lambda leaf: np.float32(leaf[t]), episode["observations"]),
                    next_obs=jax.tree.map(lambda leaf: np.float32(leaf[t + 1]), episode["observations"]),
                    action=episode["actions"][t],
                    reward=episode["rewards"][t],
                    terminated=terminated,
                    truncated=truncated,
                    episode_return=float(np.sum(episode["rewards"])) if last else 0.0,
                    episode_length=steps if last else 0,
                )
            )
    return {name: jax.tree.map(lambda *leaves: np.array(leaves), *[row[name] for row in rows]) for name in rows[0]}


@pytest.mark.parametrize("structured", [False, True])
def test_minari_file_matches_a_numpy_reference(tmp_path, structured):
    episodes = minari_episodes(structured)
    directory = tmp_path / "cartpole-random-v0" / "data"
    directory.mkdir(parents=True)
    path = write_minari(directory / "main_data.hdf5", episodes)
    dataset = data.load_minari(tmp_path / "cartpole-random-v0", env_id=None if structured else "CartPole-v1")
    expected = reference_minari(episodes)
    for name in ("obs", "next_obs"):
        got, want = getattr(dataset, name), expected.pop(name)
        assert jax.tree.structure(got) == jax.tree.structure(want), name
        for got_leaf, want_leaf in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            assert got_leaf.dtype == jnp.float32
            np.testing.assert_allclose(got_leaf, want_leaf, rtol=1e-6)
    assert_holds(dataset, expected)
    assert dataset.size == sum(len(e["rewards"]) for e in episodes) and dataset.action.dtype == jnp.int32
    assert int(np.asarray(dataset.done).sum()) == len(episodes)  # every episode ends
    assert data.metadata(dataset)["source"] == {"format": "minari", "path": str(path), "episodes": 11}
    assert data.load(path).size == dataset.size  # .hdf5 with episode groups: Minari


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("key", ["observations", "actions", "rewards", "terminals", "timeouts"])
def test_a_missing_d4rl_key_is_named(tmp_path, key):
    arrays = d4rl_arrays()
    del arrays[key]
    path = write_d4rl(tmp_path / "broken.hdf5", arrays)
    with pytest.raises(ValueError, match=f"broken.hdf5: it has no '{key}'"):
        data.load(path)


def test_a_missing_minari_key_is_named(tmp_path):
    episodes = minari_episodes(False)
    del episodes[3]["terminations"]
    path = write_minari(tmp_path / "main_data.hdf5", episodes)
    with pytest.raises(ValueError, match="main_data.hdf5: it has no 'episode_3/terminations'"):
        data.load_minari(path)


def test_a_minari_episode_without_its_final_observation_is_an_error(tmp_path):
    episodes = minari_episodes(False)
    episodes[2]["observations"] = episodes[2]["observations"][:-1]
    with pytest.raises(ValueError, match=r"episode_2/observations must hold 4 observations"):
        data.load_minari(write_minari(tmp_path / "main_data.hdf5", episodes))


@pytest.mark.parametrize("loader", [data.load, data.load_d4rl, data.load_minari, data.load_dataset])
def test_a_missing_file(loader, tmp_path):
    with pytest.raises(FileNotFoundError):
        loader(tmp_path / "missing.hdf5")


def test_load_refuses_an_unknown_suffix(tmp_path):
    (tmp_path / "data.csv").write_text("obs,action\n")
    with pytest.raises(ValueError, match="unknown suffix '.csv'"):
        data.load(tmp_path / "data.csv")


def test_a_dataset_larger_than_the_device_memory_is_a_clear_error(tmp_path, monkeypatch):
    arrays = d4rl_arrays()
    path = write_d4rl(tmp_path / "big.hdf5", arrays)
    # obs and next_obs (3 floats each), action (1), reward, return: 9 x 4 bytes; 2 bools; a 4-byte length
    needed = 60 * (9 * 4 + 2 + 4)
    with pytest.raises(ValueError, match=rf"dataset of 60 transitions needs 0.00 GiB \({needed:,} bytes\)"):
        data.load_d4rl(path, max_bytes=needed - 1)
    assert data.load_d4rl(path, max_bytes=needed).size == 60
    monkeypatch.setattr(replay, "memory_limit", lambda: 1000)
    for load in (lambda: data.load(path), lambda: data.load(write_minari(tmp_path / "m.h5", minari_episodes(False)))):
        with pytest.raises(ValueError, match=r"more than the 0.00 GiB \(1,000 bytes\) of memory on"):
            load()


# ----------------------------------------------------------------------------- mixtures


def always_left(params, obs, carry, key):
    return jnp.zeros(obs.shape[:1], jnp.int32), carry


def test_part_steps_round_shares_to_multiples_of_num_envs():
    part = lambda name, share: data.Part(name, always_left, None, (), share)  # noqa: E731
    assert data.part_steps([part("a", 0.7), part("b", 0.3)], 100, 5) == [70, 30]
    thirds = [part(name, 1 / 3) for name in "abc"]
    assert data.part_steps(thirds, 30, 3) == [12, 9, 9]  # 10 blocks of 3: the remainder to the first
    assert data.part_steps([part("a", 1.0)], 8, 4) == [8]
    for parts, message in [
        ([part("a", 0.7), part("b", 0.2)], r"sum to 1, got 0.9 \('a': 0.7, 'b': 0.2\)"),
        ([part("a", 1.0), part("b", 0.0)], "part 'b': proportion must be a number > 0, got 0.0"),
        ([part("a", 1.0), part("b", math.nan)], "part 'b': proportion must be a number > 0"),
        ([part("a", 0.99), part("tiny", 0.01)], "part 'tiny': proportion 0.01 of 20 transitions rounds to none"),
        ([], "at least one part"),
    ]:
        with pytest.raises(ValueError, match=message):
            data.part_steps(parts, 20, 2)


def test_uniform_actions_respect_the_space():
    key = jax.random.key(0)
    discrete = envs.EnvSpec(
        obs_shape=(2,), obs_dtype=np.float32, action_kind="discrete", action_shape=(), num_actions=3
    )
    assert set(np.asarray(data.uniform_actions(key, discrete, 300)).tolist()) == {0, 1, 2}
    mask = np.array([[True, False, True]] * 300)
    observation = {"x": jax.ShapeDtypeStruct((2,), np.float32), envs.ACTION_MASK: jax.ShapeDtypeStruct((3,), bool)}
    masked = envs.EnvSpec(None, None, "discrete", (), num_actions=3, observation=observation)
    chosen = np.asarray(data.uniform_actions(key, masked, 300, {"x": np.zeros((300, 2)), envs.ACTION_MASK: mask}))
    assert set(chosen.tolist()) == {0, 2}
    multi = envs.EnvSpec((2,), np.float32, "multi_discrete", (2,), action_nvec=(2, 5))
    actions = np.asarray(data.uniform_actions(key, multi, 500))
    assert actions.dtype == np.int32 and set(actions[:, 0]) == {0, 1} and set(actions[:, 1]) == set(range(5))
    low, high = np.array([-1.0, 0.0], np.float32), np.array([1.0, 10.0], np.float32)
    box = envs.EnvSpec((2,), np.float32, "continuous", (2,), action_low=low, action_high=high)
    actions = np.asarray(data.uniform_actions(key, box, 500))
    assert (actions >= low).all() and (actions <= high).all() and actions[:, 1].max() > 5
    unbounded = envs.EnvSpec(
        (2,), np.float32, "continuous", (2,), action_low=np.full(2, -np.inf, np.float32), action_high=high
    )
    with pytest.raises(ValueError, match="bounded action space"):
        data.uniform_actions(key, unbounded, 1)


def numpy_statistics(dataset, rows):
    """Episodes that finished in ``rows`` of the dataset: count, mean and population std
    of their returns, by NumPy over the stored arrays."""
    done = (np.asarray(dataset.terminated) | np.asarray(dataset.truncated))[rows]
    returns = np.asarray(dataset.episode_return, np.float64)[rows][done]
    return len(returns), returns.mean(), returns.std()


@pytest.fixture(scope="module")
def mixture():
    """400 CartPole transitions from 4 envs: 70% always pushing left, 30% random."""
    parts = [data.Part("left", always_left, None, (), 0.7, {"rule": "left"}), data.random_part("CartPole-v1", 0.3)]
    return data.collect_mixture(parts, "CartPole-v1", jax.random.key(0), 400, num_envs=4)


def test_mixture_parts_and_their_statistics(mixture, tmp_path):
    assert mixture.size == 400 and mixture.num_envs == 4 and mixture.env_id == "CartPole-v1"
    action = np.asarray(mixture.action)
    assert (action[:280] == 0).all() and 0.3 < action[280:].mean() < 0.7  # the parts in order
    parts = data.metadata(mixture)["parts"]
    assert [(p["name"], p["policy"], p["proportion"], p["transitions"]) for p in parts] == [
        ("left", {"rule": "left"}, 0.7, 280),
        ("random", "random", 0.3, 120),
    ]
    for part, rows in zip(parts, (slice(0, 280), slice(280, 400))):
        episodes, mean, std = numpy_statistics(mixture, rows)
        assert part["episodes"] == episodes > 0
        np.testing.assert_allclose([part["episode_return_mean"], part["episode_return_std"]], [mean, std], rtol=1e-6)
    # Pushing left ends CartPole episodes sooner than random play.
    assert parts[0]["episode_return_mean"] < parts[1]["episode_return_mean"]

    described = data.describe(mixture)
    episodes, mean, std = numpy_statistics(mixture, slice(None))
    assert described["transitions"] == 400 and described["episodes"] == episodes and described["parts"] == parts
    np.testing.assert_allclose([described["episode_return_mean"], described["episode_return_std"]], [mean, std])

    path = tmp_path / "mixture.npz"
    data.save_dataset(path, mixture)
    loaded = data.load_dataset(path, env_id="CartPole-v1")
    assert loaded.metadata == mixture.metadata and data.describe(loaded) == described
    np.testing.assert_array_equal(loaded.action, mixture.action)


def test_files_without_metadata_load_and_stay_readable(mixture, tmp_path):
    """A dataset without metadata is written as before (no _metadata key), and such a
    file, as every file written before mixtures, loads with metadata "". Bad metadata is
    an error naming the field."""
    plain = mixture.replace(metadata="")
    path = tmp_path / "plain.npz"
    data.save_dataset(path, plain)
    with np.load(path) as file:
        assert "_metadata" not in file.files and int(file["_format_version"]) == 1
    loaded = data.load_dataset(path)
    assert loaded.metadata == "" and data.describe(loaded)["parts"] == []
    with np.load(path) as file:
        contents = dict(file)
    np.savez(tmp_path / "bad.npz", **contents, _metadata=np.str_("{not json"))
    with pytest.raises(ValueError, match="dataset field 'metadata' is not JSON"):
        data.load_dataset(tmp_path / "bad.npz")


def test_random_part_on_a_box_stays_in_bounds():
    part = data.random_part("Pendulum-v1", 1.0, env_kwargs={"max_steps_in_episode": 5})
    dataset = data.collect_mixture([part], "Pendulum-v1", jax.random.key(1), 20, 2, {"max_steps_in_episode": 5})
    action = np.asarray(dataset.action)
    assert action.shape == (20, 1) and action.min() >= -2 and action.max() <= 2 and action.std() > 0.5
    assert data.describe(dataset)["episodes"] == 4


# ----------------------------------------------------------------------------- the record command


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A PPO run on CartPole-v1 of two iterations (2 envs x 16 steps), checkpointed after each."""
    logdir = tmp_path_factory.mktemp("ppo") / "run"
    arguments = ["train", "ppo", "--env", "CartPole-v1", "--total-timesteps", "64", "--chunks", "2"]
    arguments += ["--set", "num_envs=2", "--set", "num_steps=16", "--set", "hidden_sizes=8", "--set", "num_evals=0"]
    arguments += ["--logdir", str(logdir), "--checkpoint-every", "1", "--no-progress", "--no-cache"]
    assert cli.main(arguments) == 0
    return logdir


@pytest.mark.slow  # trains a (tiny) run
def test_record_a_mixture_from_the_command_line(tiny_run, tmp_path, capsys):
    out = tmp_path / "mixed.npz"
    parts = ["--part", f"{tiny_run}@1:0.5", "--part", "random:0.5"]
    assert cli.main(["record", *parts, "--steps", "40", "--envs", "2", "--out", str(out), "--no-cache"]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}: 40 transitions" in printed and "random" in printed and "return (mean ± std)" in printed
    dataset = data.load(out, env_id="CartPole-v1")
    parts = data.metadata(dataset)["parts"]
    assert [(p["name"], p["transitions"]) for p in parts] == [(f"{tiny_run}@1", 20), ("random", 20)]
    policy = parts[0]["policy"]
    assert policy["run_dir"] == str(tiny_run) and policy["algorithm"] == "ppo"
    assert policy["checkpoint_step"] == 1 and policy["timesteps"] == 32 and policy["deterministic"]

    # Every part random: the env comes from --env. The old form still works.
    random_only = tmp_path / "random.npz"
    assert (
        cli.main(
            [
                "record",
                "--part",
                "random",
                "--env",
                "CartPole-v1",
                "--steps",
                "8",
                "--out",
                str(random_only),
                "--no-cache",
            ]
        )
        == 0
    )
    assert data.metadata(data.load(random_only))["parts"][0]["policy"] == "random"
    single = tmp_path / "single.npz"
    assert cli.main(["record", str(tiny_run), "--steps", "8", "--out", str(single), "--no-cache"]) == 0
    assert data.metadata(data.load(single))["parts"][0]["policy"]["checkpoint_step"] == 2
    capsys.readouterr()

    for args, message in [
        (["--part", f"{tiny_run}:0.5", "--part", "random:0.4"], "must sum to 1, got 0.9"),
        (["--part", "random"], "--env is needed when every part is random"),
        (["--part", "random:half", "--env", "CartPole-v1"], "its share 'half' is not a number"),
        ([str(tiny_run), "--part", "random"], "give RUN_DIR or --part, not both"),
        (["--part", f"{tiny_run}:0.5", "--part", "random:0.5", "--env", "Acrobot-v1"], "--env Acrobot-v1 is not"),
        (["--part", f"{tiny_run}@7:1"], "has no checkpoint at step 7"),
    ]:
        path = tmp_path / "bad.npz"
        assert cli.main(["record", *args, "--steps", "8", "--out", str(path), "--no-cache"]) == 2, args
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, lines)
        assert not path.exists()
