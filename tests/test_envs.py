"""Tests for ``jaxrl.envs`` (``make``/``spec``) and ``jaxrl.envs.wrappers``.

Numerical checks compare against independent NumPy references written here:

* running mean/variance: the exact *pooled* statistics of the prior pseudo-sample
  (``count = 1e-4``, mean 0, var 1, as documented by ``running_stats_init``) and every
  value seen so far, computed in float64 from sums (not with Chan's update), and also
  plain ``np.mean``/``np.var`` with a tolerance for the tiny prior;
* episode statistics / reward scaling: explicit per-lane Python loops over the raw
  rewards and done flags of an unwrapped env stepped with the *same* keys and actions
  (the wrappers forward the step key unchanged, which the tests also verify by
  comparing raw observations).
"""

from __future__ import annotations

import copy
import pickle
import urllib.error

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces
from reference import episode_stats

from jaxrl import envs
from jaxrl.envs import wrappers

PRIOR_COUNT = 1e-4  # running_stats_init's documented initial count


# --------------------------------------------------------------------------------------
# Independent references.


def pooled_stats(values, prior_count=PRIOR_COUNT, prior_mean=0.0, prior_var=1.0):
    """Mean/var of the prior pseudo-sample pooled with ``values [n, ...]`` (float64)."""
    x = np.asarray(values, np.float64)
    n = x.shape[0]
    total = prior_count + n
    mean = (prior_count * prior_mean + x.sum(0)) / total
    second = (prior_count * (prior_var + prior_mean**2) + (x**2).sum(0)) / total
    return mean, second - mean**2


def np_normalize(x, mean, var, clip=10.0, eps=1e-8):
    return np.clip((np.asarray(x, np.float64) - mean) / np.sqrt(var + eps), -clip, clip)


# --------------------------------------------------------------------------------------
# make / spec / registered_ids


@pytest.mark.parametrize("env_id", envs.registered_ids())
def test_make_and_spec_every_registered_id(env_id):
    try:
        env, params = envs.make(env_id)
    except (urllib.error.URLError, OSError) as e:
        if env_id != "MNISTBandit-bsuite":  # the one env that downloads (MNIST) when made
            raise
        pytest.skip(f"{env_id} needs a download that is unavailable here: {e}")
    if getattr(env, "multi_agent", False):  # multi-agent ids are described by jaxrl.envs.multiagent.spec
        with pytest.raises(ValueError, match="multi-agent env"):
            envs.spec(env, params)
        return
    s = envs.spec(env, params)
    assert isinstance(s, envs.EnvSpec)
    assert isinstance(s.obs_shape, tuple)
    assert s.action_kind in ("discrete", "continuous")
    assert s.discrete == (s.action_kind == "discrete")
    if s.discrete:
        assert s.action_shape == ()
        assert isinstance(s.num_actions, int) and s.num_actions >= 1
        assert s.num_actions == env.action_space(params).n
    else:
        assert s.num_actions is None
        assert s.action_low.shape == s.action_shape == s.action_high.shape
        assert np.all(s.action_low <= s.action_high)
    assert s.max_episode_steps == int(params.max_steps_in_episode)


def test_registered_ids_are_gymnax_ids_and_jaxrl_own():
    ids = envs.registered_ids()
    assert set(gymnax.registered_envs) <= set(ids) and len(ids) == len(set(ids))
    assert {"CartPole-v1", "Pendulum-v1", "Breakout-MinAtar", "MaskedCartPole-v1", "MaskedPendulum-v1"} <= set(ids)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "Breakout-MinAtar", "FrozenLake-misc"])
def test_reset_obs_shape_matches_spec(env_id):
    env, params = envs.make(env_id)
    obs, _ = env.reset(jax.random.key(0), params)
    assert tuple(jnp.shape(obs)) == envs.spec(env, params).obs_shape


def _hint(message: str) -> str:
    """The 'did you mean' part of the message (the full id list follows it)."""
    return message.split("Known ids")[0]


def test_make_unknown_id_suggests_close_matches():
    with pytest.raises(ValueError) as info:
        envs.make("CartPol-v1")
    msg = str(info.value)
    assert "CartPol-v1" in msg
    assert "Did you mean" in msg
    assert "'CartPole-v1'" in _hint(msg)
    with pytest.raises(ValueError) as info:
        envs.make("Breakout-Minatar")
    assert "'Breakout-MinAtar'" in _hint(str(info.value))


