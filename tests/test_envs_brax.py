"""The ``brax:`` adapter (jaxrl.envs.brax): brax's raw env in the gymnax API, checked
step by step against brax's own ``step`` from the same brax state. PPO learning brax's
inverted pendulum is a row of ``benchmarks/learning_table.py``.

The tests use ``brax:inverted_pendulum`` on the ``"spring"`` backend, the cheapest to
compile of brax's four (reset + step on this 2-core CPU: spring 7.6 s, positional 9.5 s,
generalized 10.6 s, mjx 15.5 s)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import envs

pytest.importorskip("brax")

pytestmark = [
    pytest.mark.filterwarnings("ignore:Brax System, piplines and environments:UserWarning"),
    pytest.mark.filterwarnings("ignore:JAXopt is no longer maintained:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Accessing `ncon` directly:DeprecationWarning"),
]

ENV_ID = "brax:inverted_pendulum"
BACKEND = "spring"


@pytest.fixture(scope="module")
def pendulum():
    env, params = envs.make(ENV_ID, backend=BACKEND, max_steps_in_episode=8)
    return env, params, jax.jit(env.reset), jax.jit(env.step)


@pytest.mark.slow
def test_steps_follow_brax_and_time_limits_truncate(pendulum):
    """From the same brax state, every step is brax's own step (obs, reward, done); at
    ``max_steps_in_episode`` without a fall the episode ends ``truncated`` (never
    ``terminated``) with the last observation in ``info["final_observation"]`` and a fresh
    initial state; a fall is ``terminated`` (brax's ``done``), not ``truncated``."""
    env, params, reset, step = pendulum
    brax_step = jax.jit(env.brax_env.step)
    assert env.backend == BACKEND and int(params.max_steps_in_episode) == 8

    obs, state = reset(jax.random.key(0), params)
    assert obs.shape == (4,) and obs.dtype == jnp.float32 and int(state.time) == 0
    expected = env.brax_env.reset(jax.random.key(0))  # brax's own reset from the same key
    np.testing.assert_allclose(obs, expected.obs, rtol=1e-6, atol=1e-7)

    rng = np.random.default_rng(0)
    long_params = params.replace(max_steps_in_episode=1000)  # same program: params are traced
    truncations = terminations = 0
    for t in range(300):
        # 24 steps of small pushes keep the pole up past the 8-step limit three times; then,
        # under a 1000-step limit, a steady push to one side fells it
        limit_params = params if t < 24 else long_params
        push = rng.uniform(-0.2, 0.2, (1,)) if t < 24 else np.ones(1)
        action = jnp.asarray(push, jnp.float32)
        brax_next = brax_step(state.brax, action)
        obs, next_state, reward, terminated, truncated, info = step(
            jax.random.key(100 + t), state, action, limit_params
        )
        assert obs.shape == (4,) and obs.dtype == jnp.float32
        assert reward.dtype == jnp.float32 and terminated.dtype == jnp.bool_ and truncated.dtype == jnp.bool_
        np.testing.assert_allclose(info["final_observation"], brax_next.obs, rtol=1e-5, atol=1e-6)
        assert float(reward) == float(brax_next.reward)
        assert bool(terminated) == bool(brax_next.done)
        at_limit = int(state.time) + 1 >= int(limit_params.max_steps_in_episode)
        assert bool(truncated) == (at_limit and not bool(brax_next.done))
        if terminated or truncated:
            truncations += int(truncated)
            terminations += int(terminated)
            assert int(next_state.time) == 0
            assert not np.allclose(obs, brax_next.obs)  # a new episode, not the old one's last state
            assert np.all(np.abs(np.asarray(obs)) <= 0.01)  # brax's initial noise: uniform in +-0.01
        else:
            np.testing.assert_array_equal(obs, info["final_observation"])
            assert int(next_state.time) == int(state.time) + 1
        state = next_state
        if terminations:
            break
    assert truncations == 3 and terminations == 1, (truncations, terminations)


@pytest.mark.slow
def test_resets_draw_fresh_states_and_vmap_over_seeds(pendulum):
    """Two keys give two initial states (reset vmapped over 2 seeds), and the auto-reset
    at a time limit draws a fresh state from the step's key (brax's AutoResetWrapper would
    replay the first state)."""
    env, params, *_ = pendulum

    def reset_then_truncate(key, step_key):  # one program: reset, then a step at the limit
        obs, state = env.reset(key, params)
        state = state.replace(time=jnp.int32(7))  # one step before the 8-step limit
        return obs, env.step(step_key, state, jnp.zeros(1), params)

    run = jax.jit(jax.vmap(reset_then_truncate))
    keys = jax.random.split(jax.random.key(3), 2)
    step_keys = jnp.stack([jax.random.key(5), jax.random.key(5)])
    obs, (new_obs, state, reward, terminated, truncated, info) = run(keys, step_keys)
    assert obs.shape == (2, 4) and obs.dtype == jnp.float32 and state.time.shape == (2,)
    assert reward.shape == (2,) and reward.dtype == jnp.float32
    assert not np.allclose(obs[0], obs[1])  # two seeds, two initial states
    assert truncated.tolist() == [True, True] and terminated.tolist() == [False, False]
    assert state.time.tolist() == [0, 0] and not np.allclose(info["final_observation"][0], info["final_observation"][1])
    np.testing.assert_allclose(new_obs[0], new_obs[1])  # the step's key alone decides the new episode
    assert not np.allclose(new_obs[0], obs[0]) and not np.allclose(new_obs[0], obs[1])
    other_obs, (other_new, *_) = run(keys, jax.random.split(jax.random.key(6), 2))
    np.testing.assert_array_equal(other_obs, obs)
    assert not np.allclose(other_new[0], new_obs[0]) and not np.allclose(other_new[0], other_new[1])


def test_spaces_spec_and_defaults(pendulum):
    env, params, *_ = pendulum
    obs_space, action_space = env.observation_space(params), env.action_space(params)
    assert obs_space.shape == (4,) and obs_space.dtype == jnp.float32
    assert action_space.shape == (1,) and float(action_space.low) == -1.0 and float(action_space.high) == 1.0
    spec = envs.spec(env, params)
    assert spec.action_kind == "continuous" and spec.obs_shape == (4,) and spec.max_episode_steps == 8
    assert env.name == ENV_ID and env.default_params.max_steps_in_episode == 1000


def test_bad_ids_and_parameters():
    with pytest.raises(ValueError, match=r"unknown brax env 'inverted_pendulm'.*brax's envs: .*inverted_pendulum"):
        envs.make("brax:inverted_pendulm")
    with pytest.raises(ValueError, match="unknown brax env"):
        envs.check_env_id("brax:nosuchtask")
    envs.check_env_id(ENV_ID)
    with pytest.raises(ValueError, match=r"unknown env parameter\(s\) \['episode_length'\].*max_steps_in_episode"):
        envs.make(ENV_ID, episode_length=100)
    with pytest.raises(ValueError, match="max_steps_in_episode must be an integer >= 1"):
        envs.make(ENV_ID, max_steps_in_episode=0)
    with pytest.raises(ValueError, match="unknown brax backend 'mujoco'.*generalized"):
        envs.make(ENV_ID, backend="mujoco")
