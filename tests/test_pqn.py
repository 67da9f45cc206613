"""PQN: Q(lambda) targets against a NumPy backward loop, the targets of a rollout
bootstrapping from the final observation, the LayerNorm option, recurrent PQN's memory
against a step-by-step loop, bad settings, and learning CartPole."""

import custom_torsos
import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import networks, returns
from jaxrl.algorithms import pqn
from jaxrl.types import Trajectory

TINY = dict(num_envs=2, num_steps=8, num_minibatches=2, hidden_sizes=(8,), num_evals=1, eval_episodes=1, num_reports=0)


def numpy_q_lambda(r, q_next, term, trunc, gamma, lam):
    """Peng's Q(lambda) written as the backward loop of the paper's appendix, per column:
    the sequence end and truncations bootstrap from ``max q_next``, terminations stop."""
    T = r.shape[0]
    value_next = q_next.max(axis=-1)
    out = np.zeros_like(r)
    following = value_next[-1]  # G_{T} is replaced by the last step's bootstrap
    for t in reversed(range(T)):
        if t == T - 1 or term[t] or trunc[t]:
            following = value_next[t]
        out[t] = r[t] + gamma * (1.0 - term[t]) * ((1.0 - lam) * value_next[t] + lam * following)
        following = out[t]
    return out


@pytest.mark.parametrize("seed", range(4))
def test_q_lambda_targets_match_a_numpy_loop(seed):
    rng = np.random.default_rng(seed)
    T, N, A = 13, 5, 3
    r = rng.normal(size=(T, N)).astype(np.float32)
    q_next = rng.normal(size=(T, N, A)).astype(np.float32)
    term = rng.random((T, N)) < 0.15
    trunc = ~term & (rng.random((T, N)) < 0.15)
    term[-1, 0], trunc[-2, 1] = True, True  # an end at the last step and one just before it
    gamma, lam = 0.97, [0.0, 0.5, 0.95, 1.0][seed]
    got = jax.jit(returns.q_lambda_targets)(r, q_next, term, trunc, gamma, lam)
    expected = np.stack(
        [numpy_q_lambda(r[:, n], q_next[:, n], term[:, n], trunc[:, n], gamma, lam) for n in range(N)], 1
    )
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_q_lambda_targets_check_shapes():
    with pytest.raises(AssertionError):
        returns.q_lambda_targets(
            jnp.zeros((4, 2)), jnp.zeros((4, 2)), jnp.zeros((4, 2), bool), jnp.zeros((4, 2), bool), 0.9, 0.5
        )


def random_trajectory(config, key, T, N):
    """A rollout of random observations whose ``next_obs`` differs from the next step's
    ``obs`` where an episode ended (the final observation against the reset one)."""
    keys = jax.random.split(key, 5)
    obs = jax.random.normal(keys[0], (T + 1, N, 4))
    final = jax.random.normal(keys[1], (T, N, 4))
    term = jax.random.uniform(keys[2], (T, N)) < 0.15
    trunc = ~term & (jax.random.uniform(keys[3], (T, N)) < 0.15)
    next_obs = jnp.where((term | trunc)[..., None], final, obs[1:])
    zeros = jnp.zeros((T, N))
    return Trajectory(
        obs=obs[:-1],
        action=jax.random.randint(keys[4], (T, N), 0, 2),
        reward=jax.random.normal(keys[4], (T, N)),
        terminated=term,
        truncated=trunc,
        next_obs=next_obs,
        episode_return=zeros,
        episode_length=zeros.astype(jnp.int32),
        extras={"carry": pqn.initial_carry(config, N)},
    )


