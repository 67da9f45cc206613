"""DDPG, TD3 and SAC with pixel encoders (``network="nature_cnn"`` / ``"impala_cnn"``)
on a small image env defined and registered here with the gymnax API: a few training
iterations run, parameters stay finite, the networks have the shapes the layer
arithmetic gives, and the MLP critic keeps its layout. No learning threshold: a pixel
learning test does not fit a 2-core CI budget."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces

from jaxrl import envs
from jaxrl.algorithms import ddpg, sac, td3

# Compiled optimised: at LLVM -O0 the convolutions' run costs far more than the compile saves.
pytestmark = [pytest.mark.slow, pytest.mark.optimised]

SIZE = 36  # the smallest image the Nature CNN takes: 36 -> 8 -> 3 -> 1
BLOCK = 3  # the point and the goal are drawn as 3x3 squares


@struct.dataclass
class PixelParams:
    max_steps_in_episode: int = 10


@struct.dataclass
class PixelState:
    position: jax.Array  # [2] in [-1, 1]
    goal: jax.Array  # [2] in [-1, 1]
    time: jax.Array


def draw(position: jax.Array) -> jax.Array:
    """A ``[SIZE, SIZE]`` bool image with a ``BLOCK`` square at ``position`` in ``[-1, 1]^2``."""
    corner = jnp.round((position + 1.0) / 2.0 * (SIZE - BLOCK)).astype(jnp.int32)
    pixels = jnp.arange(SIZE)
    rows = (pixels >= corner[0]) & (pixels < corner[0] + BLOCK)
    cols = (pixels >= corner[1]) & (pixels < corner[1] + BLOCK)
    return rows[:, None] & cols[None, :]


class PointPixels(environment.Environment):
    """A point moves by ``0.2 * action`` (``action`` in ``[-1, 1]^2``) toward a goal
    drawn at reset; reward ``-|position - goal|``. The observation is a uint8 image
    ``[SIZE, SIZE, 3]``: the point in channel 0, the goal in channel 1 (255 where
    drawn), channel 2 empty."""

    @property
    def default_params(self):
        return PixelParams()

    def _obs(self, state):
        image = jnp.stack([draw(state.position), draw(state.goal), jnp.zeros((SIZE, SIZE), bool)], axis=-1)
        return image.astype(jnp.uint8) * 255

    def reset_env(self, key, params):
        position_key, goal_key = jax.random.split(key)
        state = PixelState(
            position=jax.random.uniform(position_key, (2,), jnp.float32, -1.0, 1.0),
            goal=jax.random.uniform(goal_key, (2,), jnp.float32, -1.0, 1.0),
            time=jnp.zeros((), jnp.int32),
        )
        return self._obs(state), state

    def step_env(self, key, state, action, params):
        position = jnp.clip(state.position + 0.2 * jnp.clip(action, -1.0, 1.0), -1.0, 1.0)
        reward = -jnp.linalg.norm(position - state.goal)
        state = state.replace(position=position, time=state.time + 1)
        return self._obs(state), state, reward, jnp.zeros((), bool), {}

    def observation_space(self, params=None):
        return spaces.Box(0, 255, (SIZE, SIZE, 3), jnp.uint8)

    def action_space(self, params=None):
        return spaces.Box(-1.0, 1.0, (2,), jnp.float32)


class PointPixelsDict(PointPixels):
    """:class:`PointPixels` with a structured observation: ``{"pixels": the image,
    "position": the point's coordinates [2]}``."""

    def _obs(self, state):
        return {"pixels": super()._obs(state), "position": state.position}

    def observation_space(self, params=None):
        return spaces.Dict(
            {"pixels": super().observation_space(params), "position": spaces.Box(-1.0, 1.0, (2,), jnp.float32)}
        )


ARRAY_ID, DICT_ID = "jaxrl_test/PointPixels-v0", "jaxrl_test/PointPixelsDict-v0"


@pytest.fixture(scope="module", autouse=True)
def registered():
    envs.register(ARRAY_ID, lambda **overrides: (PointPixels(), PixelParams(**overrides)), replace=True)
    envs.register(DICT_ID, lambda **overrides: (PointPixelsDict(), PixelParams(**overrides)), replace=True)
    yield
    envs.registry._REGISTRY.pop(ARRAY_ID, None)
    envs.registry._REGISTRY.pop(DICT_ID, None)


def test_the_env_draws_the_point_and_the_goal():
    env, params = envs.make(ARRAY_ID)
    obs, state = env.reset(jax.random.key(0), params)
    assert obs.shape == (SIZE, SIZE, 3) and obs.dtype == jnp.uint8
    assert int(jnp.sum(obs[..., 0] == 255)) == BLOCK * BLOCK and int(jnp.sum(obs[..., 1] == 255)) == BLOCK * BLOCK
    assert int(jnp.sum(obs[..., 2])) == 0


# A tiny budget: 2 envs x 4 steps x 3 iterations, the first one random, 2 updates of 8
# per learning iteration; one dense layer of 16 after the convolutions. No evaluation:
# its branch would be compiled into each program, and the test acts itself.
TINY = dict(
    num_envs=2,
    num_steps=4,
    num_updates=2,
    batch_size=8,
    buffer_size=64,
    learning_starts=8,
    total_timesteps=24,
    hidden_sizes=(16,),
    num_evals=0,
    num_reports=0,
)
NATURE_FEATURES = 1 * 1 * 64  # 36 -> (36 - 8) / 4 + 1 = 8 -> (8 - 4) / 2 + 1 = 3 -> 3 - 3 + 1 = 1
IMPALA_FEATURES = 5 * 5 * 32  # 36 -> 18 -> 9 -> 5 (same-padded pools of stride 2)
CASES = [  # (module, network, env id, actor features, critic first-layer inputs)
    (sac, "nature_cnn", ARRAY_ID, NATURE_FEATURES, NATURE_FEATURES + 2),
    (ddpg, "nature_cnn", ARRAY_ID, NATURE_FEATURES, NATURE_FEATURES + 2),
    (td3, "nature_cnn", DICT_ID, NATURE_FEATURES + 2, NATURE_FEATURES + 2 + 2),
    (sac, "impala_cnn", DICT_ID, IMPALA_FEATURES + 2, IMPALA_FEATURES + 2 + 2),
]


@pytest.mark.parametrize(
    "module, network, env_id, actor_in, critic_in",
    CASES,
    ids=["sac-nature", "ddpg-nature", "td3-nature-dict", "sac-impala-dict"],
)
def test_pixel_encoders_train(module, network, env_id, actor_in, critic_in):
    config = module.Config(env_id=env_id, network=network, **TINY)
    out = jax.jit(module.train, static_argnames="config")(jax.random.key(0), config)
    state, metrics = out.state, jax.tree.map(np.asarray, out.metrics)
    assert np.isfinite(metrics["critic_loss"][-1]) and np.isfinite(metrics["actor_loss"][-1])
    for params in (state.params, state.critic_params, state.target_params):
        assert all(np.all(np.isfinite(leaf)) for leaf in jax.tree.leaves(params))
    actor, critic = state.params["actor"]["params"], state.critic_params["params"]
    num_critics = 1 if module is ddpg else 2
    encoder = "NatureEncoder_0" if network == "nature_cnn" else "ImpalaEncoder_0"
    assert actor["PixelCNN_0"]["MLP_0"]["Dense_0"]["kernel"].shape == (actor_in, 16)
    assert encoder in actor["PixelCNN_0"]["encoder"]
    # Each critic encodes the image with its own convolutions, then the action joins.
    assert critic["MLP_0"]["Dense_0"]["kernel"].shape == (num_critics, critic_in, 16)
    first_conv = critic["encoder"][encoder]["Conv_0" if network == "nature_cnn" else "ImpalaStack_0"]
    assert jax.tree.leaves(first_conv)[0].shape[0] == num_critics
    obs = jax.tree.map(lambda x: x[:2], state.obs)
    action, _ = module.act(state.params, obs, (), jax.random.key(1), config, deterministic=True)
    assert action.shape == (2, 2) and np.all(np.abs(np.asarray(action)) <= 1.0)


def test_the_mlp_critic_keeps_its_layout():
    """``network="mlp"``: no encoder module in the critic, the first dense layer on the
    flattened observation and the action, as before pixel encoders existed."""
    config = sac.Config(env_id="Pendulum-v1", hidden_sizes=(16,), batch_size=8, buffer_size=64)
    critic = jax.eval_shape(lambda key: sac.init(key, config), jax.random.key(0)).critic_params["params"]
    assert set(critic) == {"MLP_0", "Dense_0"} and critic["MLP_0"]["Dense_0"]["kernel"].shape == (2, 3 + 1, 16)
