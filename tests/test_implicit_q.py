"""Implicit Q-Learning: its numerical functions against NumPy written here, its losses
against NumPy arithmetic on the networks' outputs, the update's order, the API contract
(jit, vmap over seeds and a hyper-parameter, determinism, errors) and the hand-over of
the learned state to SAC. Learning tests live with the other offline algorithms'.

Compiles dominate on a 2-core CPU: the tests share one small config and one small
dataset of a random policy, recorded once (module-scoped fixtures)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import data, optim
from jaxrl.algorithms import actor_critic, get, implicit_q, offline, sac
from jaxrl.config import sweep_axes

ENV = "Pendulum-v1"
SMALL = implicit_q.Config(
    env_id=ENV, num_updates=50, batch_size=32, hidden_sizes=(32, 32), num_evals=1, eval_episodes=1, num_reports=0
)
LOW, HIGH = -2.0, 2.0  # Pendulum's torque bounds


def uniform_policy(params, obs, carry, key):
    return jax.random.uniform(key, (obs.shape[0], 1), minval=LOW, maxval=HIGH), carry


@pytest.fixture(scope="module")
def dataset():
    """256 transitions of a uniformly random policy on two envs."""
    return data.collect_dataset(uniform_policy, (), ENV, jax.random.key(0), 256, num_envs=2)


@pytest.fixture(scope="module")
def state(dataset):
    return jax.jit(implicit_q.init, static_argnums=1)(jax.random.key(1), SMALL, dataset)


@pytest.fixture(scope="module")
def batch(state, dataset):
    """A batch as the losses read it, a third of its transitions marked terminated."""
    sample = jax.jit(offline.batch, static_argnums=3)(state.params, dataset, jax.random.key(2), SMALL)
    terminated = np.arange(SMALL.batch_size) % 3 == 0
    return {**sample, "terminated": jnp.asarray(terminated)}


@pytest.fixture(scope="module")
def vmapped_train():
    return jax.jit(jax.vmap(implicit_q.train, in_axes=(0, sweep_axes(SWEEP), None)))


SWEEP = SMALL.replace(beta=jnp.array([3.0, 0.5]))
KEYS = jax.random.split(jax.random.key(3), 2)


@pytest.fixture(scope="module")
def run(vmapped_train, dataset):
    return vmapped_train(KEYS, SWEEP, dataset)


def np_unit(action):
    return 2.0 * (np.asarray(action, np.float64) - LOW) / (HIGH - LOW) - 1.0


# ----------------------------------------------------------------------------- numerics


@pytest.mark.parametrize("expectile", [0.1, 0.5, 0.7, 0.9])
def test_expectile_loss_matches_numpy(expectile):
    diff = np.random.default_rng(0).normal(0.0, 2.0, (7, 5))
    diff[0, :3] = 0.0
    expected = np.empty_like(diff)
    for index, d in np.ndenumerate(diff):
        expected[index] = ((1.0 - expectile) if d < 0 else expectile) * d * d
    got = implicit_q.expectile_loss(jnp.asarray(diff, jnp.float32), expectile)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("expectile", [0.5, 0.8])
def test_expectile_loss_is_minimised_at_the_expectile(expectile):
    """The mean loss over a sample is smallest at the sample's ``expectile``-expectile,
    found here by bisection on its defining equation."""
    x = np.random.default_rng(1).exponential(1.0, 200)

    def balance(m):  # zero at the expectile, increasing in m
        return np.sum(np.where(x < m, 1.0 - expectile, expectile) * (m - x))

    low, high = x.min(), x.max()
    for _ in range(100):
        low, high = ((low + high) / 2, high) if balance((low + high) / 2) < 0 else (low, (low + high) / 2)
    m = (low + high) / 2
    if expectile == 0.5:
        np.testing.assert_allclose(m, x.mean(), rtol=1e-9)
    mean_loss = lambda v: jnp.mean(implicit_q.expectile_loss(jnp.asarray(x, jnp.float32) - v, expectile))  # noqa: E731
    np.testing.assert_allclose(jax.grad(mean_loss)(jnp.float32(m)), 0.0, atol=1e-5)
    assert mean_loss(m) < mean_loss(m + 0.05) and mean_loss(m) < mean_loss(m - 0.05)


def test_advantage_weights_match_numpy_and_clip():
    advantage = np.random.default_rng(2).normal(0.0, 3.0, 64)
    advantage[:3] = [50.0, 1e4, -1e4]  # exp overflows float32 at 1e4 * beta: the clip keeps it finite
    for beta, max_weight in [(3.0, 100.0), (1.0, 5.0), (0.0, 100.0)]:
        expected = np.minimum(np.exp(np.minimum(beta * advantage, 700.0)), max_weight)
        got = implicit_q.advantage_weights(jnp.asarray(advantage, jnp.float32), beta, max_weight)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-30)
        assert np.all(np.isfinite(got))
    np.testing.assert_array_equal(implicit_q.advantage_weights(jnp.asarray(advantage), 0.0, 100.0), 1.0)
    grad = jax.grad(lambda a: jnp.sum(implicit_q.advantage_weights(a, 1.0, 100.0)))(jnp.ones(3))
    np.testing.assert_array_equal(grad, 0.0)  # weights, not a term to differentiate


def test_actor_cosine_decay():
    config = SMALL.replace(actor_cosine_decay=True, learning_rate=1e-3)
    opt_state = actor_critic.make_optimizer(implicit_q.online_config(config)).init({"w": jnp.zeros(3)})
    for updates, expected in [(0, 1e-3), (25, 0.5e-3), (50, 0.0), (60, 0.0), (10, 1e-3 * (1 + np.cos(np.pi / 5)) / 2)]:
        rate = implicit_q.actor_learning_rate(opt_state, jnp.int32(updates), config).hyperparams["learning_rate"]
        np.testing.assert_allclose(rate, expected, rtol=1e-5, atol=1e-12)
    assert implicit_q.actor_learning_rate(opt_state, jnp.int32(25), SMALL) is opt_state  # off: left alone


# ----------------------------------------------------------------------------- the losses


def _network_outputs(state, batch):
    """The networks' outputs the losses read, as float64 NumPy arrays."""
    online = implicit_q.online_config(SMALL)
    unit = actor_critic.unit_action(batch["action"], online)
    q_target = sac.q_values(state.target_params["critic"], batch["obs"], unit, online)
    q = sac.q_values(state.critic_params, batch["obs"], unit, online)
    value = implicit_q.make_value(SMALL)
    loc, log_std = sac.make_actor(online).apply(state.params["actor"], batch["obs"])
    outputs = dict(
        q_target=q_target,
        q=q,
        v=value.apply(state.value_params, batch["obs"]),
        next_v=value.apply(state.value_params, batch["next_obs"]),
        loc=loc,
        log_std=log_std,
    )
    return {name: np.asarray(x, np.float64) for name, x in outputs.items()}


