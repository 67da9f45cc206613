"""Envs that pad episodes with steps that are not transitions (``info["valid"]`` False,
as envpool's reset step): collected as ``Trajectory.valid``, left out of every loss, not
counted in episode lengths, and refused by the algorithms that cannot leave them out.

``PaddedCartPole`` pads gymnax's CartPole as envpool does: the step that ends an episode
returns its last observation, and the next step ignores its action and returns the next
episode's first observation with reward 0 and ``valid=False``. "Left out" is checked the
strict way: whatever action and reward a padding step holds, the loss and its gradient
do not change.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from jaxrl import data, envs, rollout
from jaxrl.algorithms import a2c, impala, offpolicy, onpolicy, ppo, r2d2, sac
from jaxrl.buffers import replay


@struct.dataclass
class PaddedState:
    env_state: object
    pending_obs: jax.Array  # the next episode's first observation, returned by the padding step
    pending: jax.Array  # bool: the last step ended an episode


class PaddedCartPole:
    padding_steps = True

    def __init__(self):
        self._env, self._params = envs.make("CartPole-v1", max_steps_in_episode=20)
        self.name = "PaddedCartPole-v0"

    @property
    def default_params(self):
        return self._params

    def observation_space(self, params=None):
        return self._env.observation_space(self._params)

    def action_space(self, params=None):
        return self._env.action_space(self._params)

    def reset(self, key, params=None):
        obs, state = self._env.reset(key, self._params)
        return obs, PaddedState(state, obs, jnp.zeros((), bool))

    def step(self, key, state, action, params=None):
        obs, env_state, reward, terminated, truncated, info = self._env.step(key, state.env_state, action, self._params)
        pad = state.pending
        done = (terminated | truncated) & ~pad
        final = info["final_observation"]
        out_obs = jnp.where(pad, state.pending_obs, jnp.where(done, final, obs))
        new_state = PaddedState(
            env_state=jax.tree.map(lambda new, old: jnp.where(pad, old, new), env_state, state.env_state),
            pending_obs=jnp.where(done, obs, state.pending_obs),
            pending=done,
        )
        info = {"final_observation": out_obs, "valid": ~pad}
        return out_obs, new_state, jnp.where(pad, 0.0, reward), terminated & ~pad, truncated & ~pad, info


@pytest.fixture(scope="module", autouse=True)
def registered():
    envs.register("PaddedCartPole-v0", lambda: (PaddedCartPole(), PaddedCartPole().default_params), replace=True)
    yield


def test_spec_and_rollout_mark_the_padding_steps():
    """``valid`` is False exactly on the step after each episode end; episode lengths
    count real steps only (CartPole pushed one way: every episode ends within 20)."""
    env, params = envs.make("PaddedCartPole-v0")
    assert envs.spec(env, params).padding_steps and not envs.spec(*envs.make("CartPole-v1")).padding_steps
    wrapped = envs.EpisodeStatistics(env)
    obs, state = rollout.reset(wrapped, params, jax.random.key(0), 3)
    policy = lambda obs, carry, key: (jnp.zeros(obs.shape[0], jnp.int32), carry, {})  # noqa: E731
    trajectory, *_ = rollout.collect(wrapped, params, policy, state, obs, jax.random.key(1), 60)
    done, valid = np.asarray(trajectory.done), np.asarray(trajectory.valid)
    assert done.sum() >= 6
    expected = np.ones_like(valid)
    expected[1:] = ~done[:-1]
    np.testing.assert_array_equal(valid, expected)
    # A NumPy count of each episode's real steps.
    for lane in range(3):
        length = 0
        for t in range(60):
            length += int(valid[t, lane])
            if done[t, lane]:
                assert trajectory.episode_length[t, lane] == length
                length = 0


def test_masked_mean_against_numpy():
    rng = np.random.default_rng(0)
    x, mask = rng.normal(size=(5, 4)), rng.random((5, 4)) < 0.6
    np.testing.assert_allclose(rollout.masked_mean(jnp.asarray(x), jnp.asarray(mask)), x[mask].mean(), rtol=1e-6)
    np.testing.assert_allclose(rollout.masked_mean(jnp.asarray(x), None), x.mean(), rtol=1e-6)
    np.testing.assert_allclose(
        rollout.masked_mean(jnp.asarray(x), jnp.asarray(mask), axis=0),
        [x[:, j][mask[:, j]].mean() for j in range(4)],
        rtol=1e-6,
    )
    assert rollout.masked_mean(jnp.ones(3), jnp.zeros(3, bool)) == 0.0


SMALL = dict(env_id="PaddedCartPole-v0", num_envs=3, num_steps=32, hidden_sizes=(8,), num_reports=0)


def poisoned(trajectory, seed: int):
    """``trajectory`` with random actions and huge rewards at its padding steps."""
    rng = np.random.default_rng(seed)
    pad = ~np.asarray(trajectory.valid)
    action = np.where(pad, rng.integers(0, 2, pad.shape), np.asarray(trajectory.action)).astype(np.int32)
    reward = np.where(pad, rng.normal(size=pad.shape) * 1e3, np.asarray(trajectory.reward)).astype(np.float32)
    return trajectory.replace(action=jnp.asarray(action), reward=jnp.asarray(reward))


def onpolicy_trajectory(module, config):
    """``module``'s initial state and a rollout of it, each compiled as one program (op by
    op, their many small operations would each compile)."""
    state = jax.jit(module.init, static_argnums=1)(jax.random.key(0), config)
    trajectory = jax.jit(onpolicy.collect, static_argnums=3)(state, state.params, jax.random.key(1), config)[1]
    assert (~np.asarray(trajectory.valid)).sum() >= 2
    return state, trajectory


@pytest.mark.slow
@pytest.mark.parametrize("module", [ppo, a2c, impala], ids=["ppo", "a2c", "impala"])
def test_padding_steps_do_not_reach_the_onpolicy_losses(module):
    """PPO's, A2C's and IMPALA's (V-trace) losses and gradients on one rollout do not move when the padding
    steps' actions and rewards are replaced by garbage (and do move for real steps)."""
    config = module.Config(**SMALL)
    state, trajectory = onpolicy_trajectory(module, config)

    @jax.jit
    def loss_and_grad(trajectory):
        if module is ppo:
            advantage, target = ppo.compute_targets(state.params, trajectory, config)
            batch = {
                "obs": trajectory.obs,
                "action": trajectory.action,
                "log_prob": trajectory.extras["log_prob"],
                "value": trajectory.extras["value"],
                "advantage": advantage,
                "target": target,
                "valid": trajectory.valid,
            }
            batch = ppo.minibatch_rows(batch, trajectory, config)
            fn = lambda p: ppo.loss_fn(p, state.params["obs_stats"], batch, config)[0]  # noqa: E731
        else:
            value_next = onpolicy.bootstrap_value(state.params, trajectory, config)
            fn = lambda p: module.loss_fn(p, state.params["obs_stats"], trajectory, value_next, config)[0]  # noqa: E731
        return jax.value_and_grad(fn)(state.params["network"])

    reference = loss_and_grad(trajectory)
    for seed in range(2):
        jax.tree.map(
            lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
            reference,
            loss_and_grad(poisoned(trajectory, seed)),
        )
    real = trajectory.replace(reward=trajectory.reward + 100.0 * trajectory.valid)
    assert not np.allclose(reference[0], loss_and_grad(real)[0])


