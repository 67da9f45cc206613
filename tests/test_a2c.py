"""A2C, REINFORCE and IMPALA (one policy-gradient learner, ``jaxrl/algorithms/policy_gradient.py``,
with each algorithm's targets).

Targets are checked against plain NumPy loops on random trajectories with terminations
and truncations; the policy-lag queue, the contract (jit, vmap over seeds and
hyper-parameters, determinism, errors) on small configs; learning on CartPole.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from test_distributions import np_log_softmax
from test_returns import oracle_gae

from jaxrl import sweep_axes
from jaxrl.algorithms import a2c, get, impala, onpolicy, reinforce
from jaxrl.types import Trajectory

CARTPOLE_200 = {"max_steps_in_episode": 200}
SMALL = a2c.Config(
    env_id="CartPole-v1",
    num_envs=4,
    num_steps=8,
    total_timesteps=4 * 8 * 6,
    hidden_sizes=(16, 16),
    num_evals=2,
    eval_episodes=2,
    num_reports=0,
)


# ----------------------------------------------------------------------------- targets


def random_trajectory(seed, T=24, N=3):
    """Rewards, dones (terminations and truncations mid-sequence, and at the end in some
    lanes), values and behaviour log-probs, as a ``Trajectory`` plus the learner's
    ``value``, ``value_next`` and ``log_prob`` ``[T, N]``. As in a real rollout,
    ``value_next[t] == value[t + 1]`` inside an episode; at episode ends it is the value
    of the final observation, an independent number."""
    rng = np.random.default_rng(seed)
    terminated = rng.random((T, N)) < 0.08
    truncated = (rng.random((T, N)) < 0.08) & ~terminated
    terminated[5, 0], truncated[9, 1], truncated[T - 1, 2] = True, True, True
    f32 = lambda *shape: rng.normal(size=shape).astype(np.float32)  # noqa: E731
    trajectory = Trajectory(
        obs=f32(T, N, 4),
        action=np.zeros((T, N), np.int32),
        reward=f32(T, N),
        terminated=jnp.asarray(terminated),
        truncated=jnp.asarray(truncated),
        next_obs=f32(T, N, 4),
        episode_return=np.zeros((T, N), np.float32),
        episode_length=np.zeros((T, N), np.int32),
        extras={"log_prob": f32(T, N) - 1.0, "value": f32(T, N)},
    )
    value, value_next = f32(T, N), f32(T, N)
    continues = ~(terminated | truncated)[:-1]
    value_next[:-1][continues] = value[1:][continues]
    return trajectory, value, value_next, f32(T, N) - 1.0


def oracle_returns_to_first_end(r, v_next, term, trunc, gamma):
    """Per lane: the discounted return of every step of the first episode (bootstrapped
    from ``v_next`` where it was truncated or cut by the sequence end) and the mask of
    those steps."""
    T, N = r.shape
    G, mask = np.zeros((T, N)), np.zeros((T, N), bool)
    for n in range(N):
        ends = [t for t in range(T) if term[t, n] or trunc[t, n]]
        end = ends[0] if ends else T - 1
        for t in range(end + 1):
            G[t, n] = sum(gamma ** (k - t) * r[k, n] for k in range(t, end + 1))
            if not term[end, n]:
                G[t, n] += gamma ** (end - t + 1) * v_next[end, n]
            mask[t, n] = True
    return G, mask


def oracle_nstep_to_sequence_end(r, v_next, term, trunc, gamma):
    """Per step: rewards to the end of its episode or of the sequence, bootstrapped from
    ``v_next`` there unless terminated (the on-policy n-step return)."""
    T, N = r.shape
    G = np.zeros((T, N))
    for n in range(N):
        for t in range(T):
            total, k = 0.0, t
            while True:
                total += gamma ** (k - t) * r[k, n]
                if term[k, n]:
                    break
                if trunc[k, n] or k == T - 1:
                    total += gamma ** (k - t + 1) * v_next[k, n]
                    break
                k += 1
            G[t, n] = total
    return G


def as_np(*xs):
    return [np.asarray(x, np.float64) for x in xs]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("baseline", [True, False])
def test_monte_carlo_targets_use_each_envs_first_episode(seed, baseline):
    trajectory, value, value_next, log_prob = random_trajectory(seed)
    config = reinforce.Config(
        env_id="CartPole-v1", env_kwargs=CARTPOLE_200, baseline=baseline, normalize_advantages=False, gamma=0.9
    )
    advantage, target, mask = reinforce.targets(value, value_next, log_prob, trajectory, config)
    r, v, vn = as_np(trajectory.reward, value, value_next)
    bootstrap = vn if baseline else np.zeros_like(vn)
    G, expected_mask = oracle_returns_to_first_end(
        r, bootstrap, np.asarray(trajectory.terminated), np.asarray(trajectory.truncated), 0.9
    )
    np.testing.assert_array_equal(np.asarray(mask), expected_mask)
    assert 0 < expected_mask.sum() < expected_mask.size
    m = expected_mask
    np.testing.assert_allclose(np.asarray(target)[m], G[m], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(advantage)[m], (G - v)[m] if baseline else G[m], rtol=1e-5, atol=1e-5)


def test_normalized_advantages_use_only_masked_steps():
    trajectory, value, value_next, log_prob = random_trajectory(3)
    config = reinforce.Config(env_id="CartPole-v1", env_kwargs=CARTPOLE_200, normalize_advantages=True)
    advantage, _, mask = reinforce.targets(value, value_next, log_prob, trajectory, config)
    kept = np.asarray(advantage)[np.asarray(mask)]
    np.testing.assert_allclose([kept.mean(), kept.std()], [0.0, 1.0], atol=1e-4)


@pytest.mark.parametrize("seed", [0, 1])
def test_vtrace_with_lag_zero_and_no_clipping_reduces_to_n_step_returns(seed):
    """The issue's reduction: on-policy (log rho = 0), rho_bar = c_bar = inf, lambda 1."""
    trajectory, value, value_next, _ = random_trajectory(seed)
    log_prob = trajectory.extras["log_prob"]  # the learner is the behaviour policy
    config = impala.Config(policy_lag=0, rho_bar=jnp.inf, c_bar=jnp.inf, gae_lambda=1.0, gamma=0.95)
    advantage, target, mask = impala.targets(value, value_next, log_prob, trajectory, config)
    r, v, vn = as_np(trajectory.reward, value, value_next)
    G = oracle_nstep_to_sequence_end(r, vn, np.asarray(trajectory.terminated), np.asarray(trajectory.truncated), 0.95)
    assert np.all(np.asarray(mask))
    np.testing.assert_allclose(np.asarray(target), G, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(advantage), G - v, rtol=1e-5, atol=1e-5)
    # ... which is exactly A2C's estimator at lambda 1.
    a2c_advantage, a2c_target, _ = a2c.targets(
        value, value_next, log_prob, trajectory, a2c.Config(gae_lambda=1.0, gamma=0.95)
    )
    np.testing.assert_allclose(np.asarray(a2c_target), np.asarray(target), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(a2c_advantage), np.asarray(advantage), rtol=1e-5, atol=1e-5)


