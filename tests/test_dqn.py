"""DQN and its Rainbow parts: the categorical projection against a NumPy loop, the
targets of double DQN and the weights of prioritized replay on hand-made batches, the
API contract (jit, vmap, determinism, errors) and learning tests.

Compiles dominate on a 2-core CPU: the API tests share one small config whose program
compiles once per transformation (module-scoped fixtures).
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxrl import returns, sweep_axes, value_heads
from jaxrl.algorithms import dqn, get
from jaxrl.buffers import Index, prioritized, sumtree
from jaxrl.buffers.prioritized import Prioritized
from jaxrl.config import replace_paths
from jaxrl.exploration import ApeXEpsilons, EpsilonGreedy, NoisyNets
from jaxrl.networks import NoisyDense, QNetwork

SMALL = dqn.Config(
    env_id="CartPole-v1",
    num_envs=4,
    num_steps=4,
    num_updates=2,
    batch_size=16,
    buffer_size=256,
    learning_starts=32,
    total_timesteps=16 * 8,
    hidden_sizes=(16,),
    target_update_period=3,
    num_evals=2,
    eval_episodes=2,
    num_reports=0,
)


@pytest.fixture(scope="module")
def train_small():
    return jax.jit(dqn.train)


@pytest.fixture(scope="module")
def small_run(train_small):
    return train_small(jax.random.key(0), SMALL)


def jit(fn):
    """``fn`` compiled with its ``config`` argument static (eager op-by-op runs are slow)."""
    return jax.jit(fn, static_argnames="config")


def assert_trees_close(a, b, rtol=1e-5, atol=1e-5):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol, equal_nan=True)


# ----------------------------------------------------------------------------- numerics


def projection_reference(probs, reward, discount, support):
    """C51's projection as the paper's pseudo-code: one atom at a time."""
    batch, num_atoms = probs.shape
    v_min, v_max = support[0], support[-1]
    delta = (v_max - v_min) / (num_atoms - 1)
    out = np.zeros_like(probs)
    for b in range(batch):
        for j in range(num_atoms):
            tz = min(max(reward[b] + discount[b] * support[j], v_min), v_max)
            position = (tz - v_min) / delta
            lower, upper = int(np.floor(position)), int(np.ceil(position))
            if lower == upper:
                out[b, lower] += probs[b, j]
            else:
                out[b, lower] += probs[b, j] * (upper - position)
                out[b, upper] += probs[b, j] * (position - lower)
    return out


def test_categorical_projection_matches_numpy_loop():
    rng = np.random.default_rng(0)
    batch, num_atoms = 64, 11
    support = np.linspace(-5.0, 5.0, num_atoms)
    probs = rng.dirichlet(np.ones(num_atoms), size=batch)
    reward = rng.uniform(-4.0, 4.0, batch)
    reward[:4] = [20.0, -20.0, 0.0, 1.0]  # far outside the support: clipped
    discount = rng.uniform(0.0, 1.0, batch) * (rng.uniform(size=batch) > 0.2)  # zeros: terminal
    discount[3] = 1.0  # shift by exactly one atom
    got = returns.categorical_projection(
        jnp.asarray(probs, jnp.float32),
        jnp.asarray(reward, jnp.float32),
        jnp.asarray(discount, jnp.float32),
        jnp.asarray(support, jnp.float32),
    )
    expected = projection_reference(probs, reward, discount, support)
    np.testing.assert_allclose(np.asarray(got), expected, atol=1e-5)
    np.testing.assert_allclose(np.asarray(got).sum(-1), 1.0, atol=1e-5)


def _batch(config, key, obs=None):
    """A hand-made batch as :func:`dqn.sample` returns it."""
    keys = jax.random.split(key, 4)
    size = config.batch_size
    obs = jax.random.normal(keys[0], (size, 4)) if obs is None else obs
    return {
        "obs": obs,
        "action": jax.random.randint(keys[1], (size,), 0, 2),
        "reward": jax.random.uniform(keys[2], (size,)),
        "discount": jnp.full((size,), config.gamma),
        "terminated": jnp.arange(size) % 5 == 0,
        "truncated": jnp.arange(size) % 7 == 0,
        "next_obs": jax.random.normal(keys[3], (size, 4)),
        "weight": jnp.ones(size),
        "index": None,
    }


def _diverged_params(config, key):
    """Online and target params far enough apart that their argmax actions differ."""
    state = jit(dqn.init)(key, config)
    target = jax.tree.map(lambda x: x + 0.5 * jax.random.normal(jax.random.key(9), x.shape), state.params["network"])
    return state.params["network"], target


def test_double_dqn_targets_use_online_argmax_and_target_values():
    config = SMALL.replace(double=True, batch_size=64)
    online, target = _diverged_params(config, jax.random.key(1))
    batch = _batch(config, jax.random.key(2))
    q = lambda p, x: np.asarray(dqn.q_values({"network": p}, x, config))  # noqa: E731
    q_next_target, q_next_online = q(target, batch["next_obs"]), q(online, batch["next_obs"])
    rows = np.arange(64)
    not_terminal = 1.0 - np.asarray(batch["terminated"], np.float32)
    reward, discount = np.asarray(batch["reward"]), config.gamma * not_terminal
    q_taken = q(online, batch["obs"])[rows, np.asarray(batch["action"])]
    double_target = reward + discount * q_next_target[rows, q_next_online.argmax(1)]
    vanilla_target = reward + discount * q_next_target.max(1)
    assert np.any(q_next_target.argmax(1) != q_next_online.argmax(1))  # the case that matters

    for cfg, expected in ((config, double_target), (config.replace(double=False), vanilla_target)):
        loss, (metrics, td) = jit(dqn.loss_fn)(online, target, batch, jax.random.key(3), cfg)
        np.testing.assert_allclose(np.asarray(td), expected - q_taken, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(float(loss), np.mean(optax.huber_loss(expected - q_taken)), rtol=1e-5)
    # Truncated rows still bootstrap (only termination stops the target).
    truncated_only = np.asarray(batch["truncated"]) & ~np.asarray(batch["terminated"])
    assert np.all(discount[truncated_only] > 0)


def test_prioritized_weights_scale_the_loss_and_updates_set_priorities():
    config = SMALL.replace(prioritized=Prioritized(), head=value_heads.Scalar(loss="mse"))
    per = config.prioritized
    state = jit(dqn.init)(jax.random.key(0), config)
    warmup_step = jit(dqn.warmup_step)
    state, _ = warmup_step(state, jax.random.key(1), config)
    state, _ = warmup_step(state, jax.random.key(2), config)
    # Give the stored transitions unequal priorities, then sample.
    slots = np.arange(state.buffer.replay.size * config.num_envs)
    index = Index(jnp.asarray(slots // config.num_envs), jnp.asarray(slots % config.num_envs))
    errors = jnp.linspace(0.1, 3.0, len(slots))
    state = state.replace(buffer=jax.jit(prioritized.update_priorities)(state.buffer, index, errors, per.alpha))
    batch = jit(dqn.sample)(state, jax.random.key(4), config)

    leaves = np.asarray(sumtree.leaves(state.buffer.tree))
    flat = np.asarray(batch["index"].row) * config.num_envs + np.asarray(batch["index"].lane)
    beta = per.beta_start + (per.beta_end - per.beta_start) * int(state.timesteps) / config.total_timesteps
    expected_weight = (len(slots) * leaves[flat] / leaves.sum()) ** -beta
    np.testing.assert_allclose(np.asarray(batch["weight"]), expected_weight / expected_weight.max(), rtol=1e-4)
    assert np.asarray(batch["weight"]).min() < 0.99  # unequal priorities give unequal weights

    loss, (_, td) = jit(dqn.loss_fn)(state.params["network"], state.target_params, batch, jax.random.key(5), config)
    np.testing.assert_allclose(float(loss), np.mean(np.asarray(batch["weight"]) * 0.5 * np.asarray(td) ** 2), rtol=1e-5)
    new_state, _ = jit(dqn.update)(state, batch, jax.random.key(5), config)
    new_leaves = np.asarray(sumtree.leaves(new_state.buffer.tree))
    np.testing.assert_allclose(new_leaves[flat], (np.abs(np.asarray(td)) + per.eps) ** per.alpha, rtol=1e-5)


def test_dueling_head_is_value_plus_centred_advantage():
    network = QNetwork(num_actions=3, hidden_sizes=(8,), dueling=True)
    obs = jax.random.normal(jax.random.key(0), (5, 4))
    params = network.init(jax.random.key(1), obs)
    q = np.asarray(network.apply(params, obs))
    # Recompute by hand from the parameters.
    p = params["params"]
    x = np.maximum(
        np.asarray(obs) @ np.asarray(p["MLP_0"]["Dense_0"]["kernel"]) + np.asarray(p["MLP_0"]["Dense_0"]["bias"]), 0
    )
    value = x @ np.asarray(p["value"]["kernel"]) + np.asarray(p["value"]["bias"])
    advantage = x @ np.asarray(p["advantage"]["kernel"]) + np.asarray(p["advantage"]["bias"])
    np.testing.assert_allclose(q, value + advantage - advantage.mean(-1, keepdims=True), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_noisy_dense_is_factorised_gaussian():
    layer = NoisyDense(3, sigma_init=0.5)
    x = jax.random.normal(jax.random.key(0), (6, 4))
    params = layer.init({"params": jax.random.key(1), "noise": jax.random.key(2)}, x)
    p = {k: np.asarray(v) for k, v in params["params"].items()}
    np.testing.assert_allclose(p["w_sigma"], 0.5 / np.sqrt(4))
    assert np.all(np.abs(p["w_mu"]) <= 1 / np.sqrt(4))
    # Probe with the zero vector and the unit vectors in one call (one noise sample):
    # y(0) = b_mu + b_sigma * f(eps_out), y(e_i) - y(0) = w_mu[i] + w_sigma[i] * f(eps_in[i]) * f(eps_out).
    probe = jnp.concatenate([jnp.zeros((1, 4)), jnp.eye(4)])
    y = np.asarray(layer.apply(params, probe, rngs={"noise": jax.random.key(3)}))
    eps_out = (y[0] - p["b_mu"]) / p["b_sigma"]
    noise = (y[1:] - y[0] - p["w_mu"]) / p["w_sigma"]  # [4, 3] = outer(f(eps_in), f(eps_out))
    eps_in = noise[:, 0] / eps_out[0]
    np.testing.assert_allclose(noise, np.outer(eps_in, eps_out), rtol=1e-4, atol=1e-5)  # factorised: rank one
    assert np.all(np.abs(noise) > 0)
    other = np.asarray(layer.apply(params, probe, rngs={"noise": jax.random.key(4)}))
    assert not np.allclose(other, y)  # fresh noise per key
    # One row at a time takes the layer's other form (noise around a second product
    # instead of noisy weights): the same outputs for the same noise.
    draws = jax.random.normal(jax.random.key(3), (4 + 3,))
    batched = np.asarray(layer.apply(params, probe, noise=draws))
    rows = [np.asarray(layer.apply(params, probe[i : i + 1], noise=draws))[0] for i in range(len(probe))]
    np.testing.assert_allclose(np.stack(rows), batched, rtol=1e-5, atol=1e-6)
    mean = np.asarray(layer.apply(params, x, deterministic=True))
    np.testing.assert_allclose(mean, np.asarray(x) @ p["w_mu"] + p["b_mu"], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_noisy_q_network_splits_one_draw_over_its_head_layers():
    network = QNetwork(num_actions=3, hidden_sizes=(8,), dueling=True, noisy=True, num_atoms=5)
    obs = jax.random.normal(jax.random.key(0), (4, 4))
    params = network.init({"params": jax.random.key(1), "noise": jax.random.key(2)}, obs)
    assert network.noise_size() == (8 + 3 * 5) + (8 + 5)  # advantage layer, then value layer
    # Zero draws are the noise-free network; a draw touching one layer's slice changes
    # only that layer's contribution.
    mean = np.asarray(network.apply(params, obs, deterministic=True))
    np.testing.assert_allclose(np.asarray(network.apply(params, obs, noise=jnp.zeros(36))), mean, atol=1e-6)
    value_only = jnp.zeros(36).at[23:].set(1.0)
    shifted = np.asarray(network.apply(params, obs, noise=value_only)) - mean
    np.testing.assert_allclose(
        shifted, np.broadcast_to(shifted[:, :1], shifted.shape), atol=1e-6
    )  # same for every action
    assert np.abs(shifted).max() > 1e-3
    drawn = [np.asarray(network.apply(params, obs, rngs={"noise": jax.random.key(k)})) for k in (3, 4)]
    assert drawn[0].shape == (4, 3, 5) and not np.allclose(drawn[0], drawn[1])


def test_epsilon_schedules():
    config = SMALL.replace(exploration=EpsilonGreedy(start=1.0, end=0.1, fraction=0.5))
    horizon = 0.5 * config.total_timesteps
    for t, expected in ((0, 1.0), (horizon / 2, 0.55), (horizon, 0.1), (config.total_timesteps, 0.1)):
        np.testing.assert_allclose(np.asarray(dqn.epsilon(jnp.asarray(t), config)), expected, rtol=1e-6)
    apex = dqn.Config(**{**SMALL.__dict__, "num_envs": 8, "exploration": ApeXEpsilons()})
    lanes = np.arange(8)
    np.testing.assert_allclose(np.asarray(dqn.epsilon(jnp.asarray(0), apex)), 0.4 ** (1 + 7 * lanes / 7), rtol=1e-5)


# ----------------------------------------------------------------------------- contract


def test_registry_and_rainbow_preset():
    assert get("dqn") is dqn.algorithm
    config = dqn.rainbow("CartPole-v1", n_step=5)
    assert config.double and config.dueling and isinstance(config.prioritized, Prioritized)
    assert isinstance(config.head, value_heads.Categorical) and isinstance(config.exploration, NoisyNets)
    assert config.n_step == 5 and np.all(np.asarray(dqn.epsilon(jnp.asarray(0), config)) == 0.0)  # noisy nets explore
    assert dqn.Config(prioritized=False).prioritized is None and dqn.Config(prioritized=True) == dqn.Config()
    assert isinstance(dqn.Config(head="categorical", exploration="noisy").head, value_heads.Categorical)


def test_metrics_shapes_and_warmup(small_run):
    metrics = small_run.metrics
    iterations = SMALL.num_iterations
    for name in ("timesteps", "episode_return", "loss", "q_mean", "td_abs", "epsilon", "eval_return"):
        assert metrics[name].shape == (iterations,), name
    np.testing.assert_array_equal(metrics["timesteps"], SMALL.iteration_steps * np.arange(1, iterations + 1))
    loss = np.asarray(metrics["loss"])
    warmup = SMALL.warmup_iterations
    assert warmup == 2 and np.all(np.isnan(loss[:warmup])) and np.all(np.isfinite(loss[warmup:]))
    np.testing.assert_array_equal(np.asarray(metrics["epsilon"])[:warmup], 1.0)
    assert int(small_run.state.updates) == (iterations - warmup) * SMALL.num_updates
    assert (~np.isnan(np.asarray(metrics["eval_return"]))).sum() == SMALL.num_evals


def test_same_key_same_result(train_small, small_run):
    again = train_small(jax.random.key(0), SMALL)
    for x, y in zip(jax.tree.leaves(small_run), jax.tree.leaves(again)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    other = train_small(jax.random.key(1), SMALL)
    assert not np.allclose(np.asarray(other.metrics["loss"])[2:], np.asarray(small_run.metrics["loss"])[2:])


@pytest.mark.slow
def test_vmap_over_seeds_and_hyperparameters_compiles_once(train_small):
    """One program maps over seeds and traced hyper-parameters together (the parts'
    numbers too); each lane equals the separate run with its own key and values, and new
    values do not recompile."""
    values = {
        "learning_rate": [1e-4, 1e-3],
        "gamma": [0.9, 0.99],
        "tau": [0.5, 1.0],
        "exploration.end": [0.05, 0.2],
        "prioritized.alpha": [0.6, 0.4],
    }
    configs = replace_paths(SMALL, {k: jnp.array(v) for k, v in values.items()})
    keys = jax.random.split(jax.random.key(4), 2)
    sweep = jax.jit(jax.vmap(dqn.train, in_axes=(0, sweep_axes(configs))))
    out = sweep(keys, configs)
    sweep(keys, configs.replace(learning_rate=jnp.array([2e-4, 2e-3])))
    assert sweep._cache_size() == 1
    train_small(keys[0], SMALL)
    programs = train_small._cache_size()
    for i in range(2):
        single = train_small(keys[i], replace_paths(SMALL, {k: v[i] for k, v in values.items()}))
        assert_trees_close(jax.tree.map(lambda x: x[i], out.metrics), single.metrics, rtol=1e-4, atol=1e-4)
    assert train_small._cache_size() == programs


def test_act_and_evaluate_from_params_alone(small_run):
    obs = jnp.zeros((3, 4))
    greedy, carry = dqn.act(small_run.state.params, obs, dqn.initial_carry(SMALL, 3), jax.random.key(0), SMALL, True)
    assert greedy.shape == (3,) and greedy.dtype == jnp.int32 and carry == ()
    random, _ = dqn.act(small_run.state.params, jnp.zeros((256, 4)), (), jax.random.key(0), SMALL, epsilon=1.0)
    assert set(np.unique(np.asarray(random))) == {0, 1}
    result = dqn.evaluate(small_run.state.params, jax.random.key(1), SMALL)
    assert result.returns.shape == (SMALL.eval_episodes,)


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(buffer_size=8), "buffer_size"),
        (dict(n_step=0), "n_step"),
        (dict(batch_size=0), "batch_size"),
        (dict(num_envs=0), "num_envs"),
        (dict(env_id="Pendulum-v1"), "env_id"),
        (dict(env_id="CartPoel-v1"), "CartPole-v1"),
        (dict(head=lambda: value_heads.Scalar(loss="l1")), "loss"),
        (dict(head="quantile"), "head must be one of"),
        (dict(exploration="boltzmann"), "exploration must be one of"),
        (dict(head=lambda: value_heads.Categorical(num_atoms=1)), "num_atoms"),
        (dict(hidden_sizes=()), "hidden_sizes"),
        (dict(network="cnn"), "network='cnn' needs image observations"),
        (dict(total_timesteps=10), "total_timesteps"),
    ],
)
def test_bad_static_config_is_a_clear_error(overrides, field):
    with pytest.raises(ValueError, match=field):  # a part built inside: its own checks
        overrides = {k: v() if callable(v) else v for k, v in overrides.items()}
        dqn.Config(**{**SMALL.__dict__, **overrides})


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(prioritized=Prioritized(alpha=1.5)), r"prioritized\.alpha must lie in"),
        (dict(prioritized=Prioritized(alpha=-0.1)), r"prioritized\.alpha must lie in"),
        (dict(exploration=EpsilonGreedy(end=1.5)), r"exploration\.end must lie in"),
        (dict(gamma=1.5), "gamma"),
        (dict(tau=0.0), "tau"),
        (dict(learning_rate=0.0), "learning_rate"),
        (dict(head=value_heads.Categorical(v_min=10.0, v_max=0.0)), "v_min"),
    ],
)
def test_bad_hyperparameter_is_a_clear_error(overrides, field):
    with pytest.raises(ValueError, match=field):
        dqn.init(jax.random.key(0), SMALL.replace(**overrides))


# Rainbow's learning test (70k env steps of CartPole-v1, >= 475 in 2 of 3 seeds of key 42;
# trials: 7 of 8 seeds of key 42) is a row of benchmarks/learning_table.py; QR-DQN's and
# IQN's (tests/test_quantile_heads.py) train the distributional path in the suite.
