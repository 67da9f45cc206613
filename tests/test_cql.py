"""CQL and discrete CQL: their conservative terms and the Lagrangian's loss against NumPy
written here, clear errors on bad config, jit + vmap over seeds on a small dataset
recorded in the test, and the hand-over of a CQL state to online SAC.

The learning tests of every offline algorithm live together in one file (Pendulum and
CartPole datasets of tests/offline_datasets.py). Compiles dominate on a 2-core CPU: the
API tests share one small config per algorithm and one trained state (module fixtures).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import algorithms, data
from jaxrl.algorithms import cql, discrete_cql, offline
from jaxrl.config import sweep_axes

SMALL = dict(num_updates=50, batch_size=32, hidden_sizes=(32, 32), num_evals=1, eval_episodes=1, num_reports=0)
# the Lagrangian variant, which moves every part of the state (alpha' too)
CQL_SMALL = cql.Config(env_id="Pendulum-v1", lagrange=True, num_sampled_actions=4, **SMALL)
DISCRETE_SMALL = discrete_cql.Config(env_id="CartPole-v1", **SMALL)


def random_dataset(env_id: str, num_steps: int = 256, seed: int = 0) -> data.Dataset:
    """``num_steps`` transitions of uniformly random actions on 2 envs."""
    part = data.random_part(env_id, 1.0)
    return data.collect_dataset(part.act_fn, part.params, env_id, jax.random.key(seed), num_steps, num_envs=2)


@pytest.fixture(scope="module")
def pendulum_dataset():
    return random_dataset("Pendulum-v1")


@pytest.fixture(scope="module")
def cql_train():
    """Two weights (``cql_alpha``, traced) x two seeds of the small Lagrangian CQL, in one
    compiled program: leaves ``[2 weights, 2 seeds, ...]``."""
    sweep = CQL_SMALL.replace(cql_alpha=jnp.asarray([1.0, CQL_SMALL.cql_alpha]))
    seeds = jax.vmap(cql.train, in_axes=(0, None, None))
    train = jax.jit(jax.vmap(seeds, in_axes=(None, sweep_axes(sweep), None)))
    return lambda dataset: train(jax.random.split(jax.random.key(0), 2), sweep, dataset)


@pytest.fixture(scope="module")
def cql_run(cql_train, pendulum_dataset):
    return cql_train(pendulum_dataset)


# ----------------------------------------------------------------------------- numerics


def np_logsumexp(x, temperature):
    peak = max(x)
    return temperature * (peak / temperature + math.log(sum(math.exp((v - peak) / temperature) for v in x)))


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_cql_penalty_matches_numpy(temperature):
    rng = np.random.default_rng(0)
    C, B, N, A = 2, 5, 3, 2
    q_data = rng.normal(size=(C, B)).astype(np.float32)
    q_random, q_current, q_next = (rng.normal(scale=3.0, size=(C, B, N)).astype(np.float32) for _ in range(3))
    lp_current, lp_next = (rng.normal(size=(B, N)).astype(np.float32) for _ in range(2))

    got = cql.cql_penalty(q_data, q_random, q_current, q_next, lp_current, lp_next, A, temperature)

    expected = np.zeros(C)
    for c in range(C):
        for b in range(B):
            proposals = []
            for j in range(N):
                proposals.append(q_random[c, b, j] - A * math.log(0.5))  # the uniform density on [-1, 1]^A is 0.5^A
                proposals.append(q_current[c, b, j] - lp_current[b, j])
                proposals.append(q_next[c, b, j] - lp_next[b, j])
            expected[c] += (np_logsumexp(proposals, temperature) - q_data[c, b]) / B
    assert got.shape == (C,)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("masked", [False, True])
def test_discrete_cql_penalty_matches_numpy(masked):
    rng = np.random.default_rng(1)
    B, A = 6, 4
    q = rng.normal(scale=2.0, size=(B, A)).astype(np.float32)
    action = rng.integers(0, A, B).astype(np.int32)
    mask = rng.random((B, A)) < 0.6
    mask[np.arange(B), action] = True  # the dataset's action is always allowed
    got = discrete_cql.cql_penalty(q, action, mask if masked else None)

    expected = 0.0
    for b in range(B):
        allowed = [q[b, a] for a in range(A) if mask[b, a] or not masked]
        expected += (np_logsumexp(allowed, 1.0) - q[b, action[b]]) / B
    np.testing.assert_allclose(float(got), expected, rtol=1e-5)


def test_alpha_prime_loss_value_and_sign():
    config = cql.Config(cql_alpha=2.0, target_action_gap=1.5, lagrange=True)
    log_alpha_prime = jnp.asarray(0.3)
    loss = jax.value_and_grad(cql.alpha_prime_loss)
    for gap, sign in ((jnp.asarray([3.0, 2.0]), -1.0), (jnp.asarray([0.5, 1.0]), 1.0)):
        value, grad = loss(log_alpha_prime, gap, config)
        expected = -math.exp(0.3) * 2.0 * (float(jnp.mean(gap)) - 1.5)
        np.testing.assert_allclose(float(value), expected, rtol=1e-6)
        np.testing.assert_allclose(float(grad), expected, rtol=1e-6)  # d/dx of -e^x c (g - t) is itself
        # gradient descent raises alpha' while the gap is above the target, lowers it below
        assert np.sign(float(grad)) == sign
    # the critics' weight: cql_alpha without lagrange, alpha' * cql_alpha with it, alpha' clipped at 1e6
    assert float(cql.penalty_weight(jnp.asarray(0.3), config.replace(lagrange=False))) == 2.0
    np.testing.assert_allclose(float(cql.penalty_weight(jnp.asarray(0.3), config)), math.exp(0.3) * 2.0, rtol=1e-6)
    np.testing.assert_allclose(float(cql.penalty_weight(jnp.asarray(30.0), config)), 2e6, rtol=1e-6)


# ----------------------------------------------------------------------------- the contract


def test_registered():
    assert algorithms.get("cql") is cql.algorithm
    assert algorithms.get("discrete_cql") is discrete_cql.algorithm


def test_config_errors(pendulum_dataset):
    with pytest.raises(ValueError, match="CartPole-v1.*discrete actions"):
        cql.Config(env_id="CartPole-v1")
    with pytest.raises(ValueError, match="discrete CQL needs a Discrete action space.*'Pendulum-v1'"):
        discrete_cql.Config(env_id="Pendulum-v1")
    with pytest.raises(ValueError, match="num_sampled_actions"):
        cql.Config(num_sampled_actions=0)
    for field, value in (("cql_alpha", -1.0), ("temperature", 0.0), ("alpha", 0.0)):
        with pytest.raises(ValueError, match=field):
            cql.init(jax.random.key(0), cql.Config(**{field: value}), pendulum_dataset)
    with pytest.raises(ValueError, match="cql_alpha"):
        discrete_cql.init(jax.random.key(0), discrete_cql.Config(cql_alpha=-0.5), random_dataset("CartPole-v1", 16))
    with pytest.raises(ValueError, match="dataset"):  # a Pendulum dataset for a CartPole config
        discrete_cql.init(jax.random.key(0), DISCRETE_SMALL, pendulum_dataset)


def test_cql_jit_vmap_over_seeds_and_weights(cql_train, cql_run, pendulum_dataset):
    metrics = cql_run.metrics
    assert metrics["critic_loss"].shape == (2, 2, CQL_SMALL.num_updates)
    for name in ("critic_loss", "actor_loss", "cql_gap", "q_mean", "alpha", "cql_weight", "alpha_prime_loss"):
        assert np.all(np.isfinite(metrics[name])), name
    np.testing.assert_array_equal(metrics["updates"][..., -1], CQL_SMALL.num_updates)
    state = cql_run.state
    assert not np.any(np.isclose(state.log_alpha_prime, cql.LOG_ALPHA_PRIME_INIT))  # lagrange moves alpha'
    assert not np.any(np.isclose(state.log_alpha, math.log(CQL_SMALL.alpha)))  # autotune moves alpha
    # the first update's weight: alpha' = e (log alpha' = 1) times each run's cql_alpha
    np.testing.assert_allclose(metrics["cql_weight"][:, :, 0], [[math.e] * 2, [math.e * 5.0] * 2], rtol=1e-6)
    kernel = jax.tree.leaves(state.params["actor"])[0]
    assert not np.allclose(kernel[0, 0], kernel[0, 1])  # the seeds differ
    assert not np.allclose(kernel[0, 0], kernel[1, 0])  # so do the weights
    assert np.all(np.isfinite(metrics["eval_return"][..., -1]))
    again = cql_train(pendulum_dataset)  # same key, config and data: the same run
    for x, y in zip(jax.tree.leaves(cql_run), jax.tree.leaves(again)):
        np.testing.assert_array_equal(x, y)


def test_discrete_cql_jit_vmap_over_seeds():
    dataset = random_dataset("CartPole-v1")
    train = jax.jit(jax.vmap(discrete_cql.train, in_axes=(0, None, None)), static_argnums=1)
    out = train(jax.random.split(jax.random.key(0), 2), DISCRETE_SMALL, dataset)
    for name in ("loss", "td_loss", "cql_gap", "q_mean"):
        assert out.metrics[name].shape == (2, DISCRETE_SMALL.num_updates)
        assert np.all(np.isfinite(out.metrics[name])), name
    # the gap log sum_a exp Q - Q(a_data) >= log-mean-exp >= 0 on average; CQL keeps it small
    assert np.all(out.metrics["cql_gap"] > 0.0)
    assert np.all(out.metrics["cql_gap"][:, -1] < out.metrics["cql_gap"][:, 0] + 0.1)
    np.testing.assert_array_equal(out.metrics["updates"][:, -1], [DISCRETE_SMALL.num_updates] * 2)
    assert np.all(out.metrics["eval_return"][:, -1] >= 8)  # a greedy CartPole episode lasts 8 steps or more
    # act: greedy, int32 [B]
    params = jax.tree.map(lambda x: x[0], out.state.params)
    obs = dataset.obs[:5]
    action, carry = discrete_cql.act(params, obs, (), jax.random.key(1), DISCRETE_SMALL)
    assert action.shape == (5,) and action.dtype == jnp.int32 and carry == ()


def test_hand_over_to_sac(cql_run, pendulum_dataset):
    state = jax.tree.map(lambda x: x[1, 0], cql_run.state)  # cql_alpha 5.0 (CQL_SMALL's), the first seed
    online = cql.online_config(
        CQL_SMALL,
        total_timesteps=64,
        learning_starts=0,
        num_envs=2,
        buffer_size=512,
        num_evals=0,
        num_reports=0,
        learning_rate=1e-4,
    )
    assert online.hidden_sizes == CQL_SMALL.hidden_sizes and online.normalize_observations
    program = cql.finetune_program(online, keep_dataset=True)
    online_state = jax.jit(program.init)(jax.random.key(1), state)

    for name in ("actor", "obs_stats"):
        for got, want in zip(jax.tree.leaves(online_state.params[name]), jax.tree.leaves(state.params[name])):
            np.testing.assert_array_equal(got, want)
    for got, want in zip(jax.tree.leaves(online_state.critic_params), jax.tree.leaves(state.critic_params)):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(online_state.log_alpha, state.log_alpha)
    assert set(online_state.opt_state) == {"actor", "critic", "alpha"}
    for name, opt in online_state.opt_state.items():  # Adam's moments carried on, at the online learning rate
        np.testing.assert_allclose(opt.hyperparams["learning_rate"], 1e-4)
        for got, want in zip(jax.tree.leaves(opt.inner_state), jax.tree.leaves(state.opt_state[name].inner_state)):
            np.testing.assert_array_equal(got, want)

    # the replay holds the dataset's 256 transitions, as rows of the online run's 2 envs
    buffer = online_state.buffer
    assert int(buffer.size) == pendulum_dataset.size // 2
    np.testing.assert_array_equal(
        buffer.data["obs"][: buffer.size].reshape(pendulum_dataset.obs.shape), pendulum_dataset.obs
    )
    np.testing.assert_array_equal(buffer.data["reward"][: buffer.size].reshape(-1), pendulum_dataset.reward)

    without = jax.jit(cql.finetune_program(online, keep_dataset=False).init)(jax.random.key(1), state)
    assert int(without.buffer.size) == 0

    # the online run goes on from there
    tuned = jax.jit(offline.finetune, static_argnums=0)(program, jax.random.key(2), state)
    assert int(tuned.state.timesteps) == 64
    assert np.all(np.isfinite(tuned.metrics["critic_loss"]))
