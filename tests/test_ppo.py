"""PPO: API contract (jit, vmap over seeds and hyper-parameters, determinism, errors)
and learning tests.

Compiles are the cost on a 2-core CPU, so the API tests share one small config whose
program compiles once per transformation (module-scoped fixtures).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_distributions import np_log_softmax
from test_runner import leaves

from jaxrl import sweep_axes
from jaxrl.algorithms import get, onpolicy, ppo

SMALL = ppo.Config(
    env_id="CartPole-v1",
    num_envs=4,
    num_steps=16,
    total_timesteps=4 * 16 * 6,
    num_epochs=2,
    num_minibatches=2,
    hidden_sizes=(16, 16),
    num_evals=2,
    eval_episodes=2,
    num_reports=0,
)


@pytest.fixture(scope="module")
def train_small():
    return jax.jit(ppo.train)


@pytest.fixture(scope="module")
def small_run(train_small):
    return train_small(jax.random.key(0), SMALL)


def assert_trees_close(a, b, rtol=1e-5, atol=1e-5):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol, equal_nan=True)


def test_registry():
    assert get("ppo") is ppo.algorithm
    with pytest.raises(ValueError, match="unknown algorithm 'ppp'.*'ppo'"):
        get("ppp")


def test_metrics_shapes_and_contents(small_run):
    metrics = small_run.metrics
    iterations = SMALL.num_iterations
    for name in (
        "timesteps",
        "episode_return",
        "episode_length",
        "policy_loss",
        "value_loss",
        "entropy",
        "approx_kl",
        "clip_fraction",
        "learning_rate",
        "eval_return",
        "eval_length",
    ):
        assert metrics[name].shape == (iterations,), name
    np.testing.assert_array_equal(metrics["timesteps"], 64 * np.arange(1, iterations + 1))
    # Evaluations at exactly num_evals evenly spread points, the last iteration included.
    evaluated = ~np.isnan(np.asarray(metrics["eval_return"]))
    assert evaluated.sum() == SMALL.num_evals and evaluated[-1]
    # The learning rate anneals linearly towards 0 over all minibatch updates.
    lr = np.asarray(metrics["learning_rate"])
    assert lr[0] < SMALL.learning_rate and np.all(np.diff(lr) < 0) and lr[-1] >= 0
    assert int(small_run.state.timesteps) == SMALL.total_timesteps // 64 * 64


def test_same_key_same_result(train_small, small_run):
    again = train_small(jax.random.key(0), SMALL)
    for x, y in zip(jax.tree.leaves(small_run), jax.tree.leaves(again)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    other = train_small(jax.random.key(1), SMALL)
    assert not np.allclose(np.asarray(other.metrics["policy_loss"]), np.asarray(small_run.metrics["policy_loss"]))


@pytest.mark.slow
def test_vmap_over_seeds_and_hyperparameters_compiles_once_and_equals_separate_runs(train_small):
    """One program vmapped over seeds and two swept hyper-parameters together: each
    lane equals the separate run with its key and settings, and other values of the
    traced settings compile nothing new (neither in the sweep nor in the single run)."""
    keys = jax.random.split(jax.random.key(3), 3)
    learning_rates, clips = [1e-4, 1e-3, 1e-2], [0.1, 0.2, 0.3]
    configs = SMALL.replace(learning_rate=jnp.array(learning_rates), clip_eps=jnp.array(clips))
    sweep = jax.jit(jax.vmap(ppo.train, in_axes=(0, sweep_axes(configs))))
    out = sweep(keys, configs)
    sweep(keys, configs.replace(learning_rate=jnp.array([2e-4, 2e-3, 2e-2])))
    assert sweep._cache_size() == 1
    train_small(keys[0], SMALL)
    programs = train_small._cache_size()  # jit caches are shared per function: count new ones
    for i, (lr, clip) in enumerate(zip(learning_rates, clips)):
        single = train_small(keys[i], SMALL.replace(learning_rate=lr, clip_eps=clip))
        assert_trees_close(jax.tree.map(lambda x: x[i], out.metrics), single.metrics, rtol=1e-4, atol=1e-5)
    # Other learning rates and clip ranges are traced values: no new program was compiled.
    assert train_small._cache_size() == programs


def test_act_and_evaluate_from_params_alone(small_run):
    params = small_run.state.params
    obs = jnp.zeros((5, 4))
    action, carry = ppo.act(params, obs, ppo.initial_carry(SMALL, 5), jax.random.key(0), SMALL)
    assert action.shape == (5,) and action.dtype == jnp.int32 and carry == ()
    greedy, _ = ppo.act(params, obs, (), jax.random.key(1), SMALL, deterministic=True)
    np.testing.assert_array_equal(greedy, ppo.act(params, obs, (), jax.random.key(2), SMALL, deterministic=True)[0])
    result = ppo.evaluate(params, jax.random.key(0), SMALL)
    assert result.returns.shape == (SMALL.eval_episodes,)


def test_policy_and_value_moved_to_onpolicy(small_run):
    obs = jnp.zeros((3, 4))
    with pytest.warns(DeprecationWarning, match="onpolicy.policy_and_value"):
        distribution, value, _ = ppo.policy_and_value(small_run.state.params, obs, SMALL)
    expected = onpolicy.policy_and_value(small_run.state.params, obs, SMALL)
    np.testing.assert_array_equal(distribution.logits, expected[0].logits)
    np.testing.assert_array_equal(value, expected[1])


# Pendulum with observation statistics and a wide Gaussian (its samples reach both action
# bounds): one config, so one compiled ``step``, for the tests of the pieces of ``step``,
# continuous actions and the statistics.
PENDULUM = ppo.Config(
    env_id="Pendulum-v1",
    num_envs=2,
    num_steps=8,
    total_timesteps=16,
    num_minibatches=2,
    log_std_init=3.0,
    normalize_observations=True,
    num_evals=0,
    num_reports=0,
)


@pytest.fixture(scope="module")
def pendulum_step():
    """PENDULUM's initial state, and the state and metrics after one jitted ``step``."""
    state = jax.jit(ppo.init, static_argnums=1)(jax.random.key(0), PENDULUM)  # one program, not op by op
    stepped, metrics = jax.jit(ppo.step, static_argnames="config")(state, jax.random.key(1), PENDULUM)
    return state, stepped, metrics


