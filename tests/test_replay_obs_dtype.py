"""``replay_obs_dtype``: off-policy replay that keeps 0/1 or 8-bit observations compact.

MinAtar's frames are 0/1 grids the env emits as float32; stored as bool they take a
quarter of the memory and come back exact, so a DQN run with compact replay stores the
same observations and learns the same parameters (to float rounding: how XLA fuses the
cast may reorder a sum). Every buffer the off-policy learners build (uniform,
prioritized, sequence, Ape-X's) is allocated at the dtype, and every batch they sample
comes back at the env's. R2D2's Config, at its field limit, has no such field."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cue_env import CueParams, MaskedCue  # noqa: E402

from jaxrl import envs
from jaxrl.algorithms import actor_critic, apex, dqn, sac, td3

MINATAR = dqn.Config(
    env_id="Breakout-MinAtar",
    hidden_sizes=(16,),
    num_envs=4,
    num_steps=2,
    num_updates=2,
    batch_size=8,
    buffer_size=128,
    learning_starts=32,
    total_timesteps=160,
    target_update_period=4,
    num_evals=0,
    num_reports=0,
)


def test_compact_replay_stores_the_same_observations_and_learns_the_same_parameters():
    train = jax.jit(dqn.train, static_argnums=1)
    key = jax.random.key(3)
    full, compact = train(key, MINATAR), train(key, MINATAR.replace(replay_obs_dtype="bool"))
    for name in ("obs", "next_obs"):
        stored = compact.state.buffer.replay.data[name]
        assert stored.dtype == jnp.bool_
        np.testing.assert_array_equal(stored.astype(jnp.float32), full.state.buffer.replay.data[name])
    assert np.any(full.state.buffer.replay.data["obs"])  # frames, not an empty ring
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)  # noqa: E731
    jax.tree.map(close, full.state.params, compact.state.params)
    config = MINATAR.replace(replay_obs_dtype="bool")
    batch = jax.eval_shape(lambda: dqn.sample(compact.state, jax.random.key(0), config))
    assert batch["obs"].dtype == batch["next_obs"].dtype == jnp.float32


def shapes_of(module, sample, config):
    """The learner's initial state and a sampled batch, as shapes only (nothing compiled)."""
    state = jax.eval_shape(lambda: module.init(jax.random.key(0), config))
    return state, jax.eval_shape(lambda s: sample(s, jax.random.key(1), config), state)


@pytest.mark.parametrize(
    "module, sample, config",
    [
        (dqn, dqn.sample, MINATAR.replace(replay_obs_dtype="uint8")),  # prioritized (DQN's default)
        (sac, actor_critic.sample, sac.Config(env_id="Pendulum-v1", replay_obs_dtype="uint8")),
        (td3, actor_critic.sample, td3.Config(env_id="Pendulum-v1", memory="gru", replay_obs_dtype="uint8")),
    ],
    ids=["dqn-prioritized", "sac", "td3-sequence"],
)
def test_every_buffer_is_allocated_compact_and_sampled_at_the_envs_dtype(module, sample, config):
    state, batch = shapes_of(module, sample, config)
    stored = [x.dtype for path, x in jax.tree_util.tree_leaves_with_path(state.buffer) if "obs" in str(path[-1])]
    assert stored and set(stored) == {np.dtype(config.replay_obs_dtype)}
    leaves = batch.data if hasattr(batch, "data") else batch
    assert leaves["obs"].dtype == leaves["next_obs"].dtype == jnp.float32


def test_apex_learner_replay_is_compact():
    config = apex.Config(env_id="Breakout-MinAtar", hidden_sizes=(16,), replay_obs_dtype="bool")
    state = jax.eval_shape(lambda: apex.learner_init(jax.random.key(0), config))
    assert state.buffer.replay.data["obs"].dtype == state.buffer.replay.data["next_obs"].dtype == jnp.bool_


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(replay_obs_dtype="float16"), r"replay_obs_dtype must be one of \['bool', 'uint8', None\]"),
        (dict(replay_obs_dtype=np.uint8), "replay_obs_dtype must be one of"),
    ],
)
def test_bad_replay_obs_dtype_is_a_clear_error(overrides, message):
    with pytest.raises(ValueError, match=message):
        MINATAR.replace(**overrides)
    with pytest.raises(ValueError, match=message):
        sac.Config(env_id="Pendulum-v1", **overrides)


def test_a_structured_observation_is_refused():
    env_id = "jaxrl_test/MaskedCue-compact-v0"
    envs.register(env_id, lambda **overrides: (MaskedCue(), CueParams(**overrides)), replace=True)
    try:
        with pytest.raises(ValueError, match="replay_obs_dtype='bool' needs an array observation"):
            dqn.Config(env_id=env_id, replay_obs_dtype="bool")
    finally:
        envs.registry._REGISTRY.pop(env_id, None)
