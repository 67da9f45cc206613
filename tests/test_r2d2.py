"""R2D2 (:mod:`jaxrl.algorithms.r2d2`): the sequence learner against a NumPy reference (each
window's episodes run separately with the Q-network applied one step at a time, the
memory zeroed at every episode start; n-step double-Q rescaled targets, burn-in masking,
the loss and the priorities written as loops), the actors' carry in replay, one compile
for seeds x settings, clear errors and a learning test.

Compiles dominate on a 2-core CPU: jitted functions are shared through module-scoped
fixtures and every test uses one small config.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import returns, sweep_axes, value_heads
from jaxrl.algorithms import dqn, get, r2d2
from jaxrl.buffers import sumtree
from jaxrl.buffers.prioritized import Prioritized
from jaxrl.buffers.sequence import Windows
from jaxrl.exploration import ApeXEpsilons, EpsilonGreedy

L, BURN_IN, N_STEP, B = 8, 2, 3, 4

CONFIG = r2d2.Config(
    env_id="CartPole-v1",
    env_kwargs={"max_steps_in_episode": 12},  # truncations as well as terminations
    num_envs=3,
    num_steps=8,
    num_updates=2,
    batch_size=B,
    buffer_size=3 * 24,
    learning_starts=3 * 16,
    total_timesteps=3 * 8 * 4,
    hidden_sizes=(8,),
    memory="gru",
    memory_size=6,
    windows=Windows(L, BURN_IN, 3),
    n_step=N_STEP,
    head=value_heads.Rescaled(loss="huber", eps=0.01),
    exploration=EpsilonGreedy(),
    prioritized=r2d2.PrioritizedWindows(alpha=0.6, beta_start=0.4, beta_end=1.0, eta=0.7),
    gamma=0.9,
    num_evals=2,
    eval_episodes=2,
    num_reports=0,
)


def jit(fn):
    """``fn`` compiled with its ``config`` argument static."""
    return jax.jit(fn, static_argnames="config")


# ----------------------------------------------------------------------------- the reference


@jax.jit
def _network_step(params, h, obs):
    """The Q-network on one observation ``[4]`` from memory ``h [H]``: one step of a
    sequence of one, used as a black box (the core's own equations have their test)."""
    q, h = r2d2.make_network(CONFIG).apply(params, obs[None, None], deterministic=True, carry=h[None])
    return h[0], q[0, 0]


def numpy_q_network(params):
    """``step(h, obs) -> (h, q)`` in float64 NumPy around :func:`_network_step`."""

    def step(h, obs):
        h, q = _network_step(params, jnp.asarray(h, jnp.float32), jnp.asarray(obs, jnp.float32))
        return np.asarray(h, np.float64), np.asarray(q, np.float64)

    return step


def h(x, eps):
    return np.sign(x) * (np.sqrt(np.abs(x) + 1.0) - 1.0) + eps * x


def h_inverse(y, eps):
    return np.sign(y) * (((np.sqrt(1.0 + 4.0 * eps * (np.abs(y) + 1.0 + eps)) - 1.0) / (2.0 * eps)) ** 2 - 1.0)


def huber(x):
    return np.where(np.abs(x) <= 1.0, 0.5 * x**2, np.abs(x) - 0.5)


def reference_loss(online, target, batch, config):
    """R2D2's loss written out per window and step: both networks run through each
    window from its stored carry, the memory zeroed after every episode end, the value
    at ``next_obs[t]`` from the memory after step ``t``; returns the TD errors ``[B,
    L]`` (NaN where not trained), the loss and the priorities ``[B]``."""
    online_step, target_step = numpy_q_network(online), numpy_q_network(target)
    eps, gamma, n = config.head.eps, config.gamma, config.n_step
    done = batch["terminated"] | batch["truncated"]
    td = np.full((B, L), np.nan)
    for b in range(B):
        h_online = h_target = np.asarray(batch["carry"][b], np.float64)
        q, q_next_online, q_next_target = [], [], []
        for t in range(L):
            if t > 0 and done[b, t - 1]:
                h_online, h_target = np.zeros_like(h_online), np.zeros_like(h_target)
            h_online, q_t = online_step(h_online, batch["obs"][b, t])
            h_target, _ = target_step(h_target, batch["obs"][b, t])
            q.append(q_t)
            q_next_online.append(online_step(h_online, batch["next_obs"][b, t])[1])
            q_next_target.append(target_step(h_target, batch["next_obs"][b, t])[1])
        for t in range(config.windows.burn_in, L - n + 1):  # the trained steps
            ret, discount = 0.0, 1.0
            for k in range(n):
                s = t + k
                ret += discount * batch["reward"][b, s]
                discount *= gamma
                if done[b, s] or k == n - 1:
                    if not batch["terminated"][b, s]:
                        value = q_next_target[s][np.argmax(q_next_online[s])]
                        ret += discount * h_inverse(value, eps)
                    break
            td[b, t] = h(ret, eps) - q[t][batch["action"][b, t]]
    trained = ~np.isnan(td)
    loss = np.mean(batch["weight"] * np.nanmean(huber(td), axis=1))
    abs_td = np.where(trained, np.abs(td), 0.0)
    eta = config.prioritized.eta
    priority = eta * abs_td.max(1) + (1 - eta) * abs_td.sum(1) / trained.sum(1)
    return td, loss, priority


def hand_made_batch(key):
    """A batch of windows as :func:`r2d2.sample` returns it, with episode ends inside:
    a termination in the trained steps, a truncation just before them (a reset at the
    first trained step) and one in the middle, and ends inside n-step spans."""
    keys = jax.random.split(key, 6)
    obs = np.asarray(jax.random.normal(keys[0], (B, L, 4)), np.float32)
    final = np.asarray(jax.random.normal(keys[1], (B, L, 4)), np.float32)
    terminated = np.zeros((B, L), bool)
    truncated = np.zeros((B, L), bool)
    terminated[0, 4] = terminated[2, 6] = terminated[3, 0] = True
    truncated[1, BURN_IN - 1] = truncated[1, 5] = truncated[2, 3] = True
    done = terminated | truncated
    next_obs = np.concatenate([obs[:, 1:], final[:, -1:]], axis=1)
    next_obs = np.where(done[..., None], final, next_obs)  # the final observation where an episode ended
    return {
        "obs": obs,
        "action": np.asarray(jax.random.randint(keys[2], (B, L), 0, 2), np.int32),
        "reward": np.asarray(jax.random.uniform(keys[3], (B, L), minval=-2.0, maxval=3.0), np.float32),
        "terminated": terminated,
        "truncated": truncated,
        "next_obs": next_obs,
        "carry": np.asarray(jax.random.normal(keys[4], (B, CONFIG.memory_size)), np.float32),
        "weight": np.asarray(jax.random.uniform(keys[5], (B,), minval=0.3, maxval=1.0), np.float32),
    }


@pytest.fixture(scope="module")
def init():
    return jit(r2d2.init)


@pytest.fixture(scope="module")
def networks(init):
    """Online and target params far enough apart that their argmax actions differ."""
    online = init(jax.random.key(0), CONFIG).params["network"]
    noise = lambda x: 0.5 * jax.random.normal(jax.random.key(9), x.shape)  # noqa: E731
    return online, jax.tree.map(lambda x: x + noise(x), online)


def test_sequence_loss_and_priorities_match_a_step_by_step_numpy_reference(networks):
    online, target = networks
    batch = hand_made_batch(jax.random.key(1))
    loss, (metrics, priority) = jit(r2d2.loss_fn)(online, target, batch, jax.random.key(2), CONFIG)
    td, expected_loss, expected_priority = reference_loss(online, target, batch, CONFIG)
    np.testing.assert_allclose(float(loss), expected_loss, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(priority), expected_priority, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(float(metrics["td_abs"]), np.nanmean(np.abs(td)), rtol=1e-4)
    # The same TD errors from the pieces: a per-step comparison, not only their sums.
    q, next_online, next_target, train = jit(r2d2.sequence_q_values)(online, target, batch, None, None, CONFIG)
    q_taken = np.take_along_axis(np.asarray(q), np.asarray(train["action"])[..., None], -1)[..., 0]
    assert q_taken.shape == (L - BURN_IN, B)
    trained = np.asarray(r2d2.trained_steps(CONFIG))
    np.testing.assert_array_equal(trained, np.arange(BURN_IN, L) <= L - N_STEP)
    # Double Q matters here: the online and target argmax differ at some next_obs.
    assert np.any(np.argmax(next_online, -1) != np.argmax(next_target, -1))
    assert np.all(np.isnan(td[:, :BURN_IN])) and np.all(np.isnan(td[:, L - N_STEP + 1 :]))


def test_without_double_q_or_rescaling_the_targets_are_plain_n_step_returns(networks):
    """``double=False`` and the plain scalar head: the target network's own max and
    plain n-step sums, per trained step."""
    online, target = networks
    batch = hand_made_batch(jax.random.key(3))
    config = CONFIG.replace(head=value_heads.Scalar(), double=False)
    q, next_online, next_target, train = jit(r2d2.sequence_q_values)(online, target, batch, None, None, config)
    np.testing.assert_array_equal(next_online, next_target)  # the target network picks its own action
    q_taken = jnp.take_along_axis(q, train["action"][..., None], -1)[..., 0]
    value = returns.double_q_n_step_targets(
        train["reward"], next_online, next_target, train["terminated"], train["truncated"], config.gamma, N_STEP
    )
    td = np.asarray(value - q_taken)
    step_online, step_target = numpy_q_network(online), numpy_q_network(target)
    done = batch["terminated"] | batch["truncated"]
    for b in range(B):
        ho = ht = np.asarray(batch["carry"][b], np.float64)
        q, v_next = [], []
        for t in range(L):
            if t > 0 and done[b, t - 1]:
                ho, ht = np.zeros_like(ho), np.zeros_like(ht)
            ho, q_t = step_online(ho, batch["obs"][b, t])
            ht, _ = step_target(ht, batch["obs"][b, t])
            q.append(q_t[batch["action"][b, t]])
            v_next.append(step_target(ht, batch["next_obs"][b, t])[1].max())
        for t in range(BURN_IN, L - N_STEP + 1):
            ret, discount = 0.0, 1.0
            for s in range(t, t + N_STEP):
                ret += discount * batch["reward"][b, s]
                discount *= config.gamma
                if done[b, s] or s == t + N_STEP - 1:
                    ret += 0.0 if batch["terminated"][b, s] else discount * v_next[s]
                    break
            np.testing.assert_allclose(td[t - BURN_IN, b], ret - q[t], rtol=1e-4, atol=1e-5)


def test_burn_in_steps_only_warm_the_memory(networks):
    """No gradient reaches the burn-in observations (the memory they build is under
    ``stop_gradient``), yet they change the loss through that memory."""
    online, target = networks
    batch = hand_made_batch(jax.random.key(4))
    batch["terminated"][:] = batch["truncated"][:] = False  # the burn-in memory reaches every window

    def loss_of_obs(obs):
        return r2d2.loss_fn(online, target, {**batch, "obs": obs}, jax.random.key(0), CONFIG)[0]

    grad = np.asarray(jax.jit(jax.grad(loss_of_obs))(jnp.asarray(batch["obs"])))
    assert np.all(grad[:, :BURN_IN] == 0.0) and np.abs(grad[:, BURN_IN:]).max() > 0.0
    moved = batch["obs"].copy()
    moved[:, 0] += 1.0
    assert float(jax.jit(loss_of_obs)(moved)) != pytest.approx(float(jax.jit(loss_of_obs)(batch["obs"])))


def test_feed_forward_value_rescaling_backs_up_unrescaled_values():
    """The rescaled head without memory (DQN's): one-step double-Q targets ``h(r + d h^-1(q'))``."""
    shared = ("env_kwargs", "num_envs", "num_steps", "num_updates", "buffer_size", "learning_starts", "hidden_sizes")
    config = dqn.Config(
        **{name: getattr(CONFIG, name) for name in shared},
        total_timesteps=CONFIG.total_timesteps,
        batch_size=B,
        head=CONFIG.head,
        gamma=CONFIG.gamma,
        n_step=1,
        double=True,
    )
    online = jit(dqn.init)(jax.random.key(0), config).params["network"]
    target = jax.tree.map(lambda x: x + 0.5 * jax.random.normal(jax.random.key(9), x.shape), online)
    keys = jax.random.split(jax.random.key(11), 4)
    batch = {
        "obs": jax.random.normal(keys[0], (B, 4)),
        "action": jax.random.randint(keys[1], (B,), 0, 2),
        "reward": jax.random.uniform(keys[2], (B,), minval=-3.0, maxval=3.0),
        "discount": jnp.full((B,), config.gamma),
        "terminated": jnp.arange(B) == 0,
        "truncated": jnp.zeros(B, bool),
        "next_obs": jax.random.normal(keys[3], (B, 4)),
        "weight": jnp.ones(B),
    }
    _, (_, td) = jit(dqn.loss_fn)(online, target, batch, jax.random.key(0), config)
    q = lambda p, x: np.asarray(dqn.q_values({"network": p}, x, config), np.float64)  # noqa: E731
    rows = np.arange(B)
    next_value = q(target, batch["next_obs"])[rows, q(online, batch["next_obs"]).argmax(1)]
    discount = config.gamma * (1.0 - np.asarray(batch["terminated"], np.float64))
    expected = h(np.asarray(batch["reward"]) + discount * h_inverse(next_value, config.head.eps), config.head.eps)
    q_taken = q(online, batch["obs"])[rows, np.asarray(batch["action"])]
    np.testing.assert_allclose(np.asarray(td), expected - q_taken, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- acting and replay


@pytest.fixture(scope="module")
def warm_state(init):
    """Two warm-up iterations: random actions, the memory advanced by the params of init."""
    config = CONFIG
    state = init(jax.random.key(5), config)
    state = state.replace(carry=state.carry + 0.25)  # a non-zero memory entering the first step
    first = state
    for i in range(2):
        state, _ = jit(r2d2.warmup_step)(state, jax.random.key(6 + i), config)
    return config, first, state


def test_the_actors_carry_is_stored_with_each_step_and_reset_at_episode_ends(warm_state):
    config, first, state = warm_state
    step = numpy_q_network(first.params["network"])
    data = jax.tree.map(np.asarray, state.buffer.replay.data)
    rows = 2 * config.num_steps
    done = data["terminated"][:rows] | data["truncated"][:rows]
    assert done.any()  # episodes ended (the time limit cuts every one at 12 steps)
    h_t = np.asarray(first.carry, np.float64)
    for t in range(rows):
        np.testing.assert_allclose(data["carry"][t], h_t, rtol=1e-4, atol=1e-5)
        h_t, _ = step(h_t, data["obs"][t])
        h_t = np.where(done[t][:, None], 0.0, h_t)
    np.testing.assert_allclose(state.carry, h_t, rtol=1e-4, atol=1e-5)
    # A sampled window comes with the carry stored at its first step.
    batch = jit(r2d2.sample)(state, jax.random.key(8), config)
    np.testing.assert_array_equal(batch["carry"], data["carry"][batch["index"].row, batch["index"].lane])
    assert batch["obs"].shape == (B, L, 4) and batch["weight"].shape == (B,)


_act = jax.jit(r2d2.act, static_argnames=("config", "deterministic"))


def test_acting_is_greedy_in_the_recurrent_q_values_with_per_env_epsilons(warm_state):
    config, _, state = warm_state
    apex = config.replace(exploration=ApeXEpsilons())
    obs = jnp.ones((3, 4))
    carry = r2d2.initial_carry(apex, 3) + 0.1
    greedy, next_carry = _act(state.params, obs, carry, jax.random.key(0), apex, True)
    q, expected_carry = r2d2.q_values(state.params, obs, carry, apex)
    np.testing.assert_array_equal(greedy, np.argmax(q, -1))
    np.testing.assert_allclose(next_carry, expected_carry, rtol=1e-6)
    epsilon = dqn.epsilon(jnp.asarray(0), apex)
    assert float(epsilon[0]) > float(epsilon[-1])  # lanes explore less and less
    counts = np.zeros(3)
    for k in range(40):
        action, _ = _act(state.params, obs, carry, jax.random.key(k), apex, epsilon=epsilon)
        counts += np.asarray(action) != np.asarray(greedy)
    assert counts[0] > counts[-1]


def test_an_update_writes_the_sequence_priorities(warm_state):
    config, _, state = warm_state
    batch = jit(r2d2.sample)(state, jax.random.key(9), config)
    new_state, metrics = jit(r2d2.update)(state, batch, jax.random.key(10), config)
    network, target = state.params["network"], state.target_params
    _, (_, priority) = jit(r2d2.loss_fn)(network, target, batch, jax.random.key(10), config)
    slots = np.asarray(batch["index"].row) // config.windows.period * config.num_envs + np.asarray(batch["index"].lane)
    leaves = np.asarray(sumtree.leaves(new_state.buffer.tree))
    expected = (np.abs(np.asarray(priority)) + config.prioritized.eps) ** config.prioritized.alpha
    np.testing.assert_allclose(leaves[slots], expected, rtol=1e-5)
    assert np.isfinite(float(metrics["loss"]))


# ----------------------------------------------------------------------------- the contract


@pytest.mark.slow
def test_seeds_and_a_traced_setting_compile_once_and_match_single_runs():
    # No evaluation branch to compile in either program (nothing here reads it).
    config = CONFIG.replace(num_evals=0)
    configs = config.replace(learning_rate=jnp.array([1e-3, 3e-3]))
    keys = jax.random.split(jax.random.key(0), 2)
    train = jax.jit(jax.vmap(r2d2.train, in_axes=(0, sweep_axes(configs))))
    lanes = train(keys, configs)
    train(keys, configs.replace(learning_rate=jnp.array([2e-3, 5e-4])))
    assert train._cache_size() == 1
    assert lanes.state.carry.shape == (2, CONFIG.num_envs, CONFIG.memory_size)
    assert np.all(np.isfinite(np.asarray(lanes.metrics["loss"])[:, CONFIG.warmup_iterations :]))
    single = jax.jit(r2d2.train)(keys[1], config.replace(learning_rate=3e-3))
    for ours, theirs in zip(jax.tree.leaves(lanes.state.params), jax.tree.leaves(single.state.params)):
        np.testing.assert_allclose(ours[1], theirs, rtol=1e-4, atol=1e-5)


def test_r2d2_preset_and_registry():
    assert get("r2d2") is r2d2.algorithm and "r2d2" not in dqn.algorithm.variants
    config = r2d2.preset("CartPole-v1", n_step=2)
    assert config.memory == "lstm" and isinstance(config.head, value_heads.Rescaled) and config.double
    assert isinstance(config.exploration, ApeXEpsilons)
    assert config.n_step == 2 and isinstance(config.prioritized, r2d2.PrioritizedWindows)
    assert r2d2.initial_carry(config, 5)[0].shape == (5, config.memory_size)
    assert dqn.initial_carry(dqn.Config(), 5) == ()
    with pytest.warns(DeprecationWarning, match="r2d2.preset"):
        assert dqn.r2d2("CartPole-v1", n_step=2) == config  # for one release


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(memory="rnn"), "memory must be one of"),
        (dict(memory_size=0), "memory_size must be an integer >= 1"),
        (dict(windows=(L, -1, 3)), "burn_in must be an integer >= 0"),
        (dict(windows=(L, 6, 3)), r"windows.burn_in \(6\) \+ 2 bootstrap steps must be < windows.length \(8\)"),
        (dict(windows=(L, BURN_IN, 5)), r"windows.period \(5\) must be <= the steps a window trains \(4\)"),
        (dict(head=value_heads.Categorical()), "does not support distributional"),
        (dict(buffer_size=21, num_steps=4), r"buffer_size \(21\) must hold windows.length"),
        (dict(learning_starts=0), r"learning_starts \(0\) must cover windows.length"),
        (dict(memory="none"), "memory must be one of"),
        (dict(prioritized=Prioritized()), "prioritized must be one of"),
    ],
)
def test_bad_memory_settings_are_clear_errors(overrides, message):
    with pytest.raises(ValueError, match=message):  # windows: Windows' arguments, built inside
        overrides = {k: Windows(*v) if k == "windows" else v for k, v in overrides.items()}
        r2d2.Config(**{**CONFIG.__dict__, **overrides})