@pytest.mark.slow
def test_update_is_usable_on_its_own(pendulum_step):
    """``step`` is collect + update (+ the observation statistics): calling the pieces
    by hand, with the keys ``step`` splits, gives the same state."""
    config = PENDULUM
    state, stepped, metrics = pendulum_step
    assert set(metrics) >= {"policy_loss", "value_loss", "episode_return", "timesteps"}
    assert int(stepped.timesteps) == config.num_envs * config.num_steps

    def by_hand(state, key):
        collect_key, update_key = jax.random.split(key)
        state, trajectory = onpolicy.collect_latest(state, collect_key, config)
        state, _ = ppo.update(state, trajectory, update_key, config)
        return onpolicy.update_obs_stats(state, trajectory, config)

    pieces = jax.jit(by_hand)(state, jax.random.key(1))
    for a, b in zip(leaves(stepped), leaves(pieces), strict=True):  # params, optimiser, envs, statistics, keys
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    changed = jax.tree.map(lambda a, b: not np.allclose(a, b), state.params["network"], stepped.params["network"])
    assert any(jax.tree.leaves(changed))


@pytest.mark.slow
def test_continuous_actions_are_clipped_to_bounds(pendulum_step):
    params = pendulum_step[0].params
    action, _ = ppo.act(params, jnp.zeros((1000, 3)), (), jax.random.key(0), PENDULUM)
    assert action.shape == (1000, 1)
    assert float(action.min()) == -2.0 and float(action.max()) == 2.0


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(num_envs=0), "num_envs"),
        (dict(num_steps=-1), "num_steps"),
        (dict(num_minibatches=3), "num_minibatches"),
        (dict(num_epochs=0), "num_epochs"),
        (dict(total_timesteps=10), "total_timesteps"),
        (dict(hidden_sizes=(64, 0)), "hidden_sizes"),
        (dict(activation="sigmoidish"), "activation"),
        (dict(env_id="CartPol-v1"), "CartPole-v1"),
        (dict(env_kwargs={"max_steps": 200}), "max_steps"),
        (dict(network="cnn"), "network='cnn'"),
    ],
)
def test_bad_static_config_is_a_clear_error(overrides, field):
    with pytest.raises(ValueError, match=field):
        ppo.Config(**overrides)


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(learning_rate=0.0), "learning_rate"),
        (dict(gamma=1.5), "gamma"),
        (dict(gae_lambda=-0.1), "gae_lambda"),
        (dict(clip_eps=0.0), "clip_eps"),
        (dict(learning_rate=jnp.array([1e-3, -1.0])), "learning_rate"),
    ],
)
def test_bad_hyperparameter_is_a_clear_error(overrides, field):
    with pytest.raises(ValueError, match=field):
        ppo.init(jax.random.key(0), SMALL.replace(**overrides))


