"""TD3+BC and the offline family's data path (jaxrl.algorithms.offline): the actor's
objective and the batch against NumPy, the delayed actor, the replay a dataset fills,
the hand-over to TD3, compile-once vmaps, the command line and clear errors. Learning:
tests/test_offline_learning.py."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import data
from jaxrl.algorithms import actor_critic, ddpg, offline, td3_bc
from jaxrl.workflow import cli

SMALL = td3_bc.Config(
    env_id="Pendulum-v1", num_updates=8, batch_size=32, hidden_sizes=(16, 16), num_evals=1, eval_episodes=1
)


def _uniform(params, obs, carry, key):
    return jax.random.uniform(key, (obs.shape[0], 1), minval=-2.0, maxval=2.0), carry


@functools.lru_cache(maxsize=1)
def dataset() -> data.Dataset:
    """1,000 Pendulum-v1 transitions of uniformly random actions (5 episodes)."""
    return data.collect_dataset(_uniform, (), "Pendulum-v1", jax.random.key(0), 1_000, num_envs=5)


def test_batch_is_a_uniform_sample_standardised_by_the_dataset():
    """The losses' batch: the sampled transitions, observations standardised by the
    dataset's mean and std (NumPy over all S), ``discount`` gamma, ``weight`` ones."""
    ds = dataset()
    params = offline.with_obs_stats({}, ds, SMALL)
    obs = np.asarray(ds.obs)
    mean, std = obs.mean(0), obs.std(0)
    np.testing.assert_allclose(params["obs_stats"].mean, mean, rtol=1e-4, atol=1e-4)
    batch = offline.batch(params, ds, jax.random.key(1), SMALL)
    index = np.asarray(jax.random.randint(jax.random.key(1), (SMALL.batch_size,), 0, ds.size))
    np.testing.assert_allclose(batch["obs"], (obs[index] - mean) / std, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(batch["next_obs"], (np.asarray(ds.next_obs)[index] - mean) / std, rtol=1e-3, atol=1e-3)
    np.testing.assert_array_equal(batch["action"], np.asarray(ds.action)[index])
    np.testing.assert_array_equal(batch["reward"], np.asarray(ds.reward)[index])
    np.testing.assert_array_equal(batch["terminated"], np.asarray(ds.terminated)[index])
    np.testing.assert_allclose(batch["discount"], np.full(SMALL.batch_size, SMALL.gamma))
    np.testing.assert_array_equal(batch["weight"], np.ones(SMALL.batch_size))


def test_actor_objective_is_normalised_q_plus_behaviour_cloning():
    """``-alpha / mean|Q_1| * mean Q_1(s, pi(s)) + mean (pi(s) - a)^2`` on a random
    batch, from the networks' outputs, and the gradient does not flow through lambda."""
    state = td3_bc.init(jax.random.key(2), SMALL, dataset())
    batch = offline.batch(state.params, state.dataset, jax.random.key(3), SMALL)
    online = td3_bc.online_config(SMALL)
    unit = np.asarray(ddpg.policy(state.params["actor"], batch["obs"], online))
    q = np.asarray(ddpg.q_values(state.critic_params, batch["obs"], jnp.asarray(unit), online))[0]
    action = np.asarray(batch["action"]) / 2.0  # Pendulum's Box is [-2, 2]
    for alpha in (2.5, 0.7):
        expected = -alpha / np.abs(q).mean() * q.mean() + np.square(unit - action).mean()
        got = td3_bc.actor_loss(state.params["actor"], state.critic_params, batch, online, alpha)
        np.testing.assert_allclose(got, expected, rtol=1e-5)
    # lambda held constant: the gradient is that of -lambda * mean Q + BC with lambda fixed.
    lmbda = 2.5 / np.abs(q).mean()

    def fixed(actor_params):
        unit = ddpg.policy(actor_params, batch["obs"], online)
        q = ddpg.q_values(jax.tree.map(lambda p: p[:1], state.critic_params), batch["obs"], unit, online, 1)[0]
        return -lmbda * jnp.mean(q) + jnp.mean(jnp.square(unit - actor_critic.unit_action(batch["action"], online)))

    got = jax.grad(td3_bc.actor_loss)(state.params["actor"], state.critic_params, batch, online, 2.5)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), got, jax.grad(fixed)(state.params["actor"])
    )


@pytest.fixture(scope="module")
def small_run():
    train = jax.jit(jax.vmap(td3_bc.train, in_axes=(0, None, None)))
    return train, train(jax.random.split(jax.random.key(4), 2), SMALL, dataset())