def test_bad_traced_memory_settings_are_clear_errors():
    bad = {
        r"prioritized\.eta must lie in": dict(prioritized=r2d2.PrioritizedWindows(eta=1.5)),
        r"head\.eps must lie in": dict(head=value_heads.Rescaled(eps=-1.0)),
    }
    for field, overrides in bad.items():
        with pytest.raises(ValueError, match=field):
            r2d2.init(jax.random.key(0), CONFIG.replace(**overrides))


# ----------------------------------------------------------------------------- learning


@pytest.mark.learns
@pytest.mark.optimised
def test_r2d2_learns_memory_chain():
    """MemoryChain-bsuite with ``memory_length=16``: the context bit is shown on an
    episode's first step only and the action on its 17th and last step earns +1 if it
    matches, -1 if not, so a memoryless policy scores 0 in expectation. The R2D2
    preset (LSTM of 32 units after one 64-unit layer, windows of 20 steps with 5 of
    burn-in) for 50k env steps, the learning rate annealed to 0 (a constant one lets a
    solved seed drift off late in the run): final greedy evaluation return (mean of 20
    episodes) >= 0.9 in at least 3 of 4 vmapped seeds."""
    config = r2d2.preset(
        "MemoryChain-bsuite",
        env_kwargs={"memory_length": 16},
        total_timesteps=50_000,
        learning_starts=1_000,
        hidden_sizes=(64,),
        memory_size=32,
        batch_size=32,
        buffer_size=10_000,
        num_updates=2,
        anneal_lr=True,
        num_evals=5,
        eval_episodes=20,
        num_reports=0,
    )
    keys = jax.random.split(jax.random.key(0), 4)
    out = jax.jit(jax.vmap(r2d2.train, in_axes=(0, None)))(keys, config)
    evals = np.asarray(out.metrics["eval_return"])
    final = evals[:, ~np.isnan(evals[0])][:, -1]
    assert (final >= 0.9).sum() >= 3, final


