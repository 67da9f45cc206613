"""DDPG / TD3 exploration noise: the Ornstein-Uhlenbeck process against a NumPy loop,
how ``act`` applies it, its reset at episode ends, and the config's refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import rollout
from jaxrl.algorithms import ddpg, offpolicy, td3
from jaxrl.exploration import OrnsteinUhlenbeck

OU = dict(exploration=OrnsteinUhlenbeck(sigma=0.5, theta=0.3, dt=0.05), hidden_sizes=(8,), num_reports=0)


def test_ou_noise_matches_a_numpy_loop():
    """The OU part's ``step`` is x <- x - theta * x * dt + sigma * sqrt(dt) * eps, step after step,
    with eps the standard normals of each step's key."""
    config = td3.Config(env_id="MountainCarContinuous-v0", **OU)
    keys = jax.random.split(jax.random.key(0), 60)
    noise = jnp.zeros((3, 1))
    reference = np.zeros((3, 1))
    for key in keys:
        noise = config.exploration.step(noise, key)
        eps = np.asarray(jax.random.normal(key, (3, 1)))
        reference = reference - 0.3 * reference * 0.05 + 0.5 * np.sqrt(0.05) * eps
        np.testing.assert_allclose(noise, reference, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_act_adds_the_carried_noise_and_deterministic_act_leaves_it_alone():
    config = td3.Config(env_id="MountainCarContinuous-v0", **OU)
    params = jax.jit(td3.init, static_argnames="config")(jax.random.key(0), config).params  # not op by op
    obs = jax.random.uniform(jax.random.key(1), (4, 2), minval=-0.5, maxval=0.05)
    carry = td3.initial_carry(config, 4)
    assert set(carry) == {"noise"} and carry["noise"].shape == (4, 1)
    carry = {"noise": jnp.full((4, 1), 0.3)}
    mean, same = td3.act(params, obs, carry, jax.random.key(2), config, deterministic=True)
    assert same is carry
    action, next_carry = td3.act(params, obs, carry, jax.random.key(2), config)
    expected_noise = config.exploration.step(carry["noise"], jax.random.key(2))
    np.testing.assert_allclose(next_carry["noise"], expected_noise, rtol=1e-6)
    np.testing.assert_allclose(action, np.clip(mean + expected_noise, -1.0, 1.0), rtol=1e-5, atol=1e-6)
    assert td3.initial_carry(td3.Config(env_id="MountainCarContinuous-v0"), 4) == ()  # Gaussian: no state


@pytest.mark.slow
def test_rollouts_restart_the_noise_where_an_episode_ends():
    """The noise is the policy's carry: zero entering each episode's first step, and
    carried on (nonzero) within an episode."""
    config = ddpg.Config(env_id="Pendulum-v1", env_kwargs={"max_steps_in_episode": 7}, **OU)
    state = jax.jit(ddpg.init, static_argnames="config")(jax.random.key(0), config)  # not op by op
    env, env_params = offpolicy.make_env(config)

    def policy(obs, carry, key):
        action, next_carry = ddpg.act(state.params, obs, carry, key, config)
        return action, next_carry, {"noise": carry["noise"]}

    trajectory, *_ = jax.jit(
        lambda: rollout.collect(env, env_params, policy, state.env_state, state.obs, jax.random.key(1), 20, state.carry)
    )()
    entering = np.abs(np.asarray(trajectory.extras["noise"])[..., 0])  # [T, N]
    starts = np.array(rollout.episode_starts(trajectory.done))
    starts[0] = True  # the first step starts from the initial carry too
    assert starts.sum() > config.num_envs
    np.testing.assert_array_equal(entering[starts], 0.0)
    assert np.all(entering[~starts] > 0.0)


def test_bad_exploration_settings_are_clear_errors():
    with pytest.raises(ValueError, match="exploration"):
        ddpg.Config(exploration="pink")
    assert ddpg.Config(exploration="ou").exploration == OrnsteinUhlenbeck()  # the command line's shorthand
    config = ddpg.Config(**OU)
    with pytest.warns(DeprecationWarning, match="exploration.step"):
        ddpg.ou_noise(jnp.zeros((2, 1)), jax.random.key(0), config)
    with pytest.raises(ValueError, match=r"exploration\.theta must lie in"):
        ddpg.init(jax.random.key(0), ddpg.Config(exploration=OrnsteinUhlenbeck(theta=0.0)))