@pytest.mark.slow
def test_replay_weights_padding_steps_zero_and_the_critic_ignores_them():
    """Stored ``valid`` reaches sampled batches as weight 0; SAC's critic loss does not
    move when a padding transition's reward is garbage; DQN gives them the least
    priority."""
    rng = np.random.default_rng(0)
    rows, lanes = 16, 2
    valid = rng.random((rows, lanes)) < 0.7
    data = {
        "obs": rng.normal(size=(rows, lanes, 3)).astype(np.float32),
        "action": rng.normal(size=(rows, lanes, 1)).clip(-1, 1).astype(np.float32),
        "reward": rng.normal(size=(rows, lanes)).astype(np.float32),
        "terminated": np.zeros((rows, lanes), bool),
        "truncated": np.zeros((rows, lanes), bool),
        "next_obs": rng.normal(size=(rows, lanes, 3)).astype(np.float32),
        "valid": valid,
    }
    example = jax.tree.map(lambda x: jnp.asarray(x[0, 0]), data)
    buffer = replay.add_sequence(replay.init(example, rows * lanes, lanes), jax.tree.map(jnp.asarray, data))
    config = sac.Config(env_id="Pendulum-v1", batch_size=64, hidden_sizes=(8,))
    batch = jax.jit(offpolicy.sample, static_argnums=2)(buffer, jax.random.key(0), config)
    sampled_valid = np.asarray(batch["valid"])
    assert (~sampled_valid).any() and sampled_valid.any()
    np.testing.assert_array_equal(np.asarray(batch["weight"]), sampled_valid.astype(np.float32))

    state = jax.jit(sac.init, static_argnums=1)(jax.random.key(1), config)
    target = jnp.asarray(rng.normal(size=64).astype(np.float32))
    loss = jax.jit(lambda target: sac.critic_loss(state.critic_params, target, batch, config)[0])
    garbage = jnp.where(batch["valid"], target, 1e4)
    np.testing.assert_allclose(loss(target), loss(garbage), rtol=1e-6)
    assert not np.isclose(loss(target), loss(jnp.where(batch["valid"], 1e4, target)))


def test_algorithms_that_cannot_leave_padding_out_refuse_it():
    with pytest.raises(ValueError, match="memory='lstm'.*not transitions"):
        r2d2.preset("PaddedCartPole-v0")
    with pytest.raises(ValueError, match="memory='gru'.*not transitions"):
        ppo.Config(env_id="PaddedCartPole-v0", memory="gru")
    act = lambda params, obs, carry, key: (jnp.zeros(obs.shape[0], jnp.int32), carry)  # noqa: E731
    with pytest.raises(ValueError, match="steps that are not"):
        data.collect_dataset(act, None, "PaddedCartPole-v0", jax.random.key(0), 8, 2)