def test_the_actor_moves_on_every_second_update_and_metrics_are_per_update(small_run):
    _, out = small_run
    np.testing.assert_array_equal(out.metrics["updates"][0], np.arange(1, 9))
    actor_loss = np.asarray(out.metrics["actor_loss"])
    assert np.isnan(actor_loss[:, 0::2]).all() and np.isfinite(actor_loss[:, 1::2]).all()
    assert np.isfinite(out.metrics["critic_loss"]).all()
    assert np.isfinite(out.metrics["eval_return"][:, -1]).all()
    assert out.state.dataset.obs.shape[:2] == (2, 1_000) and out.state.updates.tolist() == [8, 8]


def test_seeds_and_a_traced_alpha_compile_once(small_run):
    """A sweep over alpha reuses the compiled program (alpha is traced); seeds differ."""
    train, out = small_run
    sweep = SMALL.replace(alpha=jnp.asarray(1.0))
    again = train(jax.random.split(jax.random.key(4), 2), SMALL.replace(alpha=2.5), dataset())
    np.testing.assert_array_equal(again.metrics["critic_loss"], out.metrics["critic_loss"])
    assert not np.array_equal(out.metrics["critic_loss"][0], out.metrics["critic_loss"][1])
    before = train._cache_size()
    train(jax.random.split(jax.random.key(4), 2), sweep.replace(alpha=1.0), dataset())
    assert train._cache_size() == before


def test_fill_replay_holds_the_dataset_rows_of_the_online_envs():
    """The dataset's transitions, in order, as rows of the buffer's lanes (NumPy reshape)."""
    online = td3_bc.online_config(SMALL, num_envs=4, buffer_size=2_000)
    state = ddpg.init(jax.random.key(5), online)
    ds = dataset()
    buffer = offline.fill_replay(state.buffer, ds)
    assert int(buffer.size) == 250 and int(buffer.cursor) == 250
    for name in ("obs", "action", "reward", "terminated", "truncated", "next_obs"):
        expected = np.asarray(getattr(ds, name)).reshape((250, 4) + getattr(ds, name).shape[1:])
        np.testing.assert_array_equal(np.asarray(buffer.data[name])[:250], expected)


def test_hand_over_gives_td3_the_offline_networks_and_the_dataset(small_run):
    _, out = small_run
    offline_state = jax.tree.map(lambda x: x[0], out.state)
    online = td3_bc.online_config(SMALL, total_timesteps=64, learning_starts=0, buffer_size=2_000, num_evals=1)
    program = td3_bc.finetune_program(online)
    initial = program.init(jax.random.key(6), offline_state)
    for mine, theirs in [
        (initial.params, offline_state.params),
        (initial.critic_params, offline_state.critic_params),
        (initial.target_params, offline_state.target_params),
    ]:
        jax.tree.map(np.testing.assert_array_equal, mine, theirs)
    assert int(initial.buffer.size) * online.num_envs == 1_000
    tuned = jax.jit(offline.finetune, static_argnums=0)(program, jax.random.key(7), offline_state)
    assert int(tuned.state.timesteps) == 64 and int(tuned.state.buffer.size) == 250 + 64 // online.num_envs
    without = td3_bc.finetune_program(online, keep_dataset=False).init(jax.random.key(6), offline_state)
    assert int(without.buffer.size) == 0


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(env_id="CartPole-v1"), "continuous"),
        (dict(policy_delay=0), "policy_delay"),
        (dict(num_updates=0), "num_updates"),
        (dict(dataset_path=3), "dataset_path"),
    ],
)
def test_bad_config_is_a_clear_error(overrides, field):
    with pytest.raises((ValueError, TypeError), match=field):
        SMALL.replace(**overrides)


def test_bad_numbers_or_dataset_are_clear_errors_at_init():
    with pytest.raises(ValueError, match="alpha"):
        td3_bc.init(jax.random.key(0), SMALL.replace(alpha=-1.0), dataset())
    with pytest.raises(ValueError, match="batch_size"):
        td3_bc.init(jax.random.key(0), SMALL.replace(batch_size=2_000), dataset())
    with pytest.raises(ValueError, match="td3_bc.train needs a dataset"):
        td3_bc.train(jax.random.key(0), SMALL)


@pytest.mark.slow
def test_trains_from_a_dataset_file_on_the_command_line(tmp_path, capsys):
    path = tmp_path / "pendulum.npz"
    data.save_dataset(path, dataset())
    args = ["train", "td3_bc", "--env", "Pendulum-v1", "--no-cache", "--no-progress", "--set", f"dataset_path={path}"]
    args += ["--set", "num_updates=20", "--set", "hidden_sizes=16,16", "--set", "num_evals=1"]
    assert cli.main(args) == 0, capsys.readouterr().err
    assert cli.main(["train", "td3_bc", "--no-cache", "--no-progress"]) == 2
    assert "td3_bc.train needs a dataset" in capsys.readouterr().err
