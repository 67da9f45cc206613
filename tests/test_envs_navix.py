"""The ``navix:`` adapter (jaxrl.envs.navix), checked as tests/test_envs_grid_suites.py
checks craftax and xminigrid. navix is not in the ``test`` extra (it brings tfp-nightly,
pylint, black and flake8): .ci/run installs it in the heavy-extras step and runs this file
there; without it these tests skip."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_envs_grid_suites import SEEDS, _check_bad_parameters, _follow_suite, _reset_key

from jaxrl import envs


@pytest.fixture(scope="module")
def navix():
    return pytest.importorskip("navix")


def test_navix_steps_follow_navix(navix):
    """Navix-Empty-Random-5x5-v0 with an 8-step limit, random turns and moves: every step
    is NAVIX's own step from the same timestep (its observation, reward and state), its
    TERMINATION step type is ``terminated`` and its TRUNCATION ``truncated`` (at exactly 8
    steps), and a done step resets in place with NAVIX's reset from the step's key."""
    env, params = envs.make("navix:Navix-Empty-Random-5x5-v0", max_steps_in_episode=8)
    nav = env.navix_env
    assert nav.max_steps == 8 and params.max_steps_in_episode == 8

    @jax.jit
    @jax.vmap
    def suite_step(key, timestep, action):
        out = nav.step(timestep, action)  # NAVIX's step: no reset, as the timestep is not done
        return out.observation, out, out.reward, out.step_type == 2, out.step_type == 1

    @jax.jit
    @jax.vmap
    def suite_reset(key):
        timestep = nav.reset(_reset_key(key))
        return timestep.observation, timestep

    first_obs, lengths = _follow_suite(env, params, suite_step, suite_reset, 60, actions=[0, 1, 2, 2])
    assert first_obs.shape == (SEEDS, 5, 5, 3) and first_obs.dtype == jnp.uint8
    assert not np.array_equal(first_obs[0], first_obs[1])  # the start is random
    assert lengths["truncated"] and set(lengths["truncated"]) == {8}
    assert lengths["terminated"] and max(lengths["terminated"]) <= 8


def test_navix_spaces(navix):
    """The spaces are NAVIX's (uint8 grids in [0, 8], 7 actions), for each observation
    function; they describe what ``reset`` returns."""
    for observation in ("symbolic", "categorical", "symbolic_first_person", "rgb"):
        env, params = envs.make("navix:Navix-DoorKey-5x5-v0", observation=observation)
        space = env.observation_space(params)
        obs, _ = jax.eval_shape(env.reset, jax.random.key(0), params)
        assert (obs.shape, obs.dtype) == (tuple(space.shape), space.dtype), observation
        nav_space = env.navix_env.observation_space
        assert tuple(space.shape) == tuple(nav_space.shape) and space.dtype == jnp.dtype(nav_space.dtype)
    env, params = envs.make("navix:Navix-Empty-5x5-v0")
    assert env.observation_space(params).shape == (5, 5, 3) and np.max(env.observation_space(params).high) == 8
    spec = envs.spec(env, params)
    assert spec.discrete and spec.num_actions == 7 and spec.max_episode_steps == 100


def test_navix_bad_ids_and_parameters(navix):
    _check_bad_parameters("navix:Navix-Empty-5x5-v0", "navix")
    with pytest.raises(ValueError, match="navix ids: Navix-Empty-5x5-v0"):
        envs.make("navix:Navix-Empty-4x4-v0")
    with pytest.raises(ValueError, match="unknown navix observation 'pixels'"):
        envs.make("navix:Navix-Empty-5x5-v0", observation="pixels")
