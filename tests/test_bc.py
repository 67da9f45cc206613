"""Behaviour cloning: its three losses against NumPy computations written here, the API
contract (jit, vmap over seeds and learning rates, determinism, errors, the CLI) and
learning tests that clone PPO experts trained in the test.

Compiles dominate on a 2-core CPU: the API tests share one small config on a synthetic
dataset whose program compiles once per transformation (module-scoped fixtures).
"""

import functools
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import data, sweep_axes
from jaxrl.algorithms import bc, get, ppo
from jaxrl.workflow import cli

SMALL = bc.Config(
    env_id="CartPole-v1", num_updates=6, batch_size=16, hidden_sizes=(8,), num_evals=2, eval_episodes=2, num_reports=0
)


def synthetic_dataset(env_id, size, seed=0, obs_dim=4, action_dim=None, num_actions=2):
    """Random transitions with the schema of ``env_id`` (continuous if ``action_dim``)."""
    rng = np.random.default_rng(seed)
    action = (
        rng.uniform(-2.0, 2.0, (size, action_dim)).astype(np.float32)
        if action_dim
        else rng.integers(0, num_actions, size).astype(np.int32)
    )
    zeros = np.zeros(size, np.float32)
    return data.Dataset(
        obs=jnp.asarray(rng.normal(1.0, 2.0, (size, obs_dim)).astype(np.float32)),
        action=jnp.asarray(action),
        reward=jnp.asarray(zeros),
        terminated=jnp.zeros(size, bool),
        truncated=jnp.zeros(size, bool),
        next_obs=jnp.asarray(rng.normal(size=(size, obs_dim)).astype(np.float32)),
        episode_return=jnp.asarray(zeros),
        episode_length=jnp.zeros(size, jnp.int32),
        env_id=env_id,
    )


DATASET = synthetic_dataset("CartPole-v1", 64)
# The continuous-action tests share these, so each jitted piece compiles once per loss.
PENDULUM = {
    loss: bc.Config(env_id="Pendulum-v1", loss=loss, hidden_sizes=(8,), batch_size=8) for loss in ("mse", "gaussian")
}
PENDULUM_DATASET = synthetic_dataset("Pendulum-v1", 32, seed=1, obs_dim=3, action_dim=1)


@pytest.fixture(scope="module")
def train_small():
    return jax.jit(bc.train)


@pytest.fixture(scope="module")
def small_run(train_small):
    return train_small(jax.random.key(0), SMALL, DATASET)


def jit(fn):
    """``fn`` compiled with its ``config`` argument static (eager op-by-op runs are slow)."""
    return jax.jit(fn, static_argnames="config")


def assert_trees_close(a, b, rtol=1e-5, atol=1e-5):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol, equal_nan=True)


# ----------------------------------------------------------------------------- numerics


def np_network(params, obs):
    """The normalised observations through the Actor's MLP torso, then its dense heads
    ``Dense_0`` (and ``Dense_1``, the Gaussian's raw log-std), in NumPy."""
    stats = params["obs_stats"]
    x = np.clip((obs - np.asarray(stats.mean)) / np.sqrt(np.asarray(stats.var) + 1e-8), -10.0, 10.0)
    p = jax.tree.map(np.asarray, params["network"]["params"])
    for i in range(len(p["MLP_0"])):
        x = np.maximum(x @ p["MLP_0"][f"Dense_{i}"]["kernel"] + p["MLP_0"][f"Dense_{i}"]["bias"], 0.0)
    return [x @ p[head]["kernel"] + p[head]["bias"] for head in ("Dense_0", "Dense_1") if head in p]


def perturbed_state(config, dataset, seed=0):
    """``init``'s state with every weight moved off its (near-zero-output) init."""
    state = jit(bc.init)(jax.random.key(seed), config, dataset)
    rng = np.random.default_rng(seed)
    network = jax.tree.map(lambda w: w + rng.normal(0.0, 0.5, w.shape).astype(np.float32), state.params["network"])
    return state.replace(params={**state.params, "network": network})