def test_losses_match_numpy(state, batch):
    out = _network_outputs(state, batch)
    reward, action = np.asarray(batch["reward"], np.float64), np.asarray(batch["action"], np.float64)
    terminated = np.asarray(batch["terminated"], np.float64)
    assert out["q_target"].shape == (2, SMALL.batch_size) and out["v"].shape == (SMALL.batch_size,)

    q_min = np.minimum(out["q_target"][0], out["q_target"][1])
    np.testing.assert_allclose(
        implicit_q.dataset_action_values(state.target_params["critic"], batch, SMALL), q_min, rtol=1e-5
    )

    diff = q_min - out["v"]
    expected = np.mean(np.where(diff < 0, 1.0 - SMALL.expectile, SMALL.expectile) * diff**2)
    loss, v_mean = implicit_q.value_loss(state.value_params, jnp.asarray(q_min, jnp.float32), batch, SMALL)
    np.testing.assert_allclose([loss, v_mean], [expected, out["v"].mean()], rtol=1e-5, atol=1e-7)

    target = reward + SMALL.gamma * (1.0 - terminated) * out["next_v"]
    np.testing.assert_allclose(implicit_q.critic_target(state.value_params, batch, SMALL), target, rtol=1e-5, atol=1e-5)
    loss, q_mean = implicit_q.critic_loss(state.critic_params, jnp.asarray(target, jnp.float32), batch, SMALL)
    expected = np.mean((out["q"][0] - target) ** 2) + np.mean((out["q"][1] - target) ** 2)
    np.testing.assert_allclose([loss, q_mean], [expected, out["q"].mean()], rtol=1e-5, atol=1e-6)

    # The tanh-Gaussian's log-density of the clipped unit action, from (loc, log_std).
    weights = np.random.default_rng(3).uniform(0.0, 5.0, SMALL.batch_size)
    a = np.clip(np_unit(action), -1.0 + implicit_q.ACTION_EPS, 1.0 - implicit_q.ACTION_EPS)
    u, std = np.arctanh(a), np.exp(out["log_std"])
    normal = -0.5 * ((u - out["loc"]) / std) ** 2 - np.log(std) - 0.5 * np.log(2.0 * np.pi)
    log_prob = np.sum(normal - np.log(1.0 - a**2), axis=-1)
    loss, mean_log_prob = implicit_q.actor_loss(state.params["actor"], jnp.asarray(weights, jnp.float32), batch, SMALL)
    np.testing.assert_allclose([loss, mean_log_prob], [-np.mean(weights * log_prob), log_prob.mean()], rtol=1e-4)