def test_targets_bootstrap_from_the_final_observation():
    """A rollout's targets are Q(lambda) on the rewards times ``reward_scale`` with the
    greedy values of ``next_obs`` (the final observation at a truncation), from the
    params given, computed here with the network called on its own."""
    config = pqn.Config(lambda_=0.8, reward_scale=0.5, **TINY)
    params = pqn.init(jax.random.key(0), config).params["network"]
    trajectory = random_trajectory(config, jax.random.key(1), 16, 3)
    got = pqn.targets(params, trajectory, config)
    q_next = np.asarray(pqn.make_network(config).apply(params, trajectory.next_obs))
    reward, term, trunc = (np.asarray(x) for x in (trajectory.reward, trajectory.terminated, trajectory.truncated))
    expected = np.stack(
        [numpy_q_lambda(0.5 * reward[:, n], q_next[:, n], term[:, n], trunc[:, n], 0.99, 0.8) for n in range(3)], 1
    )
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_recurrent_q_values_follow_each_env_step_by_step():
    """Recurrent PQN's minibatch sequences and next-observation values, against the
    network stepped one observation at a time with the memory reset where episodes
    begin: the stored carry and the sequence rows carry the same memory."""
    config = pqn.Config(memory="gru", memory_size=8, sequence_length=4, **TINY)
    T, N = 8, 2
    params = pqn.init(jax.random.key(0), config).params["network"]
    trajectory = random_trajectory(config, jax.random.key(2), T, N)
    network = pqn.make_network(config)
    carry, carries, q_steps, q_next_steps = pqn.initial_carry(config, N), [], [], []
    for t in range(T):  # the actor's loop: store the memory entering each step, reset after an end
        carries.append(carry)
        q, next_carry = network.apply(params, trajectory.obs[t][None], carry=carry)
        q_next, _ = network.apply(params, trajectory.next_obs[t][None], carry=next_carry)
        q_steps.append(q[0])
        q_next_steps.append(q_next[0])
        done = np.asarray(trajectory.terminated[t] | trajectory.truncated[t])
        carry = jnp.where(done[:, None], 0.0, next_carry)
    trajectory = trajectory.replace(extras={"carry": jnp.stack(carries)})
    np.testing.assert_allclose(pqn.next_q_values(params, trajectory, config), np.stack(q_next_steps), atol=1e-5)
    rows = pqn.minibatch_rows(trajectory, jnp.zeros((T, N)), config)
    assert rows["obs"].shape == (N * T // 4, 4, 4) and rows["carry"].shape == (N * T // 4, 8)
    q_rows = pqn.rows_q_values(params, rows, config)  # [N * T / L, L, A]: env-major chunks
    expected = np.swapaxes(np.stack(q_steps), 0, 1).reshape(N * T // 4, 4, 2)
    np.testing.assert_allclose(q_rows, expected, atol=1e-5)


def test_layer_norm_in_every_torso():
    """``layer_norm`` normalises before each activation of the MLP and the MinAtar CNN,
    and after a torso of the user's; without it there is none."""

    def norms(config):
        params = jax.eval_shape(lambda key: pqn.init(key, config), jax.random.key(0)).params["network"]
        return [path for path in flax.traverse_util.flatten_dict(params) if any("LayerNorm" in p for p in path)]

    assert len(norms(pqn.Config(**TINY))) == 2  # one layer of 8: scale and bias
    assert not norms(pqn.Config(layer_norm=False, **TINY))
    assert len(norms(pqn.Config(**{**TINY, "hidden_sizes": (8, 8)}))) == 4
    assert len(norms(pqn.Config(env_id="Breakout-MinAtar", network="cnn", **TINY))) == 4  # the conv and the dense layer
    user = [
        path for path in norms(pqn.Config(network=custom_torsos.flat_residual, **TINY)) if "NormalizedTorso_0" in path
    ]
    assert len(user) == 2  # the user's torso has LayerNorms of its own: one more after it
    assert not any(
        "NormalizedTorso_0" in path
        for path in norms(pqn.Config(network=custom_torsos.flat_residual, layer_norm=False, **TINY))
    )


def test_layer_norm_normalises_the_features():
    module = networks.MLP((16,), "relu", layer_norm=True)
    x = jax.random.normal(jax.random.key(0), (5, 3)) * 10.0
    params = module.init(jax.random.key(1), x)
    dense = params["params"]["Dense_0"]
    pre = np.asarray(x @ dense["kernel"] + dense["bias"])
    normalised = (pre - pre.mean(-1, keepdims=True)) / np.sqrt(pre.var(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(module.apply(params, x), np.maximum(normalised, 0.0), atol=1e-4)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(num_minibatches=3), "num_minibatches \\(3\\) must divide the rollout's 16"),
        (dict(memory="gru", sequence_length=3), "sequence_length \\(3\\) must divide num_steps \\(8\\)"),
        (dict(memory="gru", sequence_length=4, num_minibatches=8), "must divide the rollout's 4 sequences"),
        (dict(env_id="Pendulum-v1"), "PQN needs a discrete action space"),
        (dict(memory="rnn"), "memory"),
        (dict(network=networks.Whole(custom_torsos.QNet)), "brings its own heads; turn off"),
    ],
)
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        pqn.Config(**{**TINY, **settings})


@pytest.mark.parametrize("field, value", [("lambda_", 1.5), ("reward_scale", 0.0), ("learning_rate", -1.0)])
def test_bad_traced_settings_are_refused_at_init(field, value):
    with pytest.raises(ValueError, match=field):
        pqn.init(jax.random.key(0), pqn.Config(**{**TINY, field: value}))


@pytest.mark.slow
@pytest.mark.optimised
def test_pqn_solves_cartpole():
    """PQN at purejaxql's CartPole settings (the preset) on CartPole-v1 for 200k env steps:
    the final greedy evaluation reaches >= 475 in at least 3 of 4 seeds (measured: 500 in
    8 of 8 seeds)."""
    config = pqn.preset("CartPole-v1", total_timesteps=200_000, num_reports=0)
    out = jax.jit(jax.vmap(pqn.train, in_axes=(0, None)))(jax.random.split(jax.random.key(0), 4), config)
    final = np.asarray(out.metrics["eval_return"])[:, -1]
    assert (final >= 475).sum() >= 3, final