@pytest.mark.slow
@pytest.mark.parametrize(
    "env_id, loss",
    [("CartPole-v1", "mse"), ("Pendulum-v1", "mse"), ("Pendulum-v1", "gaussian")],
    ids=["cross-entropy", "mse", "gaussian"],
)
def test_loss_matches_numpy(env_id, loss):
    """Cross-entropy of the categorical policy; squared error of the tanh policy mapped
    onto [-2, 2]; the negative log-likelihood of a diagonal Gaussian with log-std
    squashed into [-5, 2]."""
    continuous = env_id == "Pendulum-v1"
    config, dataset = (PENDULUM[loss], PENDULUM_DATASET) if continuous else (SMALL, DATASET)
    state = perturbed_state(config, dataset)
    value, metrics = jit(bc.loss_fn)(state.params["network"], state.params["obs_stats"], dataset, config)
    obs, action = np.asarray(dataset.obs), np.asarray(dataset.action)
    heads = np_network(state.params, obs)
    if not continuous:
        logits = heads[0]
        top = logits.max(-1, keepdims=True)
        log_p = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
        expected = -np.mean(log_p[np.arange(len(action)), action])
        np.testing.assert_allclose(metrics["accuracy"], np.mean(logits.argmax(-1) == action), rtol=1e-6)
    elif loss == "mse":
        expected = np.mean((-2.0 + 0.5 * (np.tanh(heads[0]) + 1.0) * 4.0 - action) ** 2)
    else:
        loc, log_std = heads[0], -5.0 + 3.5 * (np.tanh(heads[1]) + 1.0)
        nll = 0.5 * ((action - loc) / np.exp(log_std)) ** 2 + log_std + 0.5 * math.log(2.0 * math.pi)
        expected = np.mean(nll.sum(-1))
    assert float(value) > 0.05 or loss == "gaussian"  # the perturbed network is far from the labels
    np.testing.assert_allclose(value, expected, rtol=1e-4)
    np.testing.assert_allclose(metrics["loss"], expected, rtol=1e-4)


def test_observation_statistics_come_from_the_dataset():
    stats = jit(bc.init)(jax.random.key(0), SMALL, DATASET).params["obs_stats"]
    obs = np.asarray(DATASET.obs)
    np.testing.assert_allclose(stats.mean, obs.mean(0), rtol=1e-3)
    np.testing.assert_allclose(stats.var, obs.var(0), rtol=1e-3)


def test_update_is_one_adam_step_on_the_batch():
    """Adam's first step moves every weight by ``-lr * g / (|g| + eps)``: about
    ``-lr * sign(g)`` wherever the gradient is not tiny."""
    state = perturbed_state(SMALL, DATASET)
    config = SMALL.replace(learning_rate=0.01)
    grads, _ = jit(jax.grad(bc.loss_fn, has_aux=True))(
        state.params["network"], state.params["obs_stats"], DATASET, config=config
    )
    stepped, metrics = jit(bc.update)(state, DATASET, jax.random.key(0), config)
    assert int(stepped.updates) == 1 and set(metrics) == {"loss", "accuracy"}
    for g, before, after in zip(
        jax.tree.leaves(grads), jax.tree.leaves(state.params["network"]), jax.tree.leaves(stepped.params["network"])
    ):
        g, moved = np.asarray(g), np.asarray(after) - np.asarray(before)
        large = np.abs(g) > 1e-4
        np.testing.assert_allclose(moved[large], -0.01 * np.sign(g[large]), rtol=1e-2)


# ----------------------------------------------------------------------------- API


def test_registry():
    assert get("bc") is bc.algorithm


def test_metrics_shapes_and_contents(small_run):
    metrics = small_run.metrics
    for name in ("loss", "accuracy", "updates", "eval_return", "eval_length"):
        assert metrics[name].shape == (SMALL.num_updates,), name
    np.testing.assert_array_equal(metrics["updates"], np.arange(1, SMALL.num_updates + 1))
    evaluated = ~np.isnan(np.asarray(metrics["eval_return"]))
    assert evaluated.sum() == SMALL.num_evals and evaluated[-1]
    assert small_run.state.dataset.size == DATASET.size