def test_make_unknown_id_without_close_match():
    with pytest.raises(ValueError) as info:
        envs.make("qqqqqqqqqqqqqqqq")
    msg = str(info.value)
    assert "Did you mean" not in msg
    assert "CartPole-v1" in msg  # the list of known ids


def test_check_env_id():
    envs.check_env_id("Pendulum-v1")  # no error
    with pytest.raises(ValueError):
        envs.check_env_id("Pendulum-v0")
    with pytest.raises(TypeError):
        envs.check_env_id(123)


def test_make_param_override():
    env, params = envs.make("CartPole-v1", max_steps_in_episode=200)
    assert params.max_steps_in_episode == 200
    _, default = envs.make("CartPole-v1")
    assert default.max_steps_in_episode == 500
    # Other fields untouched.
    assert params.gravity == default.gravity
    _, p2 = envs.make("Pendulum-v1", max_torque=1.5, max_steps_in_episode=50)
    assert p2.max_torque == 1.5 and p2.max_steps_in_episode == 50
    assert envs.spec(env, params).max_episode_steps == 200


def test_make_unknown_param_raises_naming_it():
    with pytest.raises(ValueError) as info:
        envs.make("CartPole-v1", max_step_in_episode=200)
    assert "max_step_in_episode" in str(info.value)
    with pytest.raises(ValueError) as info:
        envs.make("CartPole-v1", gravity=9.0, not_a_param=1)
    assert "not_a_param" in str(info.value)


def test_spec_cartpole():
    s = envs.spec(*envs.make("CartPole-v1"))
    assert s.discrete and s.action_kind == "discrete"
    assert s.num_actions == 2
    assert s.obs_shape == (4,)
    assert s.action_shape == ()
    assert s.action_low is None and s.action_high is None
    assert s.max_episode_steps == 500


def test_spec_pendulum():
    s = envs.spec(*envs.make("Pendulum-v1"))
    assert not s.discrete and s.action_kind == "continuous"
    assert s.action_shape == (1,)
    assert s.obs_shape == (3,)
    np.testing.assert_array_equal(s.action_low, [-2.0])
    np.testing.assert_array_equal(s.action_high, [2.0])
    assert s.num_actions is None
    assert s.max_episode_steps == 200
    # Bounds follow the params.
    s2 = envs.spec(*envs.make("Pendulum-v1", max_torque=0.5))
    np.testing.assert_array_equal(s2.action_high, [0.5])


@pytest.mark.parametrize("env_id,channels", [("Breakout-MinAtar", 4), ("SpaceInvaders-MinAtar", 6)])
def test_spec_minatar(env_id, channels):
    s = envs.spec(*envs.make(env_id))
    assert s.obs_shape == (10, 10, channels)
    assert s.discrete


# --------------------------------------------------------------------------------------
# Time-limit override


def test_time_limit_override_pendulum():
    env, params = envs.make("Pendulum-v1", max_steps_in_episode=7)
    _, state = env.reset(jax.random.key(0), params)
    step = jax.jit(env.step)
    action = jnp.array([0.3])
    truncated_at, terminated_any = [], False
    for t in range(1, 21):
        obs, state, reward, terminated, truncated, info = step(jax.random.key(t), state, action, params)
        terminated_any |= bool(terminated)
        if bool(truncated):
            truncated_at.append(t)
            assert not np.allclose(info["final_observation"], obs)
        else:
            # Equal up to float32 rounding (XLA may compute the two copies differently).
            np.testing.assert_allclose(info["final_observation"], obs, rtol=1e-6, atol=1e-6)
    assert truncated_at == [7, 14]
    assert not terminated_any


# --------------------------------------------------------------------------------------
# RunningStats


def test_running_stats_init():
    s = envs.running_stats_init((3,))
    np.testing.assert_array_equal(s.mean, np.zeros(3))
    np.testing.assert_array_equal(s.var, np.ones(3))
    assert s.mean.shape == (3,) and s.var.shape == (3,) and s.count.shape == ()
    np.testing.assert_allclose(float(s.count), PRIOR_COUNT, rtol=1e-6)