@pytest.mark.slow
def test_an_r2d2_run_resumes_bit_for_bit(tmp_path):
    """Checkpoints hold the sequence replay (rows, sum-tree, max priority) and the actors'
    memory: a run resumed from its second checkpoint equals the uninterrupted one."""
    import shutil

    from jaxrl.workflow import runner
    from jaxrl.workflow.options import RunOptions

    config = CONFIG.replace(prioritized=True)
    kwargs = dict(seeds=2, chunk_iterations=1)
    straight = runner.run("r2d2", config, **kwargs, options=RunOptions(tmp_path / "straight", checkpoint_every=1))
    shutil.copytree(tmp_path / "straight", tmp_path / "resumed")
    for step in (3, 4):
        shutil.rmtree(tmp_path / "resumed" / "checkpoints" / str(step))
    resumed = runner.run(
        "r2d2", config, **kwargs, options=RunOptions(tmp_path / "resumed", checkpoint_every=1, resume=True)
    )
    assert straight.state.carry.shape == (2, config.num_envs, config.memory_size)
    for ours, theirs in zip(jax.tree.leaves(resumed.state), jax.tree.leaves(straight.state)):
        if not jax.dtypes.issubdtype(ours.dtype, jax.dtypes.prng_key):
            np.testing.assert_array_equal(ours, theirs)
    for name, values in straight.metrics.items():
        np.testing.assert_array_equal(resumed.metrics[name], values, err_msg=name)