def test_env_overrides_reach_the_env():
    config = ppo.Config(env_kwargs={"max_steps_in_episode": 200})
    _, env_params = onpolicy.make_env(config)
    assert env_params.max_steps_in_episode == 200
    assert hash(config) == hash(ppo.Config(env_kwargs={"max_steps_in_episode": 200}))


def _final_eval(metrics):
    evals = np.asarray(metrics["eval_return"])
    return evals[:, ~np.isnan(evals[0])][:, -1]


@pytest.mark.learns
@pytest.mark.optimised
def test_learns_cartpole():
    """CartPole-v1, default config at 300k steps (not its 500k): final deterministic
    evaluation return (mean of 10 episodes) >= 475 in at least 4 of 5 seeds. In trials
    over 8 seeds (jax.random.key(42)) all 8 ended at 500 with 300k steps, 6 of 8 at >= 475
    with 200k."""
    config = ppo.Config(env_id="CartPole-v1", total_timesteps=300_000, num_evals=1, num_reports=0)
    keys = jax.random.split(jax.random.key(42), 5)
    out = jax.jit(jax.vmap(ppo.train, in_axes=(0, None)))(keys, config)
    final = _final_eval(out.metrics)
    assert (final >= 475).sum() >= 4, final


@pytest.mark.learns
@pytest.mark.optimised
def test_learns_pendulum():
    """Pendulum-v1, the Pendulum preset, 300k steps: final deterministic evaluation return
    (mean of 50 episodes) >= -250 in at least 4 of 5 seeds.

    50 episodes, not the default 10: Pendulum's returns depend much on the start state,
    and with 10 the evaluation's own noise failed about one seed in eight. With 50, 96
    of 100 seeds passed (keys 3 and 5: 40 seeds each, key 7: 20), so 4 of 5 holds for
    about 98% of draws and a change that only reorders floating-point sums is unlikely
    to fail this test."""
    config = ppo.preset("Pendulum-v1", num_reports=0, num_evals=1, eval_episodes=50)  # only the final one counts
    assert config.total_timesteps == 300_000
    keys = jax.random.split(jax.random.key(42), 5)
    out = jax.jit(jax.vmap(ppo.train, in_axes=(0, None)))(keys, config)
    final = _final_eval(out.metrics)
    assert (final >= -250).sum() >= 4, final


@pytest.mark.slow
def test_observation_statistics_live_in_params(pendulum_step):
    """With normalize_observations, ``step`` folds each rollout's raw observations into
    ``params["obs_stats"]`` (after the update), so ``act`` needs nothing but params."""
    state, stepped, _ = pendulum_step
    obs_before = np.asarray(state.obs)
    stats = stepped.params["obs_stats"]
    np.testing.assert_allclose(float(stats.count), 16 + 1e-4, rtol=1e-6)
    assert np.all(np.abs(np.asarray(stats.mean)) <= 8.0)  # Pendulum's observation bounds
    assert np.asarray(stats.mean)[2] != 0.0
    np.testing.assert_array_equal(np.asarray(stats.mean).shape, obs_before.shape[1:])