def test_same_key_same_result(train_small, small_run):
    again = train_small(jax.random.key(0), SMALL, DATASET)
    for x, y in zip(jax.tree.leaves(small_run), jax.tree.leaves(again)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    other = train_small(jax.random.key(1), SMALL, DATASET)
    assert not np.allclose(np.asarray(other.metrics["loss"]), np.asarray(small_run.metrics["loss"]))


@pytest.mark.slow
def test_vmap_over_seeds_and_learning_rates_compiles_once(train_small):
    """One program maps over seeds and learning rates together; each lane equals the
    separate run with its own key and rate, and new rates do not recompile."""
    rates = [1e-4, 1e-2]
    configs = SMALL.replace(learning_rate=jnp.array(rates))
    keys = jax.random.split(jax.random.key(4), 2)
    sweep = jax.jit(jax.vmap(bc.train, in_axes=(0, sweep_axes(configs), None)))
    out = sweep(keys, configs, DATASET)
    sweep(keys, configs.replace(learning_rate=jnp.array([3e-4, 3e-3])), DATASET)
    assert sweep._cache_size() == 1
    train_small(keys[0], SMALL, DATASET)
    programs = train_small._cache_size()
    for i, rate in enumerate(rates):
        single = train_small(keys[i], SMALL.replace(learning_rate=rate), DATASET)
        assert_trees_close(jax.tree.map(lambda x: x[i], out.metrics), single.metrics, rtol=1e-4, atol=1e-5)
    assert train_small._cache_size() == programs


@pytest.mark.slow
def test_act_from_params_alone(small_run):
    params = small_run.state.params
    obs = jnp.zeros((5, 4))
    action, carry = bc.act(params, obs, bc.initial_carry(SMALL, 5), jax.random.key(0), SMALL)
    assert action.shape == (5,) and carry == ()
    greedy, _ = bc.act(params, obs, (), jax.random.key(1), SMALL, deterministic=True)
    assert greedy.dtype == jnp.int32
    np.testing.assert_array_equal(greedy, bc.act(params, obs, (), jax.random.key(2), SMALL, deterministic=True)[0])


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["mse", "gaussian"])
def test_continuous_actions_stay_in_bounds(loss):
    config = PENDULUM[loss]
    state = perturbed_state(config, PENDULUM_DATASET)
    obs = jnp.asarray(np.random.default_rng(0).normal(0.0, 3.0, (1000, 3)), jnp.float32)
    sampled = np.asarray(bc.act(state.params, obs, (), jax.random.key(0), config)[0])
    greedy = np.asarray(bc.act(state.params, obs, (), jax.random.key(0), config, deterministic=True)[0])
    assert sampled.shape == greedy.shape == (1000, 1)
    assert sampled.min() >= -2.0 and sampled.max() <= 2.0 and greedy.min() >= -2.0 and greedy.max() <= 2.0
    if loss == "gaussian":  # wide samples reach the bounds; the mean is the greedy action
        assert sampled.min() == -2.0 and sampled.max() == 2.0
        assert not np.array_equal(sampled, greedy)
    else:
        np.testing.assert_array_equal(sampled, greedy)


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(num_updates=0), "num_updates"),
        (dict(batch_size=-1), "batch_size"),
        (dict(loss="l1"), "loss"),
        (dict(hidden_sizes=(8, 0)), "hidden_sizes"),
        (dict(eval_episodes=0), "eval_episodes"),
        (dict(env_id="CartPol-v1"), "CartPole-v1"),
    ],
)
def test_bad_static_config_is_a_clear_error(overrides, field):
    with pytest.raises(ValueError, match=field):
        bc.Config(**{**SMALL.__dict__, **overrides})


@pytest.mark.parametrize(
    "config, dataset, field",
    [
        (SMALL.replace(learning_rate=0.0), DATASET, "learning_rate"),
        (SMALL.replace(learning_rate=jnp.array([1e-3, -1.0])), DATASET, "learning_rate"),
        (
            bc.Config(**{**SMALL.__dict__, "batch_size": 65}),
            DATASET,
            r"batch_size \(65\) must be at most the dataset's 64",
        ),
        (bc.Config(env_id="Acrobot-v1"), DATASET, "env_id is 'CartPole-v1', expected 'Acrobot-v1'"),
        (SMALL, synthetic_dataset("", 64, obs_dim=6), "field 'obs' has observations of shape"),
        (bc.Config(env_id="Pendulum-v1"), synthetic_dataset("", 64, obs_dim=3), "field 'action' has actions of shape"),
    ],
)
def test_bad_config_or_dataset_is_a_clear_error_at_init(config, dataset, field):
    with pytest.raises(ValueError, match=field):
        bc.init(jax.random.key(0), config, dataset)


def test_train_without_a_dataset_is_a_clear_error():
    with pytest.raises(ValueError, match="dataset_path"):
        bc.train(jax.random.key(0), SMALL)
    with pytest.raises(FileNotFoundError, match="dataset_path '/nonexistent/data.npz': no such file"):
        bc.train(jax.random.key(0), SMALL.replace(dataset_path="/nonexistent/data.npz"))


def test_command_line_errors(tmp_path, capsys):
    """A missing dataset file, no dataset, a flag that does not apply or a dataset of
    another env is one line on stderr and exit status 2 (a successful run is part of
    the CartPole learning test)."""
    path = tmp_path / "cartpole.npz"
    data.save_dataset(path, DATASET)
    for args, message in [
        (["--set", f"dataset_path={tmp_path / 'missing.npz'}"], "missing.npz': no such file"),
        ([], "bc.train needs a dataset"),
        (["--set", f"dataset_path={path}", "--total-timesteps", "100"], "--total-timesteps does not apply to bc"),
        (["--env", "Acrobot-v1", "--set", f"dataset_path={path}"], "env_id is 'CartPole-v1', expected 'Acrobot-v1'"),
    ]:
        assert cli.main(["train", "bc", "--no-cache", "--no-progress", *args]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], lines


