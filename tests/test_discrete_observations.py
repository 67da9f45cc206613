"""Small Discrete observation leaves enter networks one-hot (``networks.OneHot``, from
``EnvSpec.obs_classes``): the first dense layer is then an embedding of the category.

``Lookup`` shows a random category out of 16 each step and rewards the action a fixed
random table gives it (4 actions, 8-step episodes). A network reading the index as one
number must fit a table with no order to it; one-hot, it is a linear map.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces

from jaxrl import envs, networks
from jaxrl.algorithms import dqn, ppo

NUM_CUES, NUM_ACTIONS, EPISODE = 16, 4, 8
TABLE = jnp.asarray(np.random.default_rng(0).integers(0, NUM_ACTIONS, NUM_CUES), jnp.int32)


@struct.dataclass
class LookupParams:
    max_steps_in_episode: int = EPISODE


@struct.dataclass
class LookupState:
    cue: jax.Array
    time: jax.Array


class Lookup(environment.Environment):
    @property
    def default_params(self):
        return LookupParams()

    def reset_env(self, key, params):
        state = LookupState(jax.random.randint(key, (), 0, NUM_CUES), jnp.zeros((), jnp.int32))
        return state.cue, state

    def step_env(self, key, state, action, params):
        reward = (action == TABLE[state.cue]).astype(jnp.float32)
        state = LookupState(jax.random.randint(key, (), 0, NUM_CUES), state.time + 1)
        return state.cue, state, reward, jnp.zeros((), bool), {}

    def observation_space(self, params=None):
        return spaces.Discrete(NUM_CUES)

    def action_space(self, params=None):
        return spaces.Discrete(NUM_ACTIONS)


ENV_ID = "jaxrl_test/Lookup-v0"


@pytest.fixture(scope="module", autouse=True)
def registered():
    envs.register(ENV_ID, lambda **overrides: (Lookup(), LookupParams(**overrides)), replace=True)
    yield
    envs.registry._REGISTRY.pop(ENV_ID, None)


def test_leaf_features_against_numpy():
    """One-hot leaves, a scalar leaf and an image-shaped leaf, flattened and concatenated
    in ``jax.tree.leaves`` order, against a NumPy construction."""
    rng = np.random.default_rng(1)
    obs = {
        "a_cue": rng.integers(0, 5, (3, 2)).astype(np.int32),
        "b_grid": rng.normal(size=(3, 2, 4, 4, 1)).astype(np.float32),
        "c_count": rng.integers(0, 9, (3, 2)).astype(np.int32),
    }
    layouts = (networks.OneHot(5), 3, 0)
    expected = np.concatenate(
        [np.eye(5, dtype=np.float32)[obs["a_cue"]], obs["b_grid"].reshape(3, 2, 16), obs["c_count"][..., None]], -1
    )
    np.testing.assert_array_equal(networks.flatten_observation(obs, layouts), expected)
    assert networks.leading_shape(obs, layouts) == (3, 2)
    np.testing.assert_array_equal(
        networks.flatten_observation(obs["a_cue"], networks.OneHot(5)), np.eye(5)[obs["a_cue"]]
    )


def test_spec_marks_small_discrete_leaves():
    assert envs.spec(*envs.make(ENV_ID)).obs_ndim == networks.OneHot(NUM_CUES)
    assert envs.spec(*envs.make("FrozenLake-misc")).obs_ndim == networks.OneHot(16)
    assert envs.spec(*envs.make("CartPole-v1")).obs_classes == ()
    big = spaces.Dict({"big": spaces.Discrete(envs.ONE_HOT_MAX_CLASSES + 1), "small": spaces.Discrete(3)})
    assert envs.observation_classes(big) == (0, 3)


def test_gymnasium_discrete_observations_are_one_hot():
    pytest.importorskip("gymnasium")
    layouts = envs.spec(*envs.make("gymnasium:Blackjack-v1")).obs_ndim
    assert layouts == (networks.OneHot(32), networks.OneHot(11), networks.OneHot(2))


def test_categories_get_no_observation_statistics():
    """Normalising a category would break its one-hot: one-hot leaves keep no statistics."""
    spec = envs.spec(*envs.make(ENV_ID))
    stats = envs.observation_stats_init(spec.observation, spec.obs_classes)
    assert stats is None
    obs = jnp.arange(4, dtype=jnp.int32)
    assert envs.observation_stats_update(stats, obs) is None
    np.testing.assert_array_equal(envs.normalize_observation(stats, obs), obs)
    # Other integer observations (MinAtar's grids, Catch's board) keep theirs.
    minatar = envs.spec(*envs.make("Breakout-MinAtar"))
    assert isinstance(envs.observation_stats_init(minatar.observation, minatar.obs_classes), envs.RunningStats)
    structured = {"cue": jax.ShapeDtypeStruct((), jnp.int32), "x": jax.ShapeDtypeStruct((2,), jnp.float32)}
    stats = envs.observation_stats_init(structured, (5, 0))
    assert stats[0] is None and isinstance(stats[1], envs.RunningStats)


@pytest.mark.slow
def test_dqn_takes_one_hot_observations():
    config = dqn.Config(env_id=ENV_ID, num_envs=2, hidden_sizes=(8,), num_evals=0, num_reports=0)
    state = jax.jit(dqn.init, static_argnums=1)(jax.random.key(0), config)  # one program, not op by op
    kernel = state.params["network"]["params"]["MLP_0"]["Dense_0"]["kernel"]
    assert kernel.shape[0] == NUM_CUES
    action, _ = dqn.act(state.params, jnp.arange(2, dtype=jnp.int32), (), jax.random.key(1), config)
    assert action.shape == (2,)


@pytest.mark.learns
def test_ppo_learns_the_lookup_table():
    """PPO, 8 envs x 32 steps, 8,192 steps, 32 hidden units: the final deterministic
    evaluation (16 episodes) earns >= 7.5 of 8 in at least 2 of 3 seeds (measured 8, 8,
    8; reading the index as a number instead: 3.6, 3.0 and 3.2 at this budget, 4.4 to
    5.4 at four times it; uniform play earns 2)."""
    config = ppo.Config(
        env_id=ENV_ID,
        total_timesteps=8192,
        num_envs=8,
        num_steps=32,
        hidden_sizes=(32,),
        learning_rate=3e-3,
        num_evals=3,
        eval_episodes=16,
        num_reports=0,
    )
    out = jax.jit(jax.vmap(ppo.train, in_axes=(0, None)))(jax.random.split(jax.random.key(0), 3), config)
    evals = np.asarray(out.metrics["eval_return"])
    final = evals[:, ~np.isnan(evals[0])][:, -1]
    assert (final >= 7.5).sum() >= 2, final
