"""Observation normalisation and reward scaling for the off-policy algorithms (DQN, DDPG,
TD3, SAC), against NumPy references: the running statistics equal the mean and variance
of every observation stored in replay, acting and the learner's batches read observations
standardised by them, and stored rewards are the raw ones divided by the running std of
each lane's discounted return, reset at every episode end (terminations and truncations)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import sweep_axes
from jaxrl.algorithms import ddpg, dqn, iql, sac, td3

CLIP, EPS = 10.0, 1e-8


def normalized(obs, stats):
    """NumPy's standardisation: ``clip((obs - mean) / sqrt(var + eps), -10, 10)``."""
    return np.clip((np.asarray(obs) - np.asarray(stats.mean)) / np.sqrt(np.asarray(stats.var) + EPS), -CLIP, CLIP)


def stored(buffer, name):
    """The ``name`` field of every row a uniform or prioritized replay has filled, ``[rows, lanes, ...]``."""
    replay = getattr(buffer, "replay", buffer)
    return np.asarray(replay.data[name])[: int(replay.size)]


# ----------------------------------------------------------------------------- observation statistics


@pytest.fixture(scope="module")
def dqn_run():
    """DQN on CartPole with both features on; replay holds every step of the run. Episodes
    are cut at 20 steps so that lanes truncate as well as terminate."""
    config = dqn.Config(
        env_id="CartPole-v1",
        env_kwargs={"max_steps_in_episode": 20},
        num_envs=4,
        num_steps=8,
        num_updates=2,
        batch_size=32,
        buffer_size=2048,
        learning_starts=256,
        total_timesteps=1024,
        normalize_observations=True,
        scale_rewards=True,
        num_evals=1,
        eval_episodes=2,
        num_reports=0,
    )
    return config, jax.jit(dqn.train)(jax.random.key(0), config)