def test_vtrace_clips_off_policy_importance_weights():
    """With log rho far from 0 the truncated weights change the targets, and a weight
    above rho_bar counts as rho_bar (the policy-gradient advantage scales with it)."""
    trajectory, value, value_next, _ = random_trajectory(4)
    log_prob = trajectory.extras["log_prob"] + 2.0  # pi/mu = e^2 > rho_bar everywhere
    clipped = impala.Config(rho_bar=1.0, c_bar=1.0, gae_lambda=1.0)
    advantage, target, _ = impala.targets(value, value_next, log_prob, trajectory, clipped)
    on_policy = impala.targets(value, value_next, trajectory.extras["log_prob"], trajectory, clipped)
    # Every weight is clipped to 1: identical to the on-policy targets.
    np.testing.assert_allclose(np.asarray(target), np.asarray(on_policy[1]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(advantage), np.asarray(on_policy[0]), rtol=1e-5, atol=1e-5)
    unclipped = impala.targets(value, value_next, log_prob, trajectory, clipped.replace(rho_bar=jnp.inf, c_bar=jnp.inf))
    assert not np.allclose(np.asarray(unclipped[1]), np.asarray(target))


# ----------------------------------------------------------------------------- the algorithm


@pytest.fixture(scope="module")
def train_small():
    return jax.jit(a2c.train)


@pytest.fixture(scope="module")
def small_run(train_small):
    return train_small(jax.random.key(0), SMALL)


def test_registry():
    for name, module in (("a2c", a2c), ("reinforce", reinforce), ("impala", impala)):
        assert get(name) is module.algorithm


def test_metrics_and_determinism(train_small, small_run):
    metrics = small_run.metrics
    for name in (
        "timesteps",
        "episode_return",
        "policy_loss",
        "value_loss",
        "entropy",
        "approx_kl",
        "learning_rate",
        "eval_return",
    ):
        assert metrics[name].shape == (SMALL.num_iterations,), name
    np.testing.assert_array_equal(metrics["timesteps"], 32 * np.arange(1, SMALL.num_iterations + 1))
    # Without policy lag the learner is the behaviour policy.
    np.testing.assert_allclose(np.asarray(metrics["approx_kl"]), 0.0, atol=1e-6)
    assert np.sum(~np.isnan(np.asarray(metrics["eval_return"]))) == SMALL.num_evals
    again = train_small(jax.random.key(0), SMALL)
    for x, y in zip(jax.tree.leaves(small_run), jax.tree.leaves(again)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.slow
def test_vmap_over_seeds_and_hyperparameters_compiles_once(train_small):
    keys = jax.random.split(jax.random.key(3), 2)
    configs = SMALL.replace(learning_rate=jnp.array([1e-3, 1e-2]), gae_lambda=jnp.array([0.9, 1.0]))
    sweep = jax.jit(jax.vmap(a2c.train, in_axes=(0, sweep_axes(configs))))
    out = sweep(keys, configs)
    out = sweep(keys, configs.replace(ent_coef=0.02))  # a new value, the same program
    assert sweep._cache_size() == 1
    for i, (lr, lam) in enumerate([(1e-3, 0.9), (1e-2, 1.0)]):
        single = train_small(keys[i], SMALL.replace(learning_rate=lr, gae_lambda=lam, ent_coef=0.02))
        for x, y in zip(jax.tree.leaves(single.metrics), jax.tree.leaves(jax.tree.map(lambda x: x[i], out.metrics))):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_the_update_on_flat_parameters_equals_a_per_leaf_update():
    """The optimiser steps on the network's parameters as one flat vector
    (``jaxrl.optim``). Two updates written here with optax on the parameter
    pytree give the same networks up to rounding (only the clip's sum of squares is
    added in another order); the clip is active and Adam's moments carry over."""
    config = SMALL.replace(max_grad_norm=1e-3)
    # Each piece compiled once (op by op, their many small operations each compile).
    initial = jax.jit(a2c.init, static_argnums=1)(jax.random.key(0), config)
    state, trajectory = jax.jit(onpolicy.collect, static_argnums=3)(initial, initial.params, jax.random.key(1), config)
    update = jax.jit(lambda s: a2c.update(s, trajectory, jax.random.key(2), config)[0])
    optimizer = onpolicy.make_optimizer(config, updates_per_iteration=1)
    obs_stats = state.params["obs_stats"]

    @jax.jit
    def grads(network):  # as a2c.update: bootstrap values from the current network, not differentiated
        value_next = onpolicy.bootstrap_value({"network": network, "obs_stats": obs_stats}, trajectory, config)
        return jax.grad(lambda net: a2c.loss_fn(net, obs_stats, trajectory, value_next, config)[0])(network)

    @jax.jit
    def per_leaf_update(network, opt_state):
        updates, opt_state = optimizer.update(grads(network), opt_state, network)
        return optax.apply_updates(network, updates), opt_state

    network, opt_state = state.params["network"], optimizer.init(state.params["network"])
    assert optax.tree.norm(grads(network)) > 10 * config.max_grad_norm
    for _ in range(2):
        state = update(state)
        network, opt_state = per_leaf_update(network, opt_state)
        jax.tree.map(
            lambda ours, reference: np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-7),
            state.params["network"],
            network,
        )
    assert not np.allclose(jax.tree.leaves(network)[0], jax.tree.leaves(initial.params["network"])[0])


@pytest.mark.slow
def test_policy_lag_acts_with_the_params_of_k_updates_ago():
    config = impala.Config(
        num_envs=4, num_steps=8, total_timesteps=4 * 8 * 6, hidden_sizes=(16, 16), policy_lag=2, num_reports=0
    )
    state = impala.init(jax.random.key(0), config)
    step = jax.jit(impala.step, static_argnames="config")
    history = [state.params]
    kls = []
    for i in range(4):
        state, metrics = step(state, jax.random.key(i), config)
        history.append(state.params)
        kls.append(float(metrics["approx_kl"]))
    # After 4 updates the actors hold the params after updates 2 and 3 (oldest first).
    for slot, expected in enumerate(history[2:4]):
        for x, y in zip(
            jax.tree.leaves(jax.tree.map(lambda q: q[slot], state.lagged_params)), jax.tree.leaves(expected)
        ):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # The first two iterations act with the initial params, the learner's first
    # update starts from them too (kl 0); later the learner has moved on (kl > 0).
    assert kls[0] == pytest.approx(0.0, abs=1e-7) and kls[2] > 0 and kls[3] > 0


@pytest.mark.slow
def test_monte_carlo_reports_first_episodes_and_continuous_actions_work():
    config = reinforce.Config(
        env_id="Pendulum-v1",
        num_envs=2,
        total_timesteps=2 * 200 * 2,
        hidden_sizes=(16,),
        num_evals=1,
        eval_episodes=1,
        num_reports=0,
    )
    assert config.num_steps == 200  # the env's time limit
    out = jax.jit(reinforce.train)(jax.random.key(0), config)
    m = jax.tree.map(np.asarray, out.metrics)
    # Pendulum episodes always last 200 steps: one first episode per env per iteration.
    np.testing.assert_array_equal(m["episodes"], [2, 2])
    np.testing.assert_array_equal(m["episode_length"], [200, 200])
    assert np.all(np.isfinite(m["policy_loss"])) and np.all(m["episode_return"] < 0)


@pytest.mark.parametrize(
    "module, kwargs, field",
    [
        (reinforce, dict(baseline="yes"), "baseline"),
        (impala, dict(policy_lag=-1), "policy_lag"),
        (a2c, dict(optimizer="sgd"), "optimizer"),
        (a2c, dict(num_envs=0), "num_envs"),
        (reinforce, dict(num_steps=100), "num_steps"),
        (a2c, dict(num_steps=None), "num_steps"),
        (a2c, dict(env_id="CartPol-v1"), "CartPole-v1"),
    ],
)
def test_bad_config_names_the_field(module, kwargs, field):
    with pytest.raises(ValueError, match=field):
        module.Config(**kwargs)


@pytest.mark.parametrize(
    "module, field",
    [(a2c, "advantage"), (a2c, "baseline"), (a2c, "policy_lag"), (a2c, "rho_bar"), (reinforce, "gae_lambda"),
     (reinforce, "rho_bar"), (impala, "baseline"), (reinforce, "optimizer"), (impala, "optimizer")],
)  # fmt: skip
def test_each_config_holds_only_its_algorithms_fields(module, field):
    """The estimators are modules, not an ``advantage`` flag: A2C's Config has no
    Monte-Carlo or V-trace field, REINFORCE's none of GAE's or V-trace's, and so on."""
    with pytest.raises(TypeError, match=field):
        module.Config(**{field: 1})


@pytest.mark.parametrize("field, value", [("rho_bar", 0.0), ("gae_lambda", 1.5), ("learning_rate", -1.0)])
def test_bad_hyperparameter_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        a2c.init(jax.random.key(0), impala.Config(**{field: value}))


# ----------------------------------------------------------------------------- learning


def solved(config, module, threshold, seeds=5):
    """Final mean evaluation return of each of ``seeds`` vmapped seeds, and whether a
    majority (4 of 5) reached ``threshold``. The configs evaluate once, at the end: the
    final evaluation is the same with more evaluations along the way."""
    keys = jax.random.split(jax.random.key(42), seeds)
    out = jax.jit(jax.vmap(module.train, in_axes=(0, None)))(keys, config)
    eval_return = np.asarray(out.metrics["eval_return"])[:, -1]
    return eval_return, np.sum(eval_return >= threshold) >= 4


@pytest.mark.learns
@pytest.mark.optimised
def test_a2c_solves_cartpole_200():
    """A2C, 16 envs x 8 steps, GAE(0.95): mean eval return >= 195 on 200-step CartPole
    within 100k steps in 4 of 5 seeds."""
    config = a2c.Config(env_kwargs=CARTPOLE_200, total_timesteps=100_000, num_evals=1, num_reports=0)
    returns, ok = solved(config, a2c, 195.0)
    assert ok, returns


@pytest.mark.learns
def test_reinforce_solves_cartpole_200():
    """REINFORCE with a baseline, 8 whole episodes per update: mean eval return >= 195 on
    200-step CartPole within 150k simulated steps in 4 of 5 seeds."""
    config = reinforce.Config(env_kwargs=CARTPOLE_200, total_timesteps=150_000, num_evals=1, num_reports=0)
    returns, ok = solved(config, reinforce, 195.0)
    assert ok, returns


@pytest.mark.learns
@pytest.mark.optimised
def test_impala_learns_cartpole_with_its_actors_4_updates_behind():
    """IMPALA (V-trace, rho_bar = c_bar = 1), 16 envs x 8 steps, actors 4 updates behind
    the learner: mean eval return >= 200 on CartPole-v1 (random play: about 20) within
    200k steps in 4 of 5 seeds. (With the actors in step: a row of
    benchmarks/learning_table.py.)"""
    config = impala.Config(policy_lag=4, total_timesteps=200_000, num_evals=1, num_reports=0)
    returns, ok = solved(config, impala, 200.0)
    assert ok, returns


def test_no_evaluation_branch_without_evaluations():
    """With ``num_evals=0`` the program holds no evaluation loop at all: a loop whose
    predicate is constantly false made XLA:CPU run the whole iteration about 10x slower."""
    loops = {}
    for num_evals in (0, 1):
        config = a2c.Config(total_timesteps=2048, num_evals=num_evals, num_reports=0)
        loops[num_evals] = str(jax.make_jaxpr(lambda key: a2c.train(key, config))(jax.random.key(0))).count("while[")
    assert loops[0] == 0 and loops[1] > 0


def test_moved_helpers_warn_and_name_their_new_place():
    trajectory = random_trajectory(5)[0]
    with pytest.warns(DeprecationWarning, match="reinforce.first_episode_mask"):
        mask = a2c.first_episode_mask(trajectory)
    np.testing.assert_array_equal(mask, reinforce.first_episode_mask(trajectory))


# ----------------------------------------------------------------------------- the loss against NumPy


def numpy_a2c_loss(logits, value, value_next, trajectory, config):
    """A2C's loss written out in NumPy (float64) from the network's outputs: GAE by
    test_returns' backward loop per env (bootstrapping through truncation, not
    termination), the advantages
    standardised over the valid steps with ``normalize_advantages``, and each term a
    mean over the valid steps."""
    reward, terminated, truncated = (
        np.asarray(x) for x in (trajectory.reward, trajectory.terminated, trajectory.truncated)
    )
    gae = [
        oracle_gae(
            reward[:, n],
            value[:, n],
            value_next[:, n],
            terminated[:, n],
            truncated[:, n],
            config.gamma,
            config.gae_lambda,
        )
        for n in range(reward.shape[1])
    ]
    advantage = np.stack(gae, axis=1)
    target = advantage + value
    valid = np.asarray(trajectory.valid)
    mean = lambda x: x[valid].mean()  # noqa: E731
    if config.normalize_advantages:
        advantage = (advantage - mean(advantage)) / (np.sqrt(mean((advantage - mean(advantage)) ** 2)) + 1e-8)
    log_p = np_log_softmax(logits)
    action = np.asarray(trajectory.action)
    log_prob = np.take_along_axis(log_p, action[..., None], -1)[..., 0]
    policy_loss = -mean(log_prob * advantage)
    value_loss = 0.5 * mean((value - target) ** 2)
    entropy = mean(-(np.exp(log_p) * log_p).sum(-1))
    loss = policy_loss + config.vf_coef * value_loss - config.ent_coef * entropy
    return loss, {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy}


@pytest.mark.parametrize("normalize", [False, True])
def test_the_loss_equals_a_numpy_formula_on_random_trajectories(normalize):
    """Random trajectories with terminations and truncations mid-rollout and at its end,
    random actions, and padding steps (``valid = False``) that no mean may count."""
    config = SMALL.replace(normalize_advantages=normalize, ent_coef=0.02, vf_coef=0.6, gae_lambda=0.9)
    params = a2c.init(jax.random.key(0), config).params
    trajectory, _, value_next, _ = random_trajectory(5)
    rng = np.random.default_rng(6)
    valid = rng.random(trajectory.reward.shape) < 0.8
    trajectory = trajectory.replace(action=rng.integers(0, 2, trajectory.reward.shape).astype(np.int32), valid=valid)
    distribution, value = onpolicy.trajectory_policy_and_value(params, trajectory, config)
    loss, metrics = a2c.loss_fn(params["network"], params["obs_stats"], trajectory, value_next, config)
    expected, expected_metrics = numpy_a2c_loss(
        np.asarray(distribution.logits, np.float64),
        np.asarray(value, np.float64),
        np.asarray(value_next, np.float64),
        trajectory,
        config,
    )
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5, atol=1e-6)
    for name, number in expected_metrics.items():
        np.testing.assert_allclose(float(metrics[name]), number, rtol=1e-5, atol=1e-6, err_msg=name)
