"""Structured observations (dicts and tuples of arrays) and action masks: env specs,
per-leaf encoders, per-leaf observation statistics, and PPO / DQN / ES on a registered
dict-observation env whose mask changes every step (a masked action is never taken)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cue_env import EPISODE, CueParams, MaskedCue  # noqa: E402
from gymnax.environments import spaces

from jaxrl import envs, networks
from jaxrl.algorithms import dqn, es, ppo
from jaxrl.exploration import EpsilonGreedy

ENV_ID = "jaxrl_test/MaskedCue-v0"


@pytest.fixture(scope="module", autouse=True)
def registered():
    envs.register(ENV_ID, lambda **overrides: (MaskedCue(), CueParams(**overrides)), replace=True)
    yield
    envs.registry._REGISTRY.pop(ENV_ID, None)


# ----------------------------------------------------------------------------- specs, encoders, statistics


def test_spec_describes_each_leaf():
    spec = envs.config_spec(ppo.Config(env_id=ENV_ID))
    assert spec.structured and spec.action_mask and spec.obs_shape is None
    assert jax.tree.map(lambda leaf: (leaf.shape, leaf.dtype), spec.observation) == {
        "action_mask": ((4,), np.dtype(bool)),
        "cue": ((4,), np.dtype(np.float32)),
        "position": ((2,), np.dtype(np.float32)),
    }
    assert spec.obs_ndim == (1, 1, 1)  # jax.tree.leaves order: action_mask, cue, position
    zeros = spec.zeros((3,))
    assert zeros["cue"].shape == (3, 4) and zeros["action_mask"].dtype == jnp.bool_
    tuple_space = spaces.Tuple([spaces.Box(0.0, 1.0, (2, 3), jnp.float32), spaces.Discrete(5)])
    structs = envs.observation_struct(tuple_space)
    assert isinstance(structs, tuple) and structs[0].shape == (2, 3) and structs[1].shape == ()


def test_a_mask_that_does_not_fit_the_actions_is_refused():
    class Bad(MaskedCue):
        def action_space(self, params=None):
            return spaces.Discrete(3)

    with pytest.raises(ValueError, match="must be a bool mask \\[num_actions\\]"):
        envs.spec(Bad(), CueParams())


def test_flatten_observation_concatenates_leaves_in_tree_order():
    rng = np.random.default_rng(0)
    obs = {"b": rng.normal(size=(5, 3, 2, 2)), "a": rng.integers(0, 3, size=(5, 3)), "c": rng.normal(size=(5, 3, 4))}
    flat = networks.flatten_observation(jax.tree.map(jnp.asarray, obs), (0, 2, 1))
    reference = np.concatenate([obs["a"][..., None], obs["b"].reshape(5, 3, 4), obs["c"]], axis=-1)
    np.testing.assert_allclose(np.asarray(flat), reference.astype(np.float32), rtol=1e-6)
    assert networks.leading_shape(obs, (0, 2, 1)) == (5, 3)


def test_cnn_encodes_image_leaves_and_flattens_the_rest():
    torso = networks.torso("cnn", (16,), "relu", (3, 1))  # {"image": [6, 6, 2], "vector": [3]}
    obs = {"image": jnp.ones((4, 6, 6, 2)), "vector": jnp.ones((4, 3))}
    params = torso.init(jax.random.key(0), obs)
    assert params["params"]["Conv_0"]["kernel"].shape == (3, 3, 2, 16)
    assert params["params"]["MLP_0"]["Dense_0"]["kernel"].shape == (4 * 4 * 16 + 3, 16)
    assert torso.apply(params, obs).shape == (4, 16)
    with pytest.raises(ValueError, match="needs image observations"):
        networks.torso("cnn", (16,), "relu", (1, 1))


def test_observation_statistics_per_float_leaf():
    spec = envs.config_spec(ppo.Config(env_id=ENV_ID))
    stats = envs.observation_stats_init(spec.observation)
    rng = np.random.default_rng(1)
    batches = [
        {
            "action_mask": rng.random((16, 4)) < 0.5,
            "cue": rng.normal(size=(16, 4)),
            "position": rng.normal(3, 2, (16, 2)),
        }
        for _ in range(3)
    ]
    for batch in batches:
        stats = envs.observation_stats_update(stats, jax.tree.map(jnp.asarray, batch))
    assert stats[0] is None  # the mask is not a float: no statistics, never normalised
    everything = {name: np.concatenate([b[name] for b in batches]) for name in ("cue", "position")}
    for leaf, name in ((1, "cue"), (2, "position")):
        np.testing.assert_allclose(stats[leaf].mean, everything[name].mean(0), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(stats[leaf].var, everything[name].var(0), rtol=1e-3, atol=1e-5)
    obs = jax.tree.map(jnp.asarray, batches[0])
    normalized = envs.normalize_observation(stats, obs)
    assert np.array_equal(normalized["action_mask"], batches[0]["action_mask"])
    expected = (batches[0]["position"] - everything["position"].mean(0)) / np.sqrt(everything["position"].var(0) + 1e-8)
    np.testing.assert_allclose(normalized["position"], expected, rtol=1e-3, atol=1e-4)


# ----------------------------------------------------------------------------- learning, masks respected

SEEDS = 4


def run(module, config):
    out = jax.jit(jax.vmap(module.train, in_axes=(0, None)))(jax.random.split(jax.random.key(0), SEEDS), config)
    return jax.tree.map(np.asarray, out.metrics)


@pytest.fixture(scope="module")
def ppo_metrics():
    # PPO on MaskedCue: 16 envs x 16 steps x 60 iterations (15,360 steps), with
    # observation normalisation (the position leaf is far from standard).
    config = ppo.Config(
        env_id=ENV_ID,
        num_envs=16,
        num_steps=16,
        total_timesteps=16 * 16 * 60,
        hidden_sizes=(32,),
        learning_rate=3e-3,
        normalize_observations=True,
        num_evals=3,
        eval_episodes=16,
        num_reports=0,
    )
    return run(ppo, config)


@pytest.fixture(scope="module")
def dqn_metrics():
    # DQN on MaskedCue: 8 envs, 12,000 steps, epsilon from 1 (uniform over the allowed
    # actions); gamma 0.5, as the cue of a step says nothing of the next (0.99: 1 of 4 seeds).
    config = dqn.Config(
        env_id=ENV_ID,
        num_envs=8,
        total_timesteps=12_000,
        hidden_sizes=(32,),
        batch_size=64,
        buffer_size=4_000,
        learning_starts=256,
        exploration=EpsilonGreedy(fraction=0.5),
        gamma=0.5,
        num_evals=3,
        eval_episodes=16,
        num_reports=0,
    )
    return run(dqn, config)


@pytest.fixture(scope="module")
def es_metrics():
    # OpenAI-ES on MaskedCue: 32 members x 2 episodes of 8 steps, 40 generations (20,480
    # steps); observation normalisation per float leaf (the mask is left alone).
    config = es.Config(
        env_id=ENV_ID,
        population_size=32,
        episodes_per_member=2,
        total_timesteps=32 * 2 * EPISODE * 40,
        hidden_sizes=(16,),
        num_evals=3,
        eval_episodes=16,
        num_reports=0,
    )
    metrics = run(es, config)
    # A generation's worst member: ES plays deterministic policies, masked like the evaluations.
    metrics["episode_return"] = metrics["fitness_min"]
    return metrics


@pytest.mark.learns
@pytest.mark.parametrize("name", ["ppo_metrics", "dqn_metrics", "es_metrics"])
def test_a_masked_action_is_never_taken_and_the_cue_is_learned(name, request):
    """Every finished episode, in training (sampled / epsilon-greedy actions) and in the
    deterministic evaluations, has a return >= 0: one masked action would cost 1000.
    Learned: the final evaluation follows the cue on >= 7 of 8 steps in 3 of 4 seeds
    (a uniform choice among the two allowed actions gets 4)."""
    metrics = request.getfixturevalue(name)
    episode_returns = metrics["episode_return"][np.isfinite(metrics["episode_return"])]
    assert episode_returns.size > 0 and episode_returns.min() >= 0.0
    evals = metrics["eval_return"][:, np.isfinite(metrics["eval_return"][0])]
    assert evals.min() >= 0.0
    assert np.sum(evals[:, -1] >= 7.0) >= 3, evals[:, -1]