def test_observation_statistics_are_those_of_every_collected_observation(dqn_run):
    config, out = dqn_run
    obs = stored(out.state.buffer, "obs").reshape(-1, 4)
    assert obs.shape[0] == config.total_timesteps  # random warm-up steps included
    stats = out.state.params["obs_stats"]
    np.testing.assert_allclose(np.asarray(stats.mean), obs.mean(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(stats.var), obs.var(0), rtol=1e-3, atol=1e-5)
    assert float(stats.count) == pytest.approx(config.total_timesteps, abs=1e-3)


@pytest.mark.slow
def test_replay_keeps_raw_observations_and_batches_are_normalized(dqn_run):
    """Replay stores the env's observations; a sampled batch's ``obs`` and ``next_obs``
    are the stored ones standardised by the newest statistics."""
    config, out = dqn_run
    state = out.state
    raw_obs = stored(state.buffer, "obs")
    assert np.abs(raw_obs[..., 1]).max() > CLIP / 10  # velocities: not standardised
    batch = dqn.sample(state, jax.random.key(1), config)
    row, lane = np.asarray(batch["index"].row), np.asarray(batch["index"].lane)
    stats = state.params["obs_stats"]
    np.testing.assert_allclose(np.asarray(batch["obs"]), normalized(raw_obs[row, lane], stats), rtol=1e-5, atol=1e-5)
    # n-step targets: next_obs is the window's last step's (n = 3, cut at episode ends)
    raw_next = stored(state.buffer, "next_obs")
    done = stored(state.buffer, "terminated") | stored(state.buffer, "truncated")
    expected = []
    for r, n in zip(row, lane, strict=True):
        last = r
        while last < r + config.n_step - 1 and last + 1 < raw_next.shape[0] and not done[last, n]:
            last += 1
        expected.append(raw_next[last, n])
    np.testing.assert_allclose(np.asarray(batch["next_obs"]), normalized(np.stack(expected), stats), atol=1e-5)


def test_dqn_acts_on_normalized_observations(dqn_run):
    config, out = dqn_run
    params = out.state.params
    obs = np.random.default_rng(0).normal(scale=3.0, size=(16, 4)).astype(np.float32)
    q = dqn.q_values(params, jnp.asarray(obs), config)
    expected = dqn.make_network(config).apply(
        params["network"], jnp.asarray(normalized(obs, params["obs_stats"])), deterministic=True
    )
    np.testing.assert_allclose(np.asarray(q), np.asarray(expected), rtol=1e-5, atol=1e-5)
    action, _ = dqn.act(params, jnp.asarray(obs), (), jax.random.key(0), config, deterministic=True)
    np.testing.assert_array_equal(np.asarray(action), np.asarray(expected).argmax(-1))


# ----------------------------------------------------------------------------- reward scaling


def test_stored_rewards_are_scaled_by_each_lanes_discounted_return(dqn_run):
    """CartPole pays 1 a step; the NumPy loop follows each lane's discounted return and its
    running variance (starting at mean 0, variance 1, count 1e-4), reset at episode ends."""
    config, out = dqn_run
    reward = stored(out.state.buffer, "reward")
    done = stored(out.state.buffer, "terminated") | stored(out.state.buffer, "truncated")
    assert stored(out.state.buffer, "truncated").any() and stored(out.state.buffer, "terminated").any()
    expected = np.zeros_like(reward)
    for lane in range(reward.shape[1]):
        ret, mean, var, count = 0.0, 0.0, 1.0, 1e-4
        for t in range(reward.shape[0]):
            ret = ret * config.gamma + 1.0
            delta, total = ret - mean, count + 1.0
            mean, var = mean + delta / total, (var * count + delta**2 * count / total) / total
            count = total
            expected[t, lane] = np.clip(1.0 / np.sqrt(var + EPS), -CLIP, CLIP)
            ret = 0.0 if done[t, lane] else ret
    np.testing.assert_allclose(reward, expected, rtol=1e-4)
    assert not np.allclose(reward, 1.0)


def test_reported_returns_stay_raw_with_scaled_rewards(dqn_run):
    """CartPole's return is its episode's length: reward scaling leaves the reports alone."""
    _, out = dqn_run
    returns, lengths = np.asarray(out.metrics["episode_return"]), np.asarray(out.metrics["episode_length"])
    seen = ~np.isnan(returns)
    assert seen.sum() > 10
    np.testing.assert_allclose(returns[seen], lengths[seen])
    evals = np.asarray(out.metrics["eval_return"])
    assert np.all(evals[~np.isnan(evals)] >= 8)  # whole raw episodes, capped at 20


# ----------------------------------------------------------------------------- actor-critics


@pytest.mark.slow
@pytest.mark.parametrize("algo", [ddpg, td3, sac])
def test_actor_critics_act_on_normalized_observations(algo):
    """``act`` standardises raw observations by ``params["obs_stats"]`` (here set to random
    statistics) before the actor reads them; the deterministic action is the actor's."""
    config = algo.Config(
        env_id="Pendulum-v1", normalize_observations=True, total_timesteps=2000, num_evals=0, num_reports=0
    )
    state = algo.init(jax.random.key(0), config)
    rng = np.random.default_rng(1)
    stats = state.params["obs_stats"].replace(
        mean=jnp.asarray(rng.normal(size=3), jnp.float32), var=jnp.asarray(rng.uniform(0.1, 4.0, size=3), jnp.float32)
    )
    params = {**state.params, "obs_stats": stats}
    obs = rng.normal(scale=2.0, size=(8, 3)).astype(np.float32)
    action, _ = algo.act(params, jnp.asarray(obs), algo.initial_carry(config, 8), jax.random.key(2), config, True)
    networks = ddpg if algo is td3 else algo  # TD3 is DDPG's code
    out = networks.make_actor(config).apply(params["actor"], jnp.asarray(normalized(obs, stats)))
    unit = np.tanh(np.asarray(out[0])) if algo is sac else np.asarray(out)
    np.testing.assert_allclose(np.asarray(action), 2.0 * unit, rtol=1e-5, atol=1e-5)  # Pendulum's bound is 2


@pytest.mark.slow
def test_sac_trains_with_both_features_under_vmap():
    """Both features compile once under ``vmap`` over seeds and a traced learning rate, and
    every lane's statistics see the same number of observations."""
    config = sac.Config(
        env_id="Pendulum-v1",
        normalize_observations=True,
        scale_rewards=True,
        total_timesteps=1200,
        learning_starts=400,
        batch_size=64,
        num_evals=0,  # no evaluation branch to compile: the test reads the training state
        num_reports=0,
    )
    configs = config.replace(learning_rate=jnp.asarray([1e-3, 3e-4]))
    train = jax.jit(jax.vmap(sac.train, in_axes=(0, sweep_axes(configs))))
    out = train(jax.random.split(jax.random.key(0), 2), configs)
    np.testing.assert_allclose(np.asarray(out.state.params["obs_stats"].count), 1200, atol=1e-3)
    assert np.all(np.isfinite(np.asarray(out.metrics["critic_loss"])[:, -1]))


def test_normalization_flags_refuse_what_they_cannot_do():
    with pytest.raises(ValueError, match="scale_rewards"):
        iql.Config(env_id="MultiAgentClimbing-v0", scale_rewards=True)
