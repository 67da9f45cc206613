"""APPO (jaxrl/algorithms/appo.py): PPO's minibatch epochs with V-trace targets under the
learner's params, the ratio against the behaviour policy. The targets are checked against
a NumPy loop on random trajectories with terminations and truncations; the lock-step
policy lag and the contract on small configs. Its learning with actors apart from the
learner is in tests/test_actor_learner.py."""

import jax
import numpy as np
import pytest
from test_a2c import random_trajectory

from jaxrl.algorithms import appo, onpolicy

SMALL = appo.Config(
    env_id="CartPole-v1",
    num_envs=3,
    num_steps=24,
    num_minibatches=2,
    num_epochs=2,
    hidden_sizes=(16, 16),
    total_timesteps=3 * 24 * 4,
    num_evals=1,
    eval_episodes=1,
    num_reports=0,
)


def oracle_appo_targets(v, v_next, r, term, trunc, log_rho, gamma, rho_bar, lam):
    """Per lane: V-trace's ``vs`` (truncated weights ``min(rho_bar, pi/mu)``, traces
    ``lam * min(1, pi/mu)``, cut at episode ends) and the advantage ``q_t - v_t`` with
    ``q_t = r_t + gamma (1 - term_t) vs'_t``, ``vs'_t = vs_{t+1}`` inside an episode and
    ``v_next_t`` at its end (or the sequence's)."""
    T = len(r)
    ratio = np.exp(log_rho)
    rho, c = np.minimum(rho_bar, ratio), lam * np.minimum(1.0, ratio)
    delta = np.array([rho[t] * (r[t] + (0.0 if term[t] else gamma * v_next[t]) - v[t]) for t in range(T)])
    vs = np.zeros(T)
    for t in range(T):
        total, trace = 0.0, 1.0
        for s in range(t, T):
            total += gamma ** (s - t) * trace * delta[s]
            if term[s] or trunc[s]:
                break
            trace *= c[s]
        vs[t] = v[t] + total
    advantage = np.zeros(T)
    for t in range(T):
        end = term[t] or trunc[t] or t == T - 1
        q = r[t] + (0.0 if term[t] else gamma * (v_next[t] if end else vs[t + 1]))
        advantage[t] = q - v[t]
    return vs, advantage


@pytest.mark.parametrize("seed, rho_bar", [(0, 1.0), (1, 0.5), (2, np.inf)])
def test_targets_are_vtrace_of_the_learners_policy_over_the_behaviours(seed, rho_bar):
    config = SMALL.replace(rho_bar=rho_bar, gamma=0.9, gae_lambda=0.8)
    trajectory, *_ = random_trajectory(seed, T=config.num_steps, N=config.num_envs)
    rng = np.random.default_rng(seed)
    trajectory = trajectory.replace(action=rng.integers(0, 2, trajectory.reward.shape).astype(np.int32))
    params = onpolicy.init_learner(jax.random.key(seed), config, 1).params
    out = appo.vtrace_targets(params, trajectory, config)

    distribution, value = onpolicy.trajectory_policy_and_value(params, trajectory, config)
    value_next = onpolicy.bootstrap_value(params, trajectory, config)
    log_rho = np.asarray(distribution.log_prob(trajectory.action), np.float64) - trajectory.extras["log_prob"]
    assert np.abs(log_rho).max() > 0.5  # far enough off-policy that truncation matters
    v, v_next, r = (np.asarray(x, np.float64) for x in (value, value_next, trajectory.reward))
    term, trunc = np.asarray(trajectory.terminated), np.asarray(trajectory.truncated)
    for lane in range(config.num_envs):
        vs, advantage = oracle_appo_targets(
            v[:, lane], v_next[:, lane], r[:, lane], term[:, lane], trunc[:, lane], log_rho[:, lane], 0.9, rho_bar, 0.8
        )
        np.testing.assert_allclose(np.asarray(out["target"])[:, lane], vs, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.asarray(out["advantage"])[:, lane], advantage, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.asarray(out["value"])[:, lane], v[:, lane], rtol=1e-5, atol=1e-6)


def test_lock_step_actors_act_with_the_params_of_policy_lag_updates_ago():
    """After 3 updates with ``policy_lag=2`` the queue holds the params before updates 2
    and 3 (oldest first), and the next rollout's behaviour log-probabilities are those of
    the oldest: the params of 2 updates ago."""
    config = SMALL.replace(policy_lag=2)
    state = appo.init(jax.random.key(0), config)
    history = [state.params]
    step = jax.jit(lambda state, key: appo.step(state, key, config))
    for i in range(3):
        state, metrics = step(state, jax.random.key(i))
        history.append(state.params)
        assert np.isfinite(metrics["policy_loss"])
    for slot, params in enumerate(history[1:3]):
        for queued, expected in zip(jax.tree.leaves(state.lagged_params), jax.tree.leaves(params)):
            np.testing.assert_array_equal(queued[slot], expected)
    _, trajectory = jax.jit(lambda state, key: appo.learner.collect(state, key, config))(state, jax.random.key(9))
    for params, acted in ((history[1], True), (history[3], False)):
        distribution, _ = onpolicy.trajectory_policy_and_value(params, trajectory, config)
        log_prob = np.asarray(distribution.log_prob(trajectory.action))
        assert np.allclose(log_prob, trajectory.extras["log_prob"], rtol=1e-5, atol=1e-6) == acted


@pytest.mark.parametrize(
    "fields, match",
    [(dict(policy_lag=-1), "policy_lag"), (dict(rho_bar=0.0), "rho_bar"), (dict(clip_eps=0.0), "clip_eps")],
)
def test_bad_settings_are_refused(fields, match):
    with pytest.raises(ValueError, match=match):
        appo.init(jax.random.key(0), SMALL.replace(**fields))