@pytest.mark.slow
def test_progress_reports_reach_host_sinks():
    from jaxrl.workflow import logging as jaxrl_logging

    config = SMALL.replace(num_reports=3)
    seen = []
    with jaxrl_logging.sink(seen.append):
        out = jax.block_until_ready(jax.jit(ppo.train)(jax.random.key(0), config))
    timesteps = [int(report["timesteps"]) for report in seen]
    assert len(timesteps) == 3 and timesteps[-1] == int(out.state.timesteps)
    assert timesteps == sorted(timesteps)


# ----------------------------------------------------------------------------- the loss against NumPy


def numpy_ppo_loss(logits, value, batch, config):
    """PPO's loss written out in NumPy (float64) from the network's outputs on the batch:
    the clipped surrogate, the (clipped) value loss, the entropy bonus, each a mean over
    the valid rows, with advantages standardised over the valid rows."""
    log_p = np_log_softmax(logits)
    valid = batch["valid"]
    mean = lambda x: x[valid].mean()  # noqa: E731
    ratio = np.exp(log_p[np.arange(len(valid)), batch["action"]] - batch["log_prob"])
    advantage = batch["advantage"]  # standardised: PPO always does (PureJaxRL, CleanRL)
    advantage = (advantage - mean(advantage)) / (np.sqrt(mean((advantage - mean(advantage)) ** 2)) + 1e-8)
    eps = config.clip_eps
    policy_loss = -mean(np.minimum(ratio * advantage, np.clip(ratio, 1 - eps, 1 + eps) * advantage))
    value_error = (value - batch["target"]) ** 2
    if config.clip_value_loss:
        clipped = batch["value"] + np.clip(value - batch["value"], -eps, eps)
        value_error = np.maximum(value_error, (clipped - batch["target"]) ** 2)
    value_loss = 0.5 * mean(value_error)
    entropy = mean(-(np.exp(log_p) * log_p).sum(-1))
    loss = policy_loss + config.vf_coef * value_loss - config.ent_coef * entropy
    return loss, {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy}


@pytest.mark.parametrize("clip_value", [True, False])
def test_the_loss_equals_a_numpy_formula_on_random_batches(clip_value):
    """Random minibatches whose old log-probabilities put the ratio on both sides of
    the clip range, old values on both sides of the value clip, and padding rows
    (``valid = False``) that no term may count."""
    config = SMALL.replace(clip_value_loss=clip_value, ent_coef=0.03, vf_coef=0.7)
    params = ppo.init(jax.random.key(0), config).params
    rng = np.random.default_rng(1)
    rows = 64
    obs = rng.normal(size=(rows, 4)).astype(np.float32)
    distribution, value = ppo.minibatch_policy_and_value(params, {"obs": obs}, config)
    logits, value = np.asarray(distribution.logits, np.float64), np.asarray(value, np.float64)
    action = rng.integers(0, 2, rows)
    current = np_log_softmax(logits)[np.arange(rows), action]
    batch = {
        "obs": obs,
        "action": action.astype(np.int32),
        "log_prob": (current + rng.normal(scale=0.5, size=rows)).astype(np.float32),  # ratios well outside 1 +- 0.2
        "value": (value + rng.normal(scale=0.5, size=rows)).astype(np.float32),
        "advantage": rng.normal(loc=0.3, scale=2.0, size=rows).astype(np.float32),
        "target": (value + rng.normal(size=rows)).astype(np.float32),
        "valid": rng.random(rows) < 0.8,
    }
    batch["advantage"][~batch["valid"]] = 1e3  # padding: huge values that would show if counted
    loss, metrics = ppo.loss_fn(params["network"], params["obs_stats"], batch, config)
    expected, expected_metrics = numpy_ppo_loss(logits, value, {k: np.asarray(v) for k, v in batch.items()}, config)
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5, atol=1e-6)
    for name, value in expected_metrics.items():
        np.testing.assert_allclose(float(metrics[name]), value, rtol=1e-5, atol=1e-6, err_msg=name)
    ratio = np.exp(current - batch["log_prob"])[batch["valid"]]
    assert (ratio > 1.2).any() and (ratio < 0.8).any()  # both sides of the clip are exercised
