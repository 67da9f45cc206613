"""Partial observability: ``FrameStack`` against a plain Python history loop over the
unwrapped env's stream (terminations and truncations included), on gymnax and
Gymnasium envs and MinAtar images; the masked ids against the full envs step by step;
``register`` with a user's env that trains; history arguments through ``make``, the
algorithms and the CLI; and clear errors.

Compiles dominate on a 2-core CPU: one small jitted rollout per env object, shared
through a module-level cache.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces

from jaxrl import envs
from jaxrl.algorithms import dqn, ppo
from jaxrl.workflow import cli

N, T, LIMIT = 4, 40, 12  # envs, steps, time limit: random CartPole both terminates and truncates in T steps
# No evaluation branch to compile: the tests that train read the training state only.
TINY = dict(num_envs=2, total_timesteps=64, hidden_sizes=(8,), num_evals=0, eval_episodes=1, num_reports=0)


# ----------------------------------------------------------------------------- rollouts


@functools.partial(jax.jit, static_argnums=0)
def _rollout(env, params, reset_keys, step_keys, actions):
    """``N`` lanes for ``T`` steps: the reset observations ``[N, ...]`` and per step
    ``(obs, reward, terminated, truncated, final_observation)``, each ``[T, N, ...]``."""
    obs0, state = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)

    def body(state, inputs):
        keys, action = inputs
        obs, state, reward, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            keys, state, action, params
        )
        return state, (obs, reward, terminated, truncated, info["final_observation"])

    _, stream = jax.lax.scan(body, state, (step_keys, actions))
    return obs0, stream


def rollout(env, params, seed: int = 0, steps: int = T, lanes: int = N):
    """Run ``env`` on random actions; the same ``seed`` gives the same keys and actions
    for every env of the same action space. Returns NumPy ``(obs0, stream, actions)``."""
    rng = np.random.default_rng(seed)
    space = env.action_space(params)
    if isinstance(space, spaces.Discrete):
        actions = rng.integers(0, space.n, (steps, lanes)).astype(np.int32)
    else:
        low, high = np.broadcast_to(space.low, space.shape), np.broadcast_to(space.high, space.shape)
        actions = rng.uniform(low, high, (steps, lanes) + tuple(space.shape)).astype(np.float32)
    key = jax.random.key(seed)
    reset_keys = jax.random.split(jax.random.fold_in(key, 0), lanes)
    step_keys = jax.random.split(jax.random.fold_in(key, 1), steps * lanes).reshape(steps, lanes)
    obs0, stream = _rollout(env, params, reset_keys, step_keys, jnp.asarray(actions))
    return np.asarray(obs0), tuple(np.asarray(x) for x in stream), actions


# ----------------------------------------------------------------------------- reference


def reference_stacks(obs0, stream, actions, k, num_actions, stack_action, stack_reward):
    """Every stacked observation and final observation rebuilt from the unwrapped env's
    stream, one lane at a time: a list of frames per episode, the last ``k`` of them
    concatenated with zero frames in front. ``num_actions`` is None for Box actions."""
    obs, reward, terminated, truncated, final_obs = stream

    def frame(o, action=None, r=None):
        parts = [np.asarray(o, np.float64).reshape(-1)]
        if stack_action:
            size = num_actions if num_actions is not None else np.size(actions[0, 0])
            if action is None:
                parts.append(np.zeros(size))
            elif num_actions is not None:
                parts.append(np.eye(num_actions)[int(action)])
            else:
                parts.append(np.asarray(action, np.float64).reshape(-1))
        if stack_reward:
            parts.append(np.zeros(1) if r is None else np.array([r], np.float64))
        return np.concatenate(parts)

    def stacked(history):
        frames = [np.zeros_like(history[0])] * max(0, k - len(history)) + history[-k:]
        return np.concatenate(frames)

    steps, lanes = reward.shape
    want_obs0, want_obs, want_final = [], [[None] * lanes for _ in range(steps)], [[None] * lanes for _ in range(steps)]
    for b in range(lanes):
        history = [frame(obs0[b])]
        want_obs0.append(stacked(history))
        for t in range(steps):
            last = frame(final_obs[t, b], actions[t, b], reward[t, b])
            want_final[t][b] = stacked(history + [last])
            history = [frame(obs[t, b])] if terminated[t, b] or truncated[t, b] else history + [last]
            want_obs[t][b] = stacked(history)
    return np.stack(want_obs0), np.array(want_obs), np.array(want_final)


def check_against_reference(env_id, env_kwargs, k, stack_action, stack_reward, seed=0, steps=T):
    """FrameStack made through ``make`` equals the reference on the plain env's stream,
    with rewards and flags passed through; returns the plain stream."""
    plain, params = envs.make(env_id, **env_kwargs)
    stacked, stacked_params = envs.make(
        env_id, **env_kwargs, frame_stack=k, stack_action=stack_action, stack_reward=stack_reward
    )
    obs0, stream, actions = rollout(plain, params, seed, steps)
    got_obs0, got_stream, _ = rollout(stacked, stacked_params, seed, steps)
    space = plain.action_space(params)
    num_actions = int(space.n) if isinstance(space, spaces.Discrete) else None
    want_obs0, want_obs, want_final = reference_stacks(
        obs0, stream, actions, k, num_actions, stack_action, stack_reward
    )
    np.testing.assert_allclose(got_obs0, want_obs0, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got_stream[0], want_obs, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got_stream[4], want_final, rtol=1e-6, atol=1e-6)
    for got, want in zip(got_stream[1:4], stream[1:4]):  # reward, terminated, truncated
        np.testing.assert_array_equal(got, want)
    assert envs.spec(stacked, stacked_params).obs_shape == want_obs0.shape[1:]
    return stream


# ----------------------------------------------------------------------------- FrameStack


@pytest.mark.parametrize("stack_action", [False, True])
@pytest.mark.parametrize("stack_reward", [False, True])
def test_frame_stack_cartpole_matches_reference(stack_action, stack_reward):
    stream = check_against_reference("CartPole-v1", {"max_steps_in_episode": LIMIT}, 3, stack_action, stack_reward)
    _, _, terminated, truncated, _ = stream
    assert terminated.any() and truncated.any()  # both kinds of episode end were checked


def test_frame_stack_box_actions_match_reference():
    check_against_reference("Pendulum-v1", {"max_steps_in_episode": LIMIT}, 3, True, True, steps=20)


def test_frame_stack_gymnasium_bridge():
    pytest.importorskip("gymnasium")
    env, params = envs.make("gymnasium:CartPole-v1", frame_stack=2)  # frame_stack never reaches gymnasium.make
    assert envs.spec(env, params).obs_shape == (8,)
    obs0, stream, _ = rollout(env, params, steps=3, lanes=3)
    assert obs0.shape == (3, 8) and stream[0].shape == (3, 3, 8)
    np.testing.assert_array_equal(obs0[:, :4], 0.0)  # nothing before the first observation
    # Host envs are seeded from the keys, so the plain bridge replays the same stream.
    stream = check_against_reference("gymnasium:CartPole-v1", {"max_steps_in_episode": LIMIT}, 2, True, True, steps=20)
    assert stream[3].any()


def test_frame_stack_minatar_stacks_channels():
    plain, params = envs.make("Breakout-MinAtar")
    env, _ = envs.make("Breakout-MinAtar", frame_stack=2)
    channels = envs.spec(plain, params).obs_shape[-1]
    assert envs.spec(env, params).obs_shape == (10, 10, 2 * channels)
    obs0, stream, _ = rollout(plain, params, steps=2, lanes=2)
    got_obs0, got_stream, _ = rollout(env, params, steps=2, lanes=2)
    assert got_obs0.shape == (2, 10, 10, 2 * channels)
    np.testing.assert_array_equal(got_obs0[..., :channels], 0)
    np.testing.assert_array_equal(got_obs0[..., channels:], obs0)
    assert not (stream[2].any() or stream[3].any())  # two steps of Breakout never end it
    np.testing.assert_array_equal(got_stream[0][0], np.concatenate([obs0, stream[0][0]], axis=-1))
    np.testing.assert_array_equal(got_stream[0][1], np.concatenate([stream[0][0], stream[0][1]], axis=-1))
    for name in ("stack_action", "stack_reward"):
        with pytest.raises(ValueError, match=name):
            envs.make("Breakout-MinAtar", frame_stack=2, **{name: True})
        with pytest.raises(ValueError, match=name):
            envs.FrameStack(plain, 2, **{name: True})


def test_frame_stack_scalar_observations_are_vectors():
    env, params = envs.make("FrozenLake-misc", frame_stack=3)
    assert envs.spec(env, params).obs_shape == (3,)
    obs0, _, _ = rollout(env, params, steps=1, lanes=1)
    assert obs0.shape == (1, 3)


# ----------------------------------------------------------------------------- masked ids


@pytest.mark.parametrize(
    "masked_id, full_id, indices",
    [("MaskedCartPole-v1", "CartPole-v1", [0, 2]), ("MaskedPendulum-v1", "Pendulum-v1", [0, 1])],
)
def test_masked_ids_select_entries_of_the_full_env(masked_id, full_id, indices):
    overrides = {"max_steps_in_episode": LIMIT}
    full, full_params = envs.make(full_id, **overrides)
    env, params = envs.make(masked_id, **overrides)
    assert params == full_params
    assert params.max_steps_in_episode == LIMIT  # overrides reach the wrapped env's EnvParams
    spec, full_spec = envs.spec(env, params), envs.spec(full, full_params)
    assert spec.obs_shape == (2,)
    assert spec_without_obs(spec) == spec_without_obs(full_spec)  # actions, time limit unchanged
    obs0, stream, _ = rollout(env, params, steps=20)
    full_obs0, full_stream, _ = rollout(full, full_params, steps=20)
    np.testing.assert_array_equal(obs0, full_obs0[:, indices])
    np.testing.assert_array_equal(stream[0], full_stream[0][..., indices])
    np.testing.assert_array_equal(stream[4], full_stream[4][..., indices])
    for got, want in zip(stream[1:4], full_stream[1:4]):
        np.testing.assert_array_equal(got, want)
    assert full_stream[3].any()  # a final observation at a boundary was compared


def spec_without_obs(spec):
    return {
        name: np.asarray(value).tolist() if isinstance(value, np.ndarray) else value
        for name, value in vars(spec).items()
        if not name.startswith("obs")
    }


def test_masked_ids_are_registered_and_default_params():
    ids = envs.registered_ids()
    assert ids[:2] == ["MaskedCartPole-v1", "MaskedPendulum-v1"]  # registered ids first
    assert "CartPole-v1" in ids
    _, params = envs.make("MaskedCartPole-v1", max_steps_in_episode=200)
    assert params.max_steps_in_episode == 200
    with pytest.raises(ValueError, match="unknown env parameter"):
        envs.make("MaskedCartPole-v1", max_steps=5)


def test_memory_chain_bsuite():
    env, params = envs.make("MemoryChain-bsuite")
    spec = envs.spec(env, params)
    assert spec.obs_shape == (3,) and spec.discrete and spec.num_actions == 2
    assert params.memory_length == 5
    stacked, params = envs.make("MemoryChain-bsuite", memory_length=3, frame_stack=3)
    assert envs.spec(stacked, params).obs_shape == (9,)


# ----------------------------------------------------------------------------- register


@struct.dataclass
class TinyParams:
    max_steps_in_episode: int = 10


@struct.dataclass
class TinyState:
    time: jax.Array
    target: jax.Array


class Tiny(environment.Environment):
    """Reward 1 for naming which of two random entries of the observation is larger."""

    @property
    def default_params(self):
        return TinyParams()

    def reset_env(self, key, params):
        obs = jax.random.uniform(key, (2,), minval=-1.0, maxval=1.0)
        return obs, TinyState(jnp.zeros((), jnp.int32), jnp.argmax(obs).astype(jnp.int32))

    def step_env(self, key, state, action, params):
        reward = (action == state.target).astype(jnp.float32)
        obs, next_state = self.reset_env(key, params)
        return obs, next_state.replace(time=state.time + 1), reward, jnp.array(False), {}

    def observation_space(self, params):
        return spaces.Box(-1.0, 1.0, (2,), jnp.float32)

    def action_space(self, params=None):
        return spaces.Discrete(2)


@pytest.fixture
def registry(monkeypatch):
    """A private copy of the id registry, so ids registered by a test do not outlive it."""
    monkeypatch.setattr(envs.registry, "_REGISTRY", dict(envs.registry._REGISTRY))
    monkeypatch.setattr(envs.registry, "_PREFIXES", dict(envs.registry._PREFIXES))


def test_register_a_users_env_trains(registry):
    envs.register("jaxrl_test/Tiny-v0", lambda **overrides: (Tiny(), TinyParams(**overrides)))
    env, params = envs.make("jaxrl_test/Tiny-v0", max_steps_in_episode=4, frame_stack=2)
    assert params.max_steps_in_episode == 4
    assert envs.spec(env, params).obs_shape == (4,)
    config = ppo.Config(env_id="jaxrl_test/Tiny-v0", num_steps=8, **TINY)
    out = jax.jit(ppo.train)(jax.random.key(0), config)
    assert all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(out.state.params))
    env, params = envs.make("jaxrl_test/Tiny-v0")
    obs, _ = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(jax.random.key(1), 2), params)
    action, _ = ppo.act(out.state.params, obs, ppo.initial_carry(config, 2), jax.random.key(2), config)
    assert action.shape == (2,)


def test_register_errors(registry):
    factory = lambda **overrides: (Tiny(), TinyParams(**overrides))
    envs.register("jaxrl_test/Tiny-v0", factory)
    with pytest.raises(ValueError, match="already registered"):
        envs.register("jaxrl_test/Tiny-v0", factory)
    with pytest.raises(ValueError, match="already registered"):
        envs.register("CartPole-v1", factory)  # gymnax's ids too
    with pytest.raises(ValueError, match="already registered"):
        envs.register("MaskedCartPole-v1", factory)
    envs.register("jaxrl_test/Tiny-v0", factory, replace=True)
    envs.register("CartPole-v1", factory, replace=True)  # shadows gymnax's
    assert isinstance(envs.make("CartPole-v1")[0], Tiny)
    assert envs.registered_ids().count("CartPole-v1") == 1
    with pytest.raises(ValueError, match="gymnasium:"):
        envs.register("gymnasium:Tiny-v0", factory)
    with pytest.raises(TypeError, match="callable"):
        envs.register("jaxrl_test/Other-v0", None)
    with pytest.raises(ValueError, match="Did you mean 'jaxrl_test/Tiny-v0'"):
        envs.make("jaxrl_test/Tiny-v1")
    with pytest.raises(ValueError, match="Did you mean 'MaskedCartPole-v1'"):
        envs.check_env_id("MaskedCartPol-v1")


def test_register_a_prefix_for_a_whole_suite(registry):
    """``"tiny:<n>"``: the factory gets the name after the prefix; ``check`` refuses
    unknown names before any env is built; an algorithm config takes the ids."""
    built = []

    def factory(name, **overrides):
        built.append(name)
        return Tiny(), TinyParams(**overrides)

    def check(name):
        if name not in ("a", "b"):
            raise ValueError(f"no tiny env {name!r}")

    envs.register("tiny:", factory, check=check)
    assert "tiny:" in envs.registered_prefixes()
    env, params = envs.make("tiny:b", max_steps_in_episode=5)
    assert isinstance(env, Tiny) and params.max_steps_in_episode == 5 and built == ["b"]
    with pytest.raises(ValueError, match="no tiny env 'c'"):
        envs.make("tiny:c")
    assert built == ["b"]  # refused by check, never built
    assert ppo.Config(env_id="tiny:a", num_steps=8, **TINY).env_id == "tiny:a"
    with pytest.raises(ValueError, match="already registered"):
        envs.register("tiny:", factory)
    envs.register("tiny:", factory, replace=True)  # check dropped: the factory decides
    envs.make("tiny:anything")
    with pytest.raises(ValueError, match="belong to that registered prefix"):
        envs.register("tiny:x", lambda **overrides: (Tiny(), TinyParams()))
    with pytest.raises(ValueError, match="check applies to prefixes"):
        envs.register("jaxrl_test/Tiny-v0", lambda **overrides: (Tiny(), TinyParams()), check=check)
    with pytest.raises(ValueError, match="unknown env prefix 'nope:'.*'tiny:'"):
        envs.make("nope:a")


# ----------------------------------------------------------------------------- through algorithms and the CLI


@pytest.mark.slow
def test_ppo_and_dqn_train_on_the_stacked_observation():
    """Two frames of MaskedCartPole's 2 observations, each with the one-hot previous
    action (2): both agents' first layers read 8 inputs, and training gives finite losses."""
    env_kwargs = {"frame_stack": 2, "stack_action": True}
    tiny = {**TINY, "hidden_sizes": (16,)}
    config = ppo.Config(env_id="MaskedCartPole-v1", env_kwargs=env_kwargs, num_steps=8, **tiny)
    assert envs.config_spec(config).obs_shape == (8,)
    ppo_out = jax.jit(ppo.train)(jax.random.key(0), config)
    config = dqn.Config(
        env_id="MaskedCartPole-v1",
        env_kwargs=env_kwargs,
        **tiny,
        num_steps=1,
        batch_size=4,
        buffer_size=32,
        learning_starts=8,
    )
    dqn_out = jax.jit(dqn.train)(jax.random.key(0), config)
    for out, loss in ((ppo_out, "value_loss"), (dqn_out, "loss")):
        kernels = [leaf.shape for leaf in jax.tree.leaves(out.state.params) if leaf.ndim == 2]
        assert (8, 16) in kernels and all(shape[0] in (8, 16) for shape in kernels), kernels
        assert np.isfinite(np.asarray(out.metrics[loss])[-1])  # DQN reports NaN before learning starts