def test_update_order(state, batch):
    """V moves first (toward the target critics), the actor's weights and the critics'
    targets read the new V, and the target critics move last, by tau toward the new critics."""

    @jax.jit
    def both(state, batch):
        new, metrics = implicit_q.update(state, batch, jax.random.key(0), SMALL)
        optimizer = actor_critic.make_optimizer(implicit_q.online_config(SMALL))
        q = implicit_q.dataset_action_values(state.target_params["critic"], batch, SMALL)
        value_params = optim.step(
            optimizer, implicit_q.value_loss, state.value_params, state.opt_state["value"], q, batch, SMALL
        )[0]
        v = implicit_q.state_values(value_params, batch["obs"], SMALL)
        weights = implicit_q.advantage_weights(q - v, SMALL.beta, SMALL.max_weight)
        actor_params = optim.step(
            optimizer, implicit_q.actor_loss, state.params["actor"], state.opt_state["actor"], weights, batch, SMALL
        )[0]
        target = implicit_q.critic_target(value_params, batch, SMALL)
        critic_params = optim.step(
            optimizer, implicit_q.critic_loss, state.critic_params, state.opt_state["critic"], target, batch, SMALL
        )[0]
        return new, metrics, (value_params, actor_params, critic_params)

    new, metrics, (value_params, actor_params, critic_params) = both(state, batch)
    close = functools.partial(np.testing.assert_allclose, rtol=1e-5, atol=1e-6)
    jax.tree.map(close, new.value_params, value_params)
    jax.tree.map(close, new.params["actor"], actor_params)
    jax.tree.map(close, new.critic_params, critic_params)
    jax.tree.map(
        lambda t, old, c: close(t, (1.0 - SMALL.tau) * old + SMALL.tau * c),
        new.target_params["critic"],
        state.target_params["critic"],
        new.critic_params,
    )
    assert int(new.updates) == 1 and set(metrics) >= {"value_loss", "critic_loss", "actor_loss", "q_mean", "v_mean"}
    assert all(np.isfinite(v) for v in jax.tree.leaves(metrics))


# ----------------------------------------------------------------------------- the contract


def test_config_errors(dataset):
    with pytest.raises(ValueError, match="continuous"):
        implicit_q.Config(env_id="CartPole-v1")
    for field, value in [
        ("expectile", 0.0),
        ("expectile", 1.0),
        ("expectile", 1.5),
        ("beta", -1.0),
        ("max_weight", 0.0),
    ]:
        with pytest.raises(ValueError, match=f"{field} must lie in"):
            SMALL.replace(**{field: value}).check_traced()
    with pytest.raises(ValueError, match="expectile must lie in"):
        implicit_q.init(jax.random.key(0), SMALL.replace(expectile=-0.2), dataset)
    with pytest.raises(ValueError, match="batch_size"):
        implicit_q.init(jax.random.key(0), SMALL.replace(batch_size=1024), dataset)
    assert get("implicit_q") is implicit_q.algorithm and get("iql").name == "iql"  # IQL stays independent Q-learning


