"""Tests for ``jaxrl.rollout`` (reset / collect / episode_metrics) and ``jaxrl.evaluation``.

References are independent NumPy / pure-Python code written here:

* CartPole's dynamics (the classic Euler update and termination thresholds, as in
  gym's ``cartpole.py``) re-implemented in float64: since CartPole observations are its
  full state, every recorded transition ``obs[t], action[t] -> next_obs[t]`` can be
  checked exactly, without reproducing the env's keys;
* episode returns/lengths accumulated by a Python loop over the recorded rewards and
  done flags;
* for ``evaluate``, a stub "countdown" env whose episode returns follow in closed form
  from their lengths, so wrongly added rewards after an episode's end are detected.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces
from reference import episode_stats

from jaxrl import envs, evaluation, rollout
from jaxrl.types import Trajectory

T = 64
N = 4
CARTPOLE_LIMIT = 30  # short time limit so that truncations occur too


# --------------------------------------------------------------------------------------
# Independent CartPole reference (gym's classic-control constants).

GRAVITY, MASSCART, MASSPOLE, LENGTH, FORCE_MAG, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
THETA_LIMIT = 12 * 2 * np.pi / 360
X_LIMIT = 2.4


def np_cartpole_step(state, action):
    x, x_dot, theta, theta_dot = np.asarray(state, np.float64)
    total_mass = MASSPOLE + MASSCART
    polemass_length = MASSPOLE * LENGTH
    force = FORCE_MAG if action == 1 else -FORCE_MAG
    cos, sin = np.cos(theta), np.sin(theta)
    temp = (force + polemass_length * theta_dot**2 * sin) / total_mass
    thetaacc = (GRAVITY * sin - cos * temp) / (LENGTH * (4.0 / 3.0 - MASSPOLE * cos**2 / total_mass))
    xacc = temp - polemass_length * thetaacc * cos / total_mass
    new = np.array([x + TAU * x_dot, x_dot + TAU * xacc, theta + TAU * theta_dot, theta_dot + TAU * thetaacc])
    terminated = bool(abs(new[0]) > X_LIMIT or abs(new[2]) > THETA_LIMIT)
    return new, terminated


# --------------------------------------------------------------------------------------
# Shared CartPole rollout (compiled once per module).


def random_policy(obs, carry, key):
    action = jax.random.randint(key, (obs.shape[0],), 0, 2)
    extras = {
        "log_prob": jnp.full((obs.shape[0],), -jnp.log(2.0)),
        "obs_sum": jnp.sum(obs, axis=-1),
        "action_copy": action,
        "pair": jnp.stack([action, 1 - action], axis=-1),  # a non-scalar extra [N, 2]
    }
    return action, carry, extras


CP_ENV_RAW, CP_PARAMS = envs.make("CartPole-v1", max_steps_in_episode=CARTPOLE_LIMIT)
CP_ENV = envs.EpisodeStatistics(CP_ENV_RAW)


def _reset_and_collect(key):
    reset_key, collect_key = jax.random.split(key)
    obs, state = rollout.reset(CP_ENV, CP_PARAMS, reset_key, N)
    traj, state, last_obs, _ = rollout.collect(CP_ENV, CP_PARAMS, random_policy, state, obs, collect_key, T)
    return obs, traj, state, last_obs


# One compile serves every collect test: the rollout vmapped over a batch of keys
# (lane 0 is the trajectory most tests inspect), and ``collect`` jitted on its own to
# continue from the returned state.
run_keys = jax.jit(jax.vmap(_reset_and_collect))
cont = jax.jit(functools.partial(rollout.collect, CP_ENV, CP_PARAMS, random_policy, num_steps=T))
KEYS = [0, 5, 6]


def _keys(seeds):
    return jnp.stack([jax.random.key(s) for s in seeds])


@pytest.fixture(scope="module")
def cartpole():
    obs0, traj, state, last_obs = run_keys(_keys(KEYS))
    lane0 = lambda x: x[0]  # noqa: E731
    state0, last_obs0 = jax.tree.map(lane0, (state, last_obs))
    traj2, state2, last_obs2, _ = cont(state0, last_obs0, jax.random.key(1))
    return jax.device_get(
        dict(
            obs0=obs0[0],
            traj=jax.tree.map(lane0, traj),
            state=state0,
            last_obs=last_obs0,
            traj2=traj2,
            last_obs2=last_obs2,
            all_traj=traj,
            all_last_obs=last_obs,
        )
    )


# --------------------------------------------------------------------------------------
# reset


def test_reset_shapes_and_distinct_envs():
    env, params = envs.make("CartPole-v1")
    obs, state = rollout.reset(env, params, jax.random.key(3), 5)
    assert obs.shape == (5, 4)
    assert jax.tree.leaves(state)[0].shape[0] == 5
    assert np.all(np.abs(obs) <= 0.05)  # CartPole's reset distribution
    assert len({tuple(np.asarray(o)) for o in obs}) == 5  # different keys per env
    obs2, _ = rollout.reset(env, params, jax.random.key(3), 5)
    np.testing.assert_array_equal(obs, obs2)


# --------------------------------------------------------------------------------------
# collect


def test_collect_shapes_and_dtypes(cartpole):
    traj = cartpole["traj"]
    assert isinstance(traj, Trajectory)
    assert traj.obs.shape == (T, N, 4)
    assert traj.next_obs.shape == (T, N, 4)
    assert traj.action.shape == (T, N)
    for name in ("reward", "terminated", "truncated", "episode_return", "episode_length"):
        assert getattr(traj, name).shape == (T, N), name
    assert traj.done.shape == (T, N)
    assert traj.reward.dtype == np.float32
    assert traj.terminated.dtype == np.bool_ and traj.truncated.dtype == np.bool_
    assert np.issubdtype(traj.episode_length.dtype, np.integer)
    assert set(traj.extras) == {"log_prob", "obs_sum", "action_copy", "pair"}
    assert traj.extras["log_prob"].shape == (T, N)
    assert traj.extras["pair"].shape == (T, N, 2)
    assert cartpole["last_obs"].shape == (N, 4)


def test_collect_obs_and_extras_are_what_the_policy_saw(cartpole):
    traj = cartpole["traj"]
    np.testing.assert_array_equal(traj.obs[0], cartpole["obs0"])
    np.testing.assert_allclose(traj.extras["obs_sum"], traj.obs.sum(-1), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(traj.extras["action_copy"], traj.action)
    np.testing.assert_array_equal(traj.extras["pair"][..., 0], traj.action)
    np.testing.assert_allclose(traj.extras["log_prob"], -np.log(2.0), rtol=1e-6)
    assert set(np.unique(traj.action)) == {0, 1}


def test_collect_autoreset_next_obs(cartpole):
    traj = cartpole["traj"]
    done = traj.done
    assert traj.terminated.any() and traj.truncated.any() and (~done).any()
    # obs to continue from: obs[1:], then the returned last obs.
    following = np.concatenate([traj.obs[1:], cartpole["last_obs"][None]], axis=0)
    np.testing.assert_allclose(traj.next_obs[~done], following[~done], rtol=1e-6, atol=1e-6)
    # Where an episode ended, next_obs is the final obs; the following obs is a fresh reset.
    gap = np.abs(traj.next_obs[done] - following[done]).max(axis=-1)
    assert np.all(gap > 1e-3)
    assert np.all(np.abs(following[done]) <= 0.05)


def test_collect_transitions_match_numpy_cartpole(cartpole):
    traj = cartpole["traj"]
    _, _, steps = episode_stats(traj.reward, traj.done)
    for t in range(T):
        for n in range(N):
            expected, term = np_cartpole_step(traj.obs[t, n], int(traj.action[t, n]))
            np.testing.assert_allclose(traj.next_obs[t, n], expected, rtol=1e-4, atol=1e-5)
            assert bool(traj.terminated[t, n]) == term, (t, n)
            assert bool(traj.truncated[t, n]) == (steps[t, n] >= CARTPOLE_LIMIT), (t, n)
    np.testing.assert_array_equal(traj.reward, 1.0)  # CartPole: +1 per step


def test_collect_episode_statistics(cartpole):
    traj = cartpole["traj"]
    ret, length, _ = episode_stats(traj.reward, traj.done)
    np.testing.assert_allclose(traj.episode_return, ret, rtol=1e-6)
    np.testing.assert_array_equal(traj.episode_length, length)
    assert np.all(traj.episode_return[~traj.done] == 0)
    assert np.all(traj.episode_length[~traj.done] == 0)
    assert np.all(traj.episode_length[traj.done] > 0)
    np.testing.assert_array_equal(traj.episode_return[traj.done], traj.episode_length[traj.done])
    assert np.all(traj.episode_length[traj.truncated] == CARTPOLE_LIMIT)


def test_collect_continues_from_returned_state(cartpole):
    t1, t2 = cartpole["traj"], cartpole["traj2"]
    np.testing.assert_array_equal(t2.obs[0], cartpole["last_obs"])
    rewards = np.concatenate([t1.reward, t2.reward])
    dones = np.concatenate([t1.done, t2.done])
    ret, length, _ = episode_stats(rewards, dones)  # episodes span the two calls
    np.testing.assert_allclose(np.concatenate([t1.episode_return, t2.episode_return]), ret, rtol=1e-6)
    np.testing.assert_array_equal(np.concatenate([t1.episode_length, t2.episode_length]), length)
    for t in range(T):
        for n in range(N):
            expected, _ = np_cartpole_step(t2.obs[t, n], int(t2.action[t, n]))
            np.testing.assert_allclose(t2.next_obs[t, n], expected, rtol=1e-4, atol=1e-5)


def test_collect_deterministic_and_key_dependent(cartpole):
    # Same keys in a different order: each lane depends on its own key only.
    _, traj, _, last_obs = jax.device_get(run_keys(_keys(KEYS[::-1])))
    ref = cartpole["all_traj"]
    for a, b in zip(jax.tree.leaves(traj), jax.tree.leaves(ref)):
        np.testing.assert_array_equal(a, b[::-1])
    np.testing.assert_array_equal(last_obs, cartpole["all_last_obs"][::-1])
    # Different keys give different rollouts.
    assert not np.array_equal(ref.action[1], ref.action[2])
    assert not np.allclose(ref.obs[1], ref.obs[2])


def test_collect_vmap_over_keys_shapes(cartpole):
    traj = cartpole["all_traj"]
    K = len(KEYS)
    assert traj.obs.shape == (K, T, N, 4)
    assert traj.next_obs.shape == (K, T, N, 4)
    assert traj.reward.shape == (K, T, N)
    assert traj.episode_length.shape == (K, T, N)
    assert traj.extras["pair"].shape == (K, T, N, 2)
    # Every lane obeys the episode bookkeeping, not just lane 0.
    for k in range(K):
        ret, length, _ = episode_stats(traj.reward[k], traj.done[k])
        np.testing.assert_allclose(traj.episode_return[k], ret, rtol=1e-6)
        np.testing.assert_array_equal(traj.episode_length[k], length)


# --------------------------------------------------------------------------------------
# episode_metrics


def _hand_trajectory(terminated, truncated, ret, length):
    shape = np.shape(terminated)
    z = jnp.zeros(shape)
    return Trajectory(
        obs=z,
        action=z,
        reward=z,
        terminated=jnp.asarray(terminated),
        truncated=jnp.asarray(truncated),
        next_obs=z,
        episode_return=jnp.asarray(ret, jnp.float32),
        episode_length=jnp.asarray(length, jnp.int32),
        extras={},
    )


def test_episode_metrics_hand_made():
    term = np.array([[False, True, False], [False, False, False], [True, False, False]])
    trunc = np.array([[False, False, False], [False, False, True], [False, False, False]])
    ret = np.where(term | trunc, [[0, 3.5, 0], [0, 0, -2.0], [10.0, 0, 0]], 0.0)
    length = np.where(term | trunc, [[0, 4, 0], [0, 0, 7], [9, 0, 0]], 0)
    m = jax.jit(rollout.episode_metrics)(_hand_trajectory(term, trunc, ret, length))
    assert int(m["episodes"]) == 3
    np.testing.assert_allclose(m["episode_return"], np.mean([3.5, -2.0, 10.0]), rtol=1e-6)
    np.testing.assert_allclose(m["episode_length"], np.mean([4, 7, 9]), rtol=1e-6)


def test_episode_metrics_ignores_values_where_not_done():
    # Garbage where no episode ended must not be averaged in.
    term = np.array([[True, False], [False, False]])
    trunc = np.zeros((2, 2), bool)
    m = rollout.episode_metrics(_hand_trajectory(term, trunc, [[5.0, 100.0], [-100.0, 7.0]], [[3, 50], [60, 70]]))
    assert int(m["episodes"]) == 1
    np.testing.assert_allclose(m["episode_return"], 5.0)
    np.testing.assert_allclose(m["episode_length"], 3.0)


def test_episode_metrics_no_episode_is_nan_hand_made():
    z = np.zeros((4, 2), bool)
    m = rollout.episode_metrics(_hand_trajectory(z, z, np.zeros((4, 2)), np.zeros((4, 2))))
    assert int(m["episodes"]) == 0
    assert np.isnan(m["episode_return"]) and np.isnan(m["episode_length"])


def test_episode_metrics_cartpole_vs_numpy(cartpole):
    traj = cartpole["traj"]
    m = rollout.episode_metrics(jax.tree.map(jnp.asarray, traj))
    done = traj.done
    ret, length, _ = episode_stats(traj.reward, done)
    assert int(m["episodes"]) == done.sum() > 0
    np.testing.assert_allclose(m["episode_return"], ret[done].mean(), rtol=1e-5)
    np.testing.assert_allclose(m["episode_length"], length[done].mean(), rtol=1e-5)


def test_episode_metrics_pendulum_no_episode_finished():
    raw, params = envs.make("Pendulum-v1")  # 200-step limit, never terminates
    env = envs.EpisodeStatistics(raw)

    def policy(obs, carry, key):
        return jax.random.uniform(key, (obs.shape[0], 1), minval=-2.0, maxval=2.0), carry, {}

    @jax.jit
    def go(key):
        obs, state = rollout.reset(env, params, key, 2)
        traj, *_ = rollout.collect(env, params, policy, state, obs, key, 10)
        return traj, rollout.episode_metrics(traj)

    traj, m = go(jax.random.key(0))
    assert traj.action.shape == (10, 2, 1) and traj.extras == {}
    assert not traj.done.any()
    assert int(m["episodes"]) == 0
    assert np.isnan(m["episode_return"]) and np.isnan(m["episode_length"])
    assert np.all(traj.episode_return == 0) and np.all(traj.episode_length == 0)


# --------------------------------------------------------------------------------------
# evaluate


def const_act(params, obs, carry, key):
    return jnp.full((obs.shape[0],), params, jnp.int32), carry


# Compiling is most of the cost: one jitted entry point, with everything that must be
# static marked so, lets calls that differ only in ``params``/``key`` share a compile.
_evaluate = jax.jit(evaluation.evaluate, static_argnames=("act_fn", "env", "num_episodes", "env_params", "max_steps"))


@pytest.fixture(scope="module")
def cartpole_eval():
    env, params = envs.make("CartPole-v1")
    key = jax.random.key(0)
    res = _evaluate(const_act, 0, env, key, num_episodes=6, env_params=params)
    return env, params, key, jax.device_get(res)


def test_evaluate_cartpole_constant_action(cartpole_eval):
    _, _, _, res = cartpole_eval
    assert res.returns.shape == (6,) and res.lengths.shape == (6,)
    assert res.lengths.dtype == np.int32
    np.testing.assert_array_equal(res.returns, res.lengths)  # +1 per step
    assert np.all((res.lengths >= 1) & (res.lengths <= 500))
    # Always pushing left topples the pole well before the time limit.
    assert np.all(res.lengths < 100)


def test_evaluate_cartpole_max_steps(cartpole_eval):
    env, params, key, full = cartpole_eval
    res = _evaluate(const_act, 0, env, key, num_episodes=6, env_params=params, max_steps=5)
    assert np.all(res.lengths <= 5)
    np.testing.assert_array_equal(res.returns, res.lengths)
    # Same key: the same episodes, cut at 5 steps.
    np.testing.assert_array_equal(res.lengths, np.minimum(full.lengths, 5))


def test_evaluate_env_id_string_or_object(cartpole_eval):
    env, params, key, full = cartpole_eval
    by_id = _evaluate(const_act, 0, "CartPole-v1", key, num_episodes=6)
    # A wrapped env object without env_params: its default params are used.
    wrapped = _evaluate(const_act, 0, envs.EpisodeStatistics(env), key, num_episodes=6)
    for r in (by_id, wrapped):
        np.testing.assert_array_equal(r.lengths, full.lengths)
        np.testing.assert_array_equal(r.returns, full.returns)


def test_evaluate_env_id_with_env_params(cartpole_eval):
    _, _, key, full = cartpole_eval
    _, short = envs.make("CartPole-v1", max_steps_in_episode=4)
    res = _evaluate(const_act, 0, "CartPole-v1", key, num_episodes=6, env_params=short)
    # The time limit (and default max_steps) follow the given params.
    np.testing.assert_array_equal(res.lengths, np.minimum(full.lengths, 4))


def test_evaluate_under_jit_and_vmap(cartpole_eval):
    env, params, key, full = cartpole_eval
    f = jax.jit(lambda k: evaluation.evaluate(const_act, 0, env, k, 6, env_params=params))
    keys = jnp.stack([key, jax.random.key(9)])
    batched = jax.jit(jax.vmap(f))(keys)
    assert batched.lengths.shape == (2, 6)
    np.testing.assert_array_equal(batched.lengths[0], full.lengths)
    np.testing.assert_array_equal(batched.returns[0], full.returns)
    single = _evaluate(const_act, 0, env, jax.random.key(9), num_episodes=6, env_params=params)
    np.testing.assert_array_equal(batched.lengths[1], single.lengths)
    np.testing.assert_array_equal(batched.returns[1], single.returns)


def test_evaluate_pendulum_full_length():
    def act(params, obs, carry, key):
        return jnp.zeros((obs.shape[0], 1)), carry

    res = _evaluate(act, None, "Pendulum-v1", jax.random.key(2), num_episodes=3)
    np.testing.assert_array_equal(res.lengths, [200, 200, 200])
    assert np.all(np.isfinite(res.returns)) and np.all(res.returns < 0)
    assert len(set(np.asarray(res.returns).tolist())) == 3  # different initial states


# A stub env: episode length L ~ U{1..8} drawn at reset; the k-th step of an episode
# pays k * action, so an episode of length L played with constant action c returns
# c * L (L + 1) / 2. Rewards from the next (auto-reset) episode would break this.

MAX_LEN = 8


@struct.dataclass
class _CountState(environment.EnvState):
    target: jax.Array
    k: jax.Array
    time: int


@struct.dataclass
class _CountParams(environment.EnvParams):
    max_steps_in_episode: int = 1000


class CountdownEnv(environment.Environment):
    @property
    def default_params(self):
        return _CountParams()

    def reset_env(self, key, params):
        target = jax.random.randint(key, (), 1, MAX_LEN + 1)
        state = _CountState(target=target, k=jnp.zeros((), jnp.int32), time=0)
        return jnp.array([target], jnp.float32), state

    def step_env(self, key, state, action, params):
        k = state.k + 1
        reward = (k * action).astype(jnp.float32)
        state = _CountState(target=state.target, k=k, time=state.time + 1)
        obs = jnp.array([state.target - k], jnp.float32)
        return obs, state, reward, k >= state.target, {}

    def action_space(self, params=None):
        return spaces.Discrete(4)

    def observation_space(self, params=None):
        return spaces.Box(0.0, MAX_LEN, (1,), jnp.float32)


COUNTDOWN = CountdownEnv()


def test_evaluate_countdown_exact_returns():
    for c in (1, 3):  # params are traced: one compile for both
        res = _evaluate(const_act, c, COUNTDOWN, jax.random.key(4), num_episodes=16)
        L = np.asarray(res.lengths)
        assert np.all((L >= 1) & (L <= MAX_LEN))
        assert len(set(L.tolist())) > 1  # episodes end at different times
        np.testing.assert_allclose(res.returns, c * L * (L + 1) / 2, rtol=1e-6)
    # A 3-step time limit, simulated for longer: the same episodes (same key), each
    # ending at its truncation (nothing is counted from the following episode).
    cut = _evaluate(
        const_act,
        c,
        COUNTDOWN,
        jax.random.key(4),
        num_episodes=16,
        env_params=_CountParams(max_steps_in_episode=3),
        max_steps=6,
    )
    m = np.minimum(L, 3)
    np.testing.assert_array_equal(cut.lengths, m)
    np.testing.assert_allclose(cut.returns, c * m * (m + 1) / 2, rtol=1e-6)


def test_evaluate_passes_params_and_obs_to_act_fn():
    # The act_fn reads its params and the observation: act = params if obs > 2 else 0.
    def act(params, obs, carry, key):
        return jnp.where(obs[:, 0] > 2, params, 0).astype(jnp.int32), carry

    res = _evaluate(act, 2, COUNTDOWN, jax.random.key(4), num_episodes=16)
    L = np.asarray(res.lengths)
    # Before step k (1-based) the obs is L - (k - 1); pays 2k while that is > 2.
    expected = [sum(2 * k for k in range(1, length + 1) if length - (k - 1) > 2) for length in L]
    np.testing.assert_allclose(res.returns, expected, rtol=1e-6)