def test_cli_env_params_reach_make():
    parser = cli.build_parser()
    args = parser.parse_args(
        [
            "train",
            "ppo",
            "--env",
            "MaskedCartPole-v1",
            "--env-param",
            "frame_stack=4",
            "--env-param",
            "stack_action=true",
        ]
    )
    config = cli.make_config(ppo, args)
    assert dict(config.env_kwargs) == {"frame_stack": 4, "stack_action": True}
    assert envs.config_spec(config).obs_shape == (16,)
    args = parser.parse_args(["train", "ppo", "--env", "MaskedCartPole-v1", "--env-param", "frame_stack=0"])
    with pytest.raises(cli.UsageError, match="frame_stack must be an integer >= 1"):
        cli.make_config(ppo, args)


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"frame_stack": 0}, "frame_stack must be an integer >= 1"),
        ({"frame_stack": 2.0}, "frame_stack must be an integer >= 1"),
        ({"frame_stack": True}, "frame_stack must be an integer >= 1"),
        ({"frame_stack": "2"}, "frame_stack must be an integer >= 1"),
        ({"stack_action": 1}, "stack_action must be a bool"),
        ({"stack_reward": "yes"}, "stack_reward must be a bool"),
    ],
)
def test_bad_history_arguments(kwargs, message):
    for env_id in ("CartPole-v1", "MaskedCartPole-v1"):
        with pytest.raises(ValueError, match=message):
            envs.make(env_id, **kwargs)
    with pytest.raises(ValueError, match=message):
        ppo.Config(env_id="MaskedCartPole-v1", env_kwargs=kwargs)


def test_bad_wrapper_arguments():
    env, params = envs.make("CartPole-v1")
    with pytest.raises(ValueError, match="num_frames must be an integer >= 1"):
        envs.FrameStack(env, 0)
    with pytest.raises(ValueError, match="stack_action must be a bool"):
        envs.FrameStack(env, 2, stack_action="no")
    with pytest.raises(ValueError, match="indices must be a non-empty sequence"):
        envs.MaskObservation(env, [])
    with pytest.raises(ValueError, match="indices must be a non-empty sequence"):
        envs.MaskObservation(env, [-1])
    with pytest.raises(ValueError, match="more than 4 entries"):
        envs.MaskObservation(env, [4])
    with pytest.raises(ValueError, match="vector observation"):
        envs.MaskObservation(envs.make("Breakout-MinAtar")[0], [0])
    # One-step frame stack with nothing extra is the env itself.
    assert envs.make("CartPole-v1", frame_stack=1)[0].__class__ is env.__class__