def test_running_stats_update_matches_numpy():
    rng = np.random.default_rng(0)
    batches = [rng.normal(loc=[3.0, -1.0, 0.0], scale=[2.0, 0.5, 1e-2], size=(b, 3)) for b in (1, 5, 17, 64, 3)]
    stats = envs.running_stats_init((3,))
    update = jax.jit(envs.running_stats_update)
    seen = []
    for batch in batches:
        stats = update(stats, jnp.asarray(batch, jnp.float32))
        seen.append(batch.astype(np.float32))
        allx = np.concatenate(seen)
        mean, var = pooled_stats(allx)
        np.testing.assert_allclose(stats.mean, mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(stats.var, var, rtol=1e-4, atol=1e-7)
        np.testing.assert_allclose(float(stats.count), len(allx) + PRIOR_COUNT, rtol=1e-6)
    # And plain mean/var of the concatenation, up to the prior's tiny weight.
    allx = np.concatenate(seen).astype(np.float64)
    np.testing.assert_allclose(stats.mean, allx.mean(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(stats.var, allx.var(0), rtol=1e-3, atol=5e-6)  # prior adds ~1e-4/n


def test_running_stats_scalar_shape():
    rng = np.random.default_rng(1)
    x = rng.normal(5.0, 3.0, size=200).astype(np.float32)
    stats = envs.running_stats_init(())
    for chunk in np.split(x, 4):
        stats = envs.running_stats_update(stats, chunk)
    assert stats.mean.shape == ()
    np.testing.assert_allclose(stats.mean, x.mean(), rtol=1e-4)
    np.testing.assert_allclose(stats.var, x.var(), rtol=1e-3)


def test_normalize_values_and_clip():
    stats = wrappers.RunningStats(mean=jnp.array([1.0, -2.0]), var=jnp.array([4.0, 0.25]), count=jnp.array(10.0))
    x = jnp.array([[3.0, -2.5], [1.0, 100.0], [-1000.0, -2.0]])
    out = envs.normalize(stats, x)
    expected = np_normalize(np.asarray(x), np.array([1.0, -2.0]), np.array([4.0, 0.25]))
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    np.testing.assert_allclose(out[0], [1.0, -1.0], rtol=1e-6)
    assert float(out[1, 1]) == 10.0 and float(out[2, 0]) == -10.0  # clipped
    out3 = envs.normalize(stats, x, clip=3.0)
    np.testing.assert_allclose(out3, np.clip(expected, -3, 3), rtol=1e-6)
    assert float(out3[1, 1]) == 3.0


# --------------------------------------------------------------------------------------
# Stub envs (gymnax API, subclassing gymnax's Environment for its auto-reset step).


@struct.dataclass
class _RecordState(environment.EnvState):
    last_action: jax.Array
    time: int


@struct.dataclass
class _RecordParams(environment.EnvParams):
    max_steps_in_episode: int = 1000


class RecordActionEnv(environment.Environment):
    """Observation = the (float) action it last received."""

    def __init__(self, discrete: bool):
        super().__init__()
        self.discrete = discrete

    @property
    def default_params(self):
        return _RecordParams()

    def reset_env(self, key, params):
        state = _RecordState(last_action=jnp.zeros(2, jnp.float32), time=0)
        return state.last_action, state

    def step_env(self, key, state, action, params):
        a = jnp.broadcast_to(jnp.asarray(action, jnp.float32), (2,))
        state = _RecordState(last_action=a, time=state.time + 1)
        return a, state, jnp.array(0.0), jnp.array(False), {}

    def action_space(self, params=None):
        if self.discrete:
            return spaces.Discrete(5)
        return spaces.Box(low=jnp.array([-1.0, 0.0]), high=jnp.array([3.0, 0.5]), shape=(2,), dtype=jnp.float32)

    def observation_space(self, params=None):
        return spaces.Box(-jnp.inf, jnp.inf, (2,), jnp.float32)


# --------------------------------------------------------------------------------------
# Wrapper base


def test_wrapper_forwards_attributes_and_unwrapped():
    env, params = envs.make("CartPole-v1")
    wrapped = envs.ScaleReward(envs.NormalizeObservation(envs.EpisodeStatistics(envs.ClipAction(env))))
    assert wrapped.unwrapped is env
    assert wrapped.num_actions == 2
    assert wrapped.name == env.name
    assert envs.spec(wrapped, params) == envs.spec(env, params)


def test_wrapper_can_be_copied_and_pickled():
    env, _ = envs.make("CartPole-v1")
    wrapped = copy.deepcopy(envs.EpisodeStatistics(env))
    assert wrapped.name == "CartPole-v1"
    assert pickle.loads(pickle.dumps(envs.ClipAction(env))).name == "CartPole-v1"


# --------------------------------------------------------------------------------------
# EpisodeStatistics


def _scan_random(env, raw_env, params, num_envs, num_steps, key, action_fn):
    """Step ``env`` and ``raw_env`` in lockstep with identical keys and actions."""
    reset_keys = jax.random.split(jax.random.fold_in(key, 0), num_envs)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)
    raw_obs, raw_state = jax.vmap(raw_env.reset, in_axes=(0, None))(reset_keys, params)
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    raw_step = jax.vmap(raw_env.step, in_axes=(0, 0, 0, None))

    def body(carry, k):
        state, raw_state = carry
        ak, sk = jax.random.split(k)
        action = action_fn(ak, num_envs)
        keys = jax.random.split(sk, num_envs)
        obs, state, r, term, trunc, info = step(keys, state, action, params)
        robs, raw_state, rr, rterm, rtrunc, rinfo = raw_step(keys, raw_state, action, params)
        out = dict(
            obs=obs,
            reward=r,
            terminated=term,
            truncated=trunc,
            info=info,
            raw_obs=robs,
            raw_reward=rr,
            raw_terminated=rterm,
            raw_truncated=rtrunc,
            raw_final=rinfo["final_observation"],
            state=state,
        )
        return (state, raw_state), out

    _, out = jax.lax.scan(body, (state, raw_state), jax.random.split(jax.random.fold_in(key, 1), num_steps))
    return obs, raw_obs, state, out


def _cartpole_actions(key, n):
    return jax.random.randint(key, (n,), 0, 2)


def _pendulum_actions(key, n):
    return jax.random.uniform(key, (n, 1), minval=-2.0, maxval=2.0)


def test_episode_statistics_matches_numpy_reference():
    # A 25-step limit so that both terminations and truncations occur.
    raw, params = envs.make("CartPole-v1", max_steps_in_episode=25)
    env = envs.EpisodeStatistics(raw)
    run = jax.jit(lambda k: _scan_random(env, raw, params, 4, 300, k, _cartpole_actions))
    _, _, _, out = run(jax.random.key(42))
    out = jax.device_get(out)
    np.testing.assert_array_equal(out["obs"], out["raw_obs"])
    np.testing.assert_array_equal(out["reward"], out["raw_reward"])
    rewards = out["raw_reward"]
    dones = out["raw_terminated"] | out["raw_truncated"]
    assert out["raw_terminated"].any() and out["raw_truncated"].any()
    ret, length, _ = episode_stats(rewards, dones)
    info = out["info"]
    np.testing.assert_array_equal(info["episode_done"], dones)
    np.testing.assert_allclose(info["episode_return"], ret, rtol=1e-6)
    np.testing.assert_array_equal(info["episode_length"], length)
    assert np.all(info["episode_return"][~dones] == 0)
    assert np.all(info["episode_length"][~dones] == 0)
    assert np.all(info["episode_length"][dones] >= 1)
    assert np.all(info["episode_length"][out["raw_truncated"]] == 25)
    assert info["episode_length"].dtype == np.int32
    # Other info entries are kept.
    np.testing.assert_array_equal(info["final_observation"], out["raw_final"])


def test_episode_statistics_reset_state_zero():
    raw, params = envs.make("CartPole-v1")
    env = envs.EpisodeStatistics(raw)
    obs, state = env.reset(jax.random.key(0), params)
    raw_obs, _ = raw.reset(jax.random.key(0), params)
    np.testing.assert_array_equal(obs, raw_obs)
    assert float(state.episode_return) == 0.0 and int(state.episode_length) == 0


# --------------------------------------------------------------------------------------
# ClipAction


def test_clip_action_pendulum_same_as_bound():
    env, params = envs.make("Pendulum-v1")
    clipped = envs.ClipAction(env)
    _, state = env.reset(jax.random.key(3), params)
    key = jax.random.key(4)
    step = jax.jit(clipped.step)
    high = step(key, state, jnp.array([5.0]), params)
    at_bound = step(key, state, jnp.array([2.0]), params)
    low = step(key, state, jnp.array([-5.0]), params)
    at_low = step(key, state, jnp.array([-2.0]), params)
    inside = step(key, state, jnp.array([1.0]), params)
    for a, b in [(high, at_bound), (low, at_low)]:
        np.testing.assert_array_equal(a[0], b[0])  # obs
        np.testing.assert_array_equal(a[1].theta, b[1].theta)
        np.testing.assert_array_equal(a[1].theta_dot, b[1].theta_dot)
        np.testing.assert_array_equal(a[2], b[2])  # reward
    assert float(high[1].last_u) == 2.0 and float(low[1].last_u) == -2.0
    assert not np.allclose(inside[0], high[0])


def test_clip_action_clips_to_box_bounds():
    # Pendulum clips torque itself, so check with an env that records its action.
    env = RecordActionEnv(discrete=False)
    clipped = envs.ClipAction(env)
    params = env.default_params
    _, state = clipped.reset(jax.random.key(0), params)
    obs, *_ = clipped.step(jax.random.key(1), state, jnp.array([5.0, -3.0]), params)
    np.testing.assert_array_equal(obs, [3.0, 0.0])
    obs, *_ = clipped.step(jax.random.key(1), state, jnp.array([-7.0, 0.7]), params)
    np.testing.assert_array_equal(obs, [-1.0, 0.5])
    obs, *_ = clipped.step(jax.random.key(1), state, jnp.array([0.25, 0.125]), params)
    np.testing.assert_array_equal(obs, [0.25, 0.125])
    # Without the wrapper the env sees the raw action.
    obs, *_ = env.step(jax.random.key(1), state, jnp.array([5.0, -3.0]), params)
    np.testing.assert_array_equal(obs, [5.0, -3.0])


def test_clip_action_discrete_unaffected():
    env = RecordActionEnv(discrete=True)
    clipped = envs.ClipAction(env)
    params = env.default_params
    _, state = clipped.reset(jax.random.key(0), params)
    obs, *_ = clipped.step(jax.random.key(1), state, jnp.array(4), params)
    np.testing.assert_array_equal(obs, [4.0, 4.0])

    cp, cp_params = envs.make("CartPole-v1")
    _, s = cp.reset(jax.random.key(0), cp_params)
    for a in (0, 1):
        x = envs.ClipAction(cp).step(jax.random.key(1), s, jnp.array(a), cp_params)
        y = cp.step(jax.random.key(1), s, jnp.array(a), cp_params)
        for u, v in zip(jax.tree.leaves(x), jax.tree.leaves(y)):
            np.testing.assert_array_equal(u, v)


# --------------------------------------------------------------------------------------
# NormalizeObservation


def test_normalize_observation_matches_numpy():
    raw, params = envs.make("Pendulum-v1", max_steps_in_episode=20)
    env = envs.NormalizeObservation(raw)
    N, T = 3, 50
    run = jax.jit(lambda k: _scan_random(env, raw, params, N, T, k, _pendulum_actions))
    obs0, raw_obs0, _, out = run(jax.random.key(7))
    obs0, raw_obs0, out = jax.device_get((obs0, raw_obs0, out))
    dones = out["raw_terminated"] | out["raw_truncated"]
    assert dones.any()
    np.testing.assert_array_equal(out["reward"], out["raw_reward"])
    # Stream of observations each lane emitted: the reset obs, then every returned obs.
    stream = np.concatenate([raw_obs0[None], out["raw_obs"]], axis=0)  # [T+1, N, 3]
    # After reset.
    for n in range(N):
        m, v = pooled_stats(stream[:1, n])
        np.testing.assert_allclose(obs0[n], np_normalize(raw_obs0[n], m, v), rtol=1e-3, atol=1e-4)
    for t in range(T):
        for n in range(N):
            m, v = pooled_stats(stream[: t + 2, n])
            stats = jax.tree.map(lambda x: x[t, n], out["state"].stats)
            np.testing.assert_allclose(stats.mean, m, rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(stats.var, v, rtol=1e-3, atol=1e-6)
            np.testing.assert_allclose(out["obs"][t, n], np_normalize(out["raw_obs"][t, n], m, v), rtol=1e-3, atol=1e-4)
            np.testing.assert_allclose(
                out["info"]["final_observation"][t, n], np_normalize(out["raw_final"][t, n], m, v), rtol=1e-3, atol=1e-4
            )
    # Final stats vs plain NumPy mean/var of all that lane's observations.
    final = jax.tree.map(lambda x: x[-1], out["state"].stats)
    for n in range(N):
        np.testing.assert_allclose(final.mean[n], stream[:, n].mean(0), rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(final.var[n], stream[:, n].var(0), rtol=1e-3, atol=1e-4)
    # Per-lane statistics really differ across lanes.
    assert not np.allclose(final.mean[0], final.mean[1])
    # Where an episode ended the normalised final observation differs from the obs.
    assert not np.allclose(out["info"]["final_observation"][dones], out["obs"][dones])
    assert np.allclose(out["info"]["final_observation"][~dones], out["obs"][~dones])


def test_normalize_observation_clip():
    raw, params = envs.make("Pendulum-v1")
    env = envs.NormalizeObservation(raw, clip=0.5)
    obs, state = env.reset(jax.random.key(0), params)
    step = jax.jit(env.step)
    clipped_any = False
    for t in range(4):
        obs, state, *_ = step(jax.random.key(t + 1), state, jnp.array([2.0]), params)
        assert np.all(np.abs(obs) <= 0.5)
        clipped_any |= bool(np.any(np.abs(obs) == 0.5))
    assert clipped_any


# --------------------------------------------------------------------------------------
# ScaleReward


def _np_scale_rewards(rewards, dones, gamma, clip=10.0):
    """Reference reward scaling, one lane at a time, with pooled float64 stats."""
    T, N = rewards.shape
    out = np.zeros((T, N))
    for n in range(N):
        g, seen = 0.0, []
        for t in range(T):
            g = g * gamma + float(rewards[t, n])
            seen.append(g)
            _, var = pooled_stats(np.array(seen))
            out[t, n] = np.clip(rewards[t, n] / np.sqrt(var + 1e-8), -clip, clip)
            if dones[t, n]:
                g = 0.0
    return out


@pytest.mark.parametrize("gamma", [0.95])
def test_scale_reward_matches_numpy(gamma):
    raw, params = envs.make("Pendulum-v1", max_steps_in_episode=30)
    env = envs.ScaleReward(envs.EpisodeStatistics(raw), gamma=gamma)
    N, T = 3, 80
    run = jax.jit(lambda k: _scan_random(env, raw, params, N, T, k, _pendulum_actions))
    _, _, _, out = run(jax.random.key(11))
    out = jax.device_get(out)
    np.testing.assert_array_equal(out["obs"], out["raw_obs"])
    raw_r = out["raw_reward"]
    dones = out["raw_terminated"] | out["raw_truncated"]
    assert dones.any()
    expected = _np_scale_rewards(raw_r, dones, gamma)
    np.testing.assert_allclose(out["reward"], expected, rtol=2e-3, atol=1e-4)
    assert np.all(np.abs(out["reward"]) <= 10.0)
    assert not np.allclose(out["reward"], raw_r)
    # Episode statistics inside the scaling report raw returns.
    ret, length, _ = episode_stats(raw_r, dones)
    np.testing.assert_allclose(out["info"]["episode_return"], ret, rtol=1e-5)
    np.testing.assert_array_equal(out["info"]["episode_length"], length)
    # The discounted return in the state was reset where the episode ended.
    assert np.all(out["state"].discounted_return[dones] == 0.0)


def test_scale_reward_clip():
    raw, params = envs.make("Pendulum-v1")
    env = envs.ScaleReward(raw, clip=0.1)
    _, state = env.reset(jax.random.key(0), params)
    _, raw_state = raw.reset(jax.random.key(0), params)
    step = jax.jit(env.step)
    for t in range(3):
        _, state, r, *_ = step(jax.random.key(t + 1), state, jnp.array([1.0]), params)
        assert abs(float(r)) <= 0.1 + 1e-7
        if t == 0:
            # A single discounted return: tiny variance, so the scaled reward is clipped.
            _, _, raw_r, *_ = raw.step(jax.random.key(1), raw_state, jnp.array([1.0]), params)
            assert float(raw_r) != 0.0
            np.testing.assert_allclose(float(r), 0.1 * np.sign(float(raw_r)), rtol=1e-6)