def test_help_lists_the_bc_fields(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", "bc", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "dataset_path" in out and "num_updates" in out and "loss" in out


# ----------------------------------------------------------------------------- learning


def record_expert(expert_config, num_transitions):
    """Train a PPO expert (one seed) and record ``num_transitions`` of its deterministic
    policy from 10 envs. Returns the expert's final evaluation return and the dataset."""
    expert = jax.jit(ppo.train)(jax.random.key(0), expert_config)
    act_fn = functools.partial(ppo.act, config=expert_config, deterministic=True)
    dataset = data.collect_dataset(
        act_fn, expert.state.params, expert_config.env_id, jax.random.key(1), num_transitions, num_envs=10
    )
    return float(expert.metrics["eval_return"][-1]), dataset


@pytest.mark.learns
@pytest.mark.optimised
def test_clones_a_cartpole_expert_from_the_command_line(tmp_path, capsys):
    """CartPole-v1: a PPO expert (default config, 500k steps); 10k transitions of its
    deterministic policy, saved to a file; ``python -m jaxrl train bc`` on that file
    over 5 seeds (cross-entropy, 1000 updates of batch 256): final deterministic
    evaluation return (mean of 20 episodes) >= 90% of the expert's in at least 4 of 5
    seeds.

    The data comes from the expert's deterministic policy, the policy whose return is
    the bar, so the labels are exactly the actions being imitated (no sampling noise
    to fit)."""
    expert_return, dataset = record_expert(
        ppo.Config(env_id="CartPole-v1", num_evals=1, eval_episodes=20, num_reports=0), 10_000
    )
    assert expert_return >= 400, expert_return  # a bar worth clearing
    path, summary = tmp_path / "cartpole.npz", tmp_path / "summary.json"
    data.save_dataset(path, dataset)
    assert (
        cli.main(
            [
                "train",
                "bc",
                "--env",
                "CartPole-v1",
                "--seeds",
                "5",
                "--set",
                f"dataset_path={path}",
                "--set",
                "num_updates=1000",
                "--set",
                "num_evals=1",
                "--set",
                "eval_episodes=20",
                "--no-cache",
                "--no-progress",
                "--json",
                str(summary),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "5 seed(s) x 1,000 updates" in out and "eval return" in out and "train return" not in out
    result = json.loads(summary.read_text())
    assert result["total_updates"] == 1000 and "updates_per_second" in result
    cloned = np.array(result["eval_return"])
    with capsys.disabled():  # shown with -s, like the Pendulum test's
        print(f"CartPole-v1: expert {expert_return:.1f}, BC {np.round(cloned, 1)}")
    assert (cloned >= 0.9 * expert_return).sum() >= 4, (expert_return, cloned)


@pytest.mark.learns
@pytest.mark.optimised
def test_clones_a_pendulum_expert():
    """Pendulum-v1: a PPO expert (the Pendulum preset with 64x64 layers and GAE lambda
    0.95, fixed here so that retuning the preset does not change this test's expert; 300k
    steps); 10k transitions (50 episodes) of its deterministic policy; BC over 5 vmapped
    seeds (``loss="mse"``, 1000 updates of batch 256): final deterministic evaluation
    return (mean of 20 episodes) within 100 of the expert's in at least 4 of 5 seeds
    (random play scores about -1200)."""
    expert_return, dataset = record_expert(
        ppo.preset("Pendulum-v1", hidden_sizes=(64, 64), gae_lambda=0.95, num_evals=1, eval_episodes=20, num_reports=0),
        10_000,
    )
    assert expert_return >= -300, expert_return
    config = bc.Config(env_id="Pendulum-v1", loss="mse", num_updates=1000, num_evals=1, eval_episodes=20, num_reports=0)
    keys = jax.random.split(jax.random.key(2), 5)
    out = jax.jit(jax.vmap(bc.train, in_axes=(0, None, None)))(keys, config, dataset)
    cloned = np.asarray(out.metrics["eval_return"][:, -1])
    print(f"Pendulum-v1: expert {expert_return:.1f}, BC {np.round(cloned, 1)}")
    assert (cloned >= expert_return - 100).sum() >= 4, (expert_return, cloned)
