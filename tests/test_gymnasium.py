"""The Gymnasium bridge (``jaxrl.envs.make("gymnasium:<id>")``): same dynamics as the
gymnax port step by step, the autoreset convention, one host call per time step under
nested vmap, reproducibility, bad input, faults and closing. Learning through the bridge
(PPO's CartPole-v1 at RL Zoo's settings, SAC's Pendulum-v1) is in rows of
``benchmarks/learning_table.py``; the gymnasium notebook trains PPO through it too.

Compiles dominate on a 2-core CPU, so the env tests share a few small jitted programs
(module-scoped fixtures).
"""

from __future__ import annotations

import gc

import jax
import jax.numpy as jnp
import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")

from jaxrl import envs, evaluation  # noqa: E402
from jaxrl.algorithms import ppo, sac  # noqa: E402
from jaxrl.envs import gymnasium as bridge  # noqa: E402

TIME_LIMIT = 30  # short, so that episodes are truncated within the step-by-step test
FAULT_STEP = 3


# ----------------------------------------------------------------------------- test envs


class Faulty(gymnasium.Env):
    """Raises at its ``FAULT_STEP``-th step after a reset."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t == FAULT_STEP:
            raise ValueError("injected fault")
        return np.zeros(2, np.float32), 1.0, False, False, {}


class EchoAction(gymnasium.Env):
    """float64 observations echoing the action received, Discrete(3, start=-1) actions;
    terminates when it receives action 1."""

    observation_space = gymnasium.spaces.Box(-5.0, 5.0, (2,), np.float64)
    action_space = gymnasium.spaces.Discrete(3, start=-1)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.array([0.0, self.np_random.uniform()]), {}

    def step(self, action):
        return np.array([float(action), 0.5]), 0.25, bool(action == 1), False, {}


class TextObservation(Faulty):
    observation_space = gymnasium.spaces.Text(8)


class TupleAction(Faulty):
    action_space = gymnasium.spaces.Tuple((gymnasium.spaces.Discrete(2), gymnasium.spaces.Discrete(3)))


for _name, _cls, _limit in [
    ("Faulty", Faulty, 100),
    ("EchoAction", EchoAction, 100),
    ("TextObservation", TextObservation, 100),
    ("TupleAction", TupleAction, 100),
    ("NoTimeLimit", EchoAction, None),
]:
    gymnasium.register(f"jaxrl_test/{_name}-v0", entry_point=_cls, max_episode_steps=_limit)


def programs(env, params):
    """Jitted ``reset(keys [N])`` and ``step(keys [N], states, actions [N])`` over N lanes."""
    reset = jax.jit(jax.vmap(lambda key: env.reset(key, params)))
    step = jax.jit(jax.vmap(lambda key, state, action: env.step(key, state, action, params)))
    return reset, step


@pytest.fixture(scope="module")
def cartpole():
    """``(bridged, native)``: jitted reset/step of Gymnasium's and gymnax's CartPole-v1
    with the same short time limit."""
    return (
        programs(*envs.make("gymnasium:CartPole-v1", max_steps_in_episode=TIME_LIMIT)),
        programs(*envs.make("CartPole-v1", max_steps_in_episode=TIME_LIMIT)),
    )


# ----------------------------------------------------------------------------- dynamics


@pytest.mark.slow
def test_matches_gymnax_cartpole_step_by_step(cartpole):
    """From gymnax's state (copied into each Gymnasium sub-env before every step) and the
    same actions, the bridge gives gymnax's observation, reward, terminated, truncated and
    final observation. Lane 0 always pushes right (it terminates, several times); lane 1
    balances (it is truncated at the time limit, twice)."""
    (bridged_reset, bridged_step), (native_reset, native_step) = cartpole
    keys = jax.random.split(jax.random.key(0), 2)
    native_obs, native_state = native_reset(keys)
    _, bridged_state = bridged_reset(keys)
    vector_env = bridge.vector_env(bridged_state.handle)
    ended = np.zeros((2, 2), int)  # [lane, (terminated, truncated)]
    for t in range(2 * TIME_LIMIT + 5):
        host_state = jax.device_get(native_state)
        for lane, env in enumerate(vector_env.envs):
            env.unwrapped.state = np.array(
                [host_state.x[lane], host_state.x_dot[lane], host_state.theta[lane], host_state.theta_dot[lane]],
                np.float64,
            )
            assert env.get_wrapper_attr("_elapsed_steps") == host_state.time[lane]  # same episode clocks
        balance = int(native_obs[1, 2] + 0.5 * native_obs[1, 3] > 0)
        action = jnp.array([1, balance], jnp.int32)
        step_keys = jax.random.split(jax.random.key(t), 2)
        native_obs, native_state, native_reward, native_term, native_trunc, native_info = native_step(
            step_keys, native_state, action
        )
        obs, bridged_state, reward, term, trunc, info = jax.device_get(bridged_step(step_keys, bridged_state, action))
        native_obs, native_reward, native_term, native_trunc, native_info = jax.device_get(
            (native_obs, native_reward, native_term, native_trunc, native_info)
        )
        np.testing.assert_array_equal(term, native_term, err_msg=f"step {t}")
        np.testing.assert_array_equal(trunc, native_trunc, err_msg=f"step {t}")
        np.testing.assert_array_equal(reward, native_reward)
        np.testing.assert_allclose(
            info["final_observation"], native_info["final_observation"], rtol=1e-5, atol=1e-6, err_msg=f"step {t}"
        )
        done = term | trunc
        # Where an episode continues the observation is the next state; where it ended,
        # each side starts a new episode from its own draw in [-0.05, 0.05]^4.
        np.testing.assert_allclose(obs[~done], native_obs[~done], rtol=1e-5, atol=1e-6)
        assert np.all(np.abs(obs[done]) <= 0.05)
        assert not np.any(info["final_observation"][done] == obs[done])
        ended += np.stack([term, trunc], axis=1)
    assert ended[0, 0] >= 2 and ended[0, 1] == 0, ended
    assert ended[1, 0] == 0 and ended[1, 1] == 2, ended


def test_spec_matches_gymnax_and_converts_spaces():
    """EnvSpec from Gymnasium's spaces: equal to gymnax's for CartPole and Pendulum;
    float64 observations arrive as float32 and a Discrete action space's ``start`` is
    applied on the host (EchoAction echoes the action it received)."""
    assert envs.spec(*envs.make("gymnasium:CartPole-v1")) == envs.spec(*envs.make("CartPole-v1"))
    bridged = envs.spec(*envs.make("gymnasium:Pendulum-v1"))
    native = envs.spec(*envs.make("Pendulum-v1"))
    for field in ("obs_shape", "obs_dtype", "action_kind", "action_shape", "max_episode_steps"):
        assert getattr(bridged, field) == getattr(native, field), field
    np.testing.assert_array_equal(bridged.action_low, native.action_low)
    np.testing.assert_array_equal(bridged.action_high, native.action_high)
    assert ppo.Config(env_id="gymnasium:CartPole-v1").env_id == "gymnasium:CartPole-v1"

    env, params = envs.make("gymnasium:jaxrl_test/EchoAction-v0")
    spec = envs.spec(env, params)
    assert (spec.obs_dtype, spec.num_actions, spec.max_episode_steps) == (np.float32, 3, 100)
    reset, step = programs(env, params)
    keys = jax.random.split(jax.random.key(1), 3)
    obs, state = reset(keys)
    assert obs.dtype == jnp.float32
    obs, state, reward, term, trunc, info = step(keys, state, jnp.array([0, 1, 2], jnp.int32))
    np.testing.assert_array_equal(info["final_observation"][:, 0], [-1.0, 0.0, 1.0])  # actions shifted by start
    np.testing.assert_array_equal(term, [False, False, True])
    np.testing.assert_array_equal(obs[:2], info["final_observation"][:2])
    assert obs[2, 0] == 0.0  # the next episode's first observation
    np.testing.assert_array_equal(reward, [0.25] * 3)


# ----------------------------------------------------------------------------- batching and seeds


def test_vmap_over_seeds_one_host_call_per_step_independent_and_reproducible():
    """Two vmapped seeds x 3 lanes: one vector env of 6 sub-envs stepped once per time
    step (one host call for all lanes and seeds); each seed's trajectory depends on its
    own key alone; the same keys give the same trajectory, other keys another."""
    env, params = envs.make("gymnasium:CartPole-v1")

    def rollout(key):
        reset_key, run_key = jax.random.split(key)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, 3), params)

        def one_step(state, key):
            action = jax.random.bernoulli(key, shape=(3,)).astype(jnp.int32)
            obs, state, *_ = jax.vmap(env.step, in_axes=(None, 0, 0, None))(key, state, action, params)
            return state, obs

        state, trajectory = jax.lax.scan(one_step, state, jax.random.split(run_key, 12))
        return jnp.concatenate([obs[None], trajectory]), state

    keys = jax.random.split(jax.random.key(7), 2)
    seeds = jax.jit(jax.vmap(rollout))
    obs, state = seeds(keys)
    assert np.unique(state.handle).size == 1
    np.testing.assert_array_equal(np.sort(np.asarray(state.lane).ravel()), np.arange(6))
    vector_env = bridge.vector_env(state.handle)
    assert vector_env.num_envs == 6

    calls = []
    original_step = vector_env.step
    vector_env.step = lambda actions: calls.append(np.shape(actions)) or original_step(actions)
    try:
        again, state = seeds(keys)  # the same reset reuses its vector env
    finally:
        del vector_env.step
    assert bridge.vector_env(state.handle) is vector_env
    assert calls == [(6,)] * 12
    np.testing.assert_array_equal(again, obs)

    # A seed's trajectory depends on its own key only: not on its position, nor on the
    # other seed (same compiled program, so no second compile).
    other_key = jax.random.key(8)
    swapped, _ = seeds(jnp.stack([keys[1], keys[0]]))
    np.testing.assert_array_equal(swapped, obs[::-1])
    paired, _ = seeds(jnp.stack([keys[0], other_key]))
    np.testing.assert_array_equal(paired[0], obs[0])
    assert not np.allclose(paired[1], obs[1])


def test_stepping_a_state_twice_is_an_error(cartpole):
    (reset, step), _ = cartpole
    keys = jax.random.split(jax.random.key(2), 2)
    _, state = reset(keys)
    actions = jnp.zeros(2, jnp.int32)
    step(keys, state, actions)
    with pytest.raises(RuntimeError, match="can be stepped only once"):
        jax.block_until_ready(step(keys, state, actions))


# ----------------------------------------------------------------------------- errors and lifetime


def test_bad_ids_spaces_and_arguments_are_clear_errors():
    with pytest.raises(ValueError, match=r"unknown Gymnasium env id 'CartPol-v1'.*CartPole"):
        envs.check_env_id("gymnasium:CartPol-v1")
    with pytest.raises(ValueError, match="unknown Gymnasium env id 'NoSuchEnv-v0'"):
        ppo.Config(env_id="gymnasium:NoSuchEnv-v0")
    with pytest.raises(ValueError, match=r"unsupported observation space Text.*'jaxrl_test/TextObservation-v0'"):
        envs.make("gymnasium:jaxrl_test/TextObservation-v0")
    with pytest.raises(ValueError, match=r"unsupported action space Tuple.*'jaxrl_test/TupleAction-v0'.*Discrete"):
        sac.Config(env_id="gymnasium:jaxrl_test/TupleAction-v0")
    with pytest.raises(ValueError, match="num_envs"):
        envs.make("gymnasium:CartPole-v1", num_envs=4)
    with pytest.raises(ValueError, match="unexpected keyword argument 'gravity'"):
        envs.make("gymnasium:CartPole-v1", gravity=3.0)
    with pytest.raises(ValueError, match="vectorization_mode must be one of"):
        envs.make("gymnasium:CartPole-v1", vectorization_mode="threads")
    with pytest.raises(ValueError, match="no time limit"):
        evaluation.evaluate(
            lambda params, obs, carry, key: (obs[:, 0].astype(jnp.int32), carry),
            None,
            "gymnasium:jaxrl_test/NoTimeLimit-v0",
            jax.random.key(0),
            2,
        )


def test_fault_names_env_step_and_error_and_the_process_recovers(cartpole):
    """An env raising at its third step: the compiled call raises a Python exception
    naming the id, the step and the original error; the failed envs are closed; the
    same program runs again (fresh host envs) and other bridged envs keep working."""
    env, params = envs.make("gymnasium:jaxrl_test/Faulty-v0")

    def run(key):
        _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, 2), params)

        def one_step(state, _):
            obs, state, *_ = jax.vmap(env.step, in_axes=(None, 0, 0, None))(key, state, jnp.zeros(2, jnp.int32), params)
            return state, obs

        return jax.lax.scan(one_step, state, None, length=5)

    message = r"(?s)Gymnasium env 'jaxrl_test/Faulty-v0'.*raised at step 3 after reset: ValueError: injected fault"
    run = jax.jit(run)
    for _ in range(2):
        with pytest.raises(RuntimeError, match=message):
            jax.block_until_ready(run(jax.random.key(0)))
    assert not any(batch.host.env_id == "jaxrl_test/Faulty-v0" for batch in bridge._BATCHES.values())

    (reset, step), _ = cartpole
    keys = jax.random.split(jax.random.key(3), 2)
    obs, state = reset(keys)
    obs, *_ = step(keys, state, jnp.ones(2, jnp.int32))
    assert np.all(np.isfinite(obs)) and np.all(np.abs(obs) < 0.5)


@pytest.mark.slow
def test_host_envs_close_when_no_longer_referenced():
    env, params = envs.make("gymnasium:CartPole-v1")
    reset = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))
    _, state = reset(jax.random.split(jax.random.key(0), 2), params)
    vector_env = bridge.vector_env(state.handle)
    assert not vector_env.closed
    del env, reset
    gc.collect()
    assert vector_env.closed
    with pytest.raises(bridge.GymnasiumEnvError, match="no live Gymnasium env"):
        bridge.vector_env(state.handle)