def test_jit_vmap_over_seeds_and_beta(run, vmapped_train, dataset):
    """One compiled program trains two (seed, beta) pairs; the same keys give the same run."""
    metrics = run.metrics
    assert metrics["value_loss"].shape == (2, SMALL.num_updates)
    assert metrics["eval_return"].shape == (2, SMALL.num_updates)
    np.testing.assert_array_equal(metrics["updates"][:, -1], SMALL.num_updates)
    for name in ("value_loss", "critic_loss", "actor_loss", "q_mean", "v_mean"):
        assert np.all(np.isfinite(metrics[name])), name
    evals = metrics["eval_return"][~np.isnan(metrics["eval_return"])]
    assert evals.shape == (2,) and np.all(np.isfinite(evals))
    # Different seeds and betas: different actors; the critics' first values differ too.
    first, second = (jax.tree.map(lambda x, i=i: x[i], run.state.params["actor"]) for i in (0, 1))
    assert not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(second)))
    again = vmapped_train(KEYS, SWEEP, dataset)
    jax.tree.map(np.testing.assert_array_equal, again.metrics, run.metrics)
    # The state acts: the mode within the bounds, samples differing from it.
    params = jax.tree.map(lambda x: x[0], run.state.params)
    obs = jnp.asarray(dataset.obs[:5])
    mode, _ = implicit_q.act(params, obs, (), jax.random.key(0), SMALL, deterministic=True)
    sample, _ = implicit_q.act(params, obs, (), jax.random.key(0), SMALL)
    assert mode.shape == sample.shape == (5, 1)
    assert np.all(np.abs(mode) <= HIGH) and np.all(np.abs(sample) <= HIGH) and not np.allclose(mode, sample)


def test_hand_over_to_sac(run, dataset):
    """The online SAC run starts from the offline actor, critics, target critics and
    observation statistics, with the dataset in its replay."""
    offline_state = jax.tree.map(lambda x: x[0], run.state)
    fields = dict(total_timesteps=64, learning_starts=0, num_evals=0, num_reports=0)
    online = implicit_q.online_config(SMALL, **fields).replace(learning_rate=5e-4)
    assert isinstance(online, sac.Config) and online.hidden_sizes == SMALL.hidden_sizes
    program = implicit_q.finetune_program(online, keep_dataset=True)
    started = jax.jit(program.init)(jax.random.key(4), offline_state)
    assert isinstance(started, sac.State)
    for name in ("actor", "obs_stats"):
        jax.tree.map(np.testing.assert_array_equal, started.params[name], offline_state.params[name])
    jax.tree.map(np.testing.assert_array_equal, started.critic_params, offline_state.critic_params)
    jax.tree.map(np.testing.assert_array_equal, started.target_params, offline_state.target_params)
    for name in ("actor", "critic"):  # Adam's moments carry on, at the online learning rate
        ours, theirs = offline_state.opt_state[name], started.opt_state[name]
        jax.tree.map(np.testing.assert_array_equal, theirs.inner_state, ours.inner_state)
        np.testing.assert_allclose(theirs.hyperparams["learning_rate"], 5e-4)
    buffer, num_envs = started.buffer, online.num_envs
    rows = dataset.size // num_envs
    assert int(buffer.size) == rows
    for name in ("obs", "action", "reward", "terminated", "next_obs"):
        stored = np.asarray(buffer.data[name][:rows]).reshape((rows * num_envs,) + buffer.data[name].shape[2:])
        np.testing.assert_array_equal(stored, np.asarray(getattr(dataset, name)).reshape(stored.shape))
    # The offline policy acts in SAC's hands as it did in its own.
    obs = jnp.asarray(dataset.obs[:5])
    ours, _ = implicit_q.act(offline_state.params, obs, (), jax.random.key(0), SMALL, deterministic=True)
    theirs, _ = sac.act(started.params, obs, (), jax.random.key(0), online, deterministic=True)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    without = jax.jit(implicit_q.finetune_program(online, keep_dataset=False).init)(jax.random.key(4), offline_state)
    assert int(without.buffer.size) == 0
