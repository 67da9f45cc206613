"""Recurrent SAC (``memory="gru"`` / ``"lstm"``): the memories stored with every step,
the sequence learner's losses against a step-by-step NumPy reference (each window run
one step at a time, the memories zeroed after every episode end, targets bootstrapped
through truncation and stopped at termination, burn-in excluded), one compile for seeds
x settings and clear errors. (Its learning on MaskedPendulum-v1: a row of
benchmarks/learning_table.py.)

Compiles dominate on a 2-core CPU: jitted functions are shared through module-scoped
fixtures and every test uses one small config.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import sweep_axes
from jaxrl.algorithms import offpolicy, sac
from jaxrl.buffers.sequence import Windows

L, BURN_IN, B, H = 7, 2, 3, 5

CONFIG = sac.Config(
    env_id="MaskedPendulum-v1",
    env_kwargs={"max_steps_in_episode": 6},  # episode ends inside the stored steps
    num_envs=2,
    num_steps=4,
    num_updates=2,
    batch_size=B,
    buffer_size=2 * 24,
    learning_starts=2 * 8,
    total_timesteps=2 * 4 * 4,
    hidden_sizes=(8,),
    memory="gru",
    memory_size=H,
    windows=Windows(L, BURN_IN, 3),
    gamma=0.9,
    alpha=0.3,
    num_evals=1,
    eval_episodes=2,
    num_reports=0,
)


def jit(fn):
    """``fn`` compiled with its ``config`` argument static."""
    return jax.jit(fn, static_argnames="config")


# ----------------------------------------------------------------------------- black-box networks


@jax.jit
def _encoder_step(params, h, obs):
    """The actor's or critic's encoder (the same layout) on one observation ``[2]`` from
    memory ``h [H]``: one step of a sequence of one, a black box (the core has its own
    test in tests/test_memory.py)."""
    features, h = offpolicy.encode(sac.make_critic(CONFIG), params, obs[None, None], h[None])
    return h[0], features[0, 0]


def encoder_step(params, h, obs):
    """``(h, features)`` in float64 around :func:`_encoder_step`."""
    h, features = _encoder_step(params, jnp.asarray(h, jnp.float32), jnp.asarray(obs, jnp.float32))
    return np.asarray(h, np.float64), np.asarray(features, np.float64)


def policy_head(actor_params, features):
    """``(loc [A], std [A])`` of the actor's head on features ``[H]``."""
    loc, log_std = sac.make_actor(CONFIG).apply(
        actor_params, jnp.asarray(features, jnp.float32), method="from_features"
    )
    return np.asarray(loc, np.float64), np.exp(np.asarray(log_std, np.float64))


def q_heads(critic_params, features, unit_action):
    """Both critics' values ``[2]`` on features ``[H]`` and a unit action ``[A]``."""
    q = sac.make_critic(CONFIG).apply(
        critic_params, jnp.asarray(features, jnp.float32), jnp.asarray(unit_action, jnp.float32), method="from_features"
    )
    return np.asarray(q, np.float64)


def tanh_normal(loc, std, eps):
    """A tanh-squashed Gaussian sample from standard normals ``eps`` and its log-density."""
    u = loc + std * eps
    log_prob = np.sum(-0.5 * eps**2 - np.log(std) - 0.5 * np.log(2 * np.pi) - np.log(1.0 - np.tanh(u) ** 2))
    return np.tanh(u), log_prob


# ----------------------------------------------------------------------------- the reference


def run_window(params, carry, obs, next_obs, done):
    """One window through an encoder step by step from ``carry [H]``: the memory zeroed
    after every episode end; features at ``obs[t]`` and at ``next_obs[t]`` from the
    memory after step ``t``, before any reset. Returns two ``[L]`` lists of ``[H]``."""
    h = np.asarray(carry, np.float64)
    features, next_features = [], []
    for t in range(L):
        if t > 0 and done[t - 1]:
            h = np.zeros_like(h)
        h, f = encoder_step(params, h, obs[t])
        features.append(f)
        next_features.append(encoder_step(params, h, next_obs[t])[1])
    return features, next_features


def reference_losses(actor, critic, target_critic, batch, alpha, target_eps, actor_eps):
    """SAC's losses written out per window and step on the trained steps ``t >=
    burn_in``; ``target_eps`` / ``actor_eps [L - burn_in, B, A]`` are the standard normals
    of the next-action and the actor's samples. Returns ``(targets [T, B], critic loss,
    actor loss, entropy)``."""
    gamma, low, high = CONFIG.gamma, -2.0, 2.0
    done = batch["terminated"] | batch["truncated"]
    targets, critic_terms, actor_terms, log_probs = np.zeros((L - BURN_IN, B)), [], [], []
    for b in range(B):
        window = (batch["obs"][b], batch["next_obs"][b], done[b])
        actor_f, actor_next = run_window(actor, batch["carry"]["actor"][b], *window)
        critic_f, _ = run_window(critic, batch["carry"]["critic"][b], *window)
        _, target_next = run_window(target_critic, batch["carry"]["critic"][b], *window)
        for t in range(BURN_IN, L):
            i = t - BURN_IN
            next_action, next_log_prob = tanh_normal(*policy_head(actor, actor_next[t]), target_eps[i, b])
            next_value = q_heads(target_critic, target_next[t], next_action).min() - alpha * next_log_prob
            not_terminal = 0.0 if batch["terminated"][b, t] else 1.0
            targets[i, b] = batch["reward"][b, t] + gamma * not_terminal * next_value
            unit_action = 2.0 * (batch["action"][b, t] - low) / (high - low) - 1.0
            critic_terms.append((q_heads(critic, critic_f[t], unit_action) - targets[i, b]) ** 2)
            action, log_prob = tanh_normal(*policy_head(actor, actor_f[t]), actor_eps[i, b])
            actor_terms.append(alpha * log_prob - q_heads(critic, critic_f[t], action).min())
            log_probs.append(log_prob)
    critic_loss = np.sum(np.mean(critic_terms, axis=0))
    return targets, critic_loss, np.mean(actor_terms), -np.mean(log_probs)


def hand_made_batch(key):
    """A batch of windows as :func:`jaxrl.algorithms.offpolicy.sample_windows` returns it, with episode ends
    inside: a termination and a truncation among the trained steps, a truncation in the
    burn-in (a reset at the first trained step) and one on the last step."""
    keys = jax.random.split(key, 6)
    obs = np.asarray(jax.random.normal(keys[0], (B, L, 2)), np.float32)
    final = np.asarray(jax.random.normal(keys[1], (B, L, 2)), np.float32)
    terminated = np.zeros((B, L), bool)
    truncated = np.zeros((B, L), bool)
    terminated[0, 4] = terminated[2, 2] = True
    truncated[1, BURN_IN - 1] = truncated[1, 5] = truncated[2, L - 1] = True
    done = terminated | truncated
    next_obs = np.concatenate([obs[:, 1:], final[:, -1:]], axis=1)
    next_obs = np.where(done[..., None], final, next_obs)  # the final observation where an episode ended
    carry = lambda k: np.asarray(jax.random.normal(k, (B, H)), np.float32)  # noqa: E731
    return {
        "obs": obs,
        "action": np.asarray(jax.random.uniform(keys[2], (B, L, 1), minval=-2.0, maxval=2.0), np.float32),
        "reward": np.asarray(jax.random.uniform(keys[3], (B, L), minval=-2.0, maxval=1.0), np.float32),
        "discount": np.full((B, L), CONFIG.gamma, np.float32),
        "terminated": terminated,
        "truncated": truncated,
        "next_obs": next_obs,
        "carry": {"actor": carry(keys[4]), "critic": carry(keys[5])},
    }


@pytest.fixture(scope="module")
def init():
    return jit(sac.init)


@pytest.fixture(scope="module")
def networks(init):
    """Actor, critics and target critics (the critics' params moved off their targets)."""
    state = init(jax.random.key(0), CONFIG)
    noise = lambda x: 0.3 * jax.random.normal(jax.random.key(9), x.shape)  # noqa: E731
    return state.params["actor"], state.critic_params, jax.tree.map(lambda x: x + noise(x), state.critic_params)


def test_sequence_losses_match_a_step_by_step_numpy_reference(init, networks):
    actor, critic, target_critic = networks
    batch = hand_made_batch(jax.random.key(1))
    alpha = jnp.asarray(0.3)
    target_key, actor_key = jax.random.key(2), jax.random.key(3)
    shape = (L - BURN_IN, B, 1)
    target_eps = np.asarray(jax.random.normal(target_key, shape), np.float64)  # TanhNormal's draws
    actor_eps = np.asarray(jax.random.normal(actor_key, shape), np.float64)
    target = jit(sac.critic_target)(actor, target_critic, alpha, batch, target_key, CONFIG)
    c_loss, _ = jit(sac.critic_loss)(critic, target, batch, CONFIG)
    a_loss, entropy = jit(sac.actor_loss)(actor, critic, alpha, batch, actor_key, CONFIG)
    expected = reference_losses(actor, critic, target_critic, batch, 0.3, target_eps, actor_eps)
    np.testing.assert_allclose(np.asarray(target), expected[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(float(c_loss), expected[1], rtol=1e-4)
    np.testing.assert_allclose(float(a_loss), expected[2], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(float(entropy), expected[3], rtol=1e-4, atol=1e-5)
    # update() wires the same pieces: its critic loss is the reference's under its keys.
    state = init(jax.random.key(0), CONFIG)
    state = state.replace(critic_params=critic, target_params={"critic": target_critic}, log_alpha=jnp.log(alpha))
    _, metrics = jit(sac.update)(state, batch, jax.random.key(4), CONFIG)
    target_key, _ = jax.random.split(jax.random.key(4))
    target_eps = np.asarray(jax.random.normal(target_key, shape), np.float64)
    expected = reference_losses(actor, critic, target_critic, batch, 0.3, target_eps, actor_eps)
    np.testing.assert_allclose(float(metrics["critic_loss"]), expected[1], rtol=1e-4)


def test_burn_in_steps_only_warm_the_memory(networks):
    """No gradient reaches the burn-in observations, yet they change the loss through
    the memory they build."""
    actor, critic, target_critic = networks
    batch = hand_made_batch(jax.random.key(5))
    batch["terminated"][:] = batch["truncated"][:] = False  # the burn-in memory reaches every window
    target = jit(sac.critic_target)(actor, target_critic, jnp.asarray(0.3), batch, jax.random.key(0), CONFIG)

    def loss_of_obs(obs):
        return sac.critic_loss(critic, target, {**batch, "obs": obs}, CONFIG)[0]

    grad = np.asarray(jax.jit(jax.grad(loss_of_obs))(jnp.asarray(batch["obs"])))
    assert np.all(grad[:, :BURN_IN] == 0.0) and np.abs(grad[:, BURN_IN:]).max() > 0.0
    moved = batch["obs"].copy()
    moved[:, 0] += 1.0
    assert float(jax.jit(loss_of_obs)(moved)) != pytest.approx(float(jax.jit(loss_of_obs)(batch["obs"])))


# ----------------------------------------------------------------------------- acting and replay


def collect(state, key, config):
    """One iteration's collection with the exploring policy, as training collects."""
    policy, _ = sac.learner.behaviour(state, config, False)
    return offpolicy.collect(state, policy, key, config)


@pytest.fixture(scope="module")
def collected(init):
    """A warm-up iteration (random actions) then one acting with the policy, from
    non-zero memories."""
    state = init(jax.random.key(6), CONFIG)
    state = state.replace(carry=jax.tree.map(lambda c: c + 0.25, state.carry))
    first = state
    state, _ = jit(sac.warmup_step)(state, jax.random.key(7), CONFIG)
    second = state
    state, metrics = jit(collect)(state, jax.random.key(8), CONFIG)
    return first, second, state


def test_both_memories_are_stored_with_each_step_and_reset_at_episode_ends(collected):
    first, _, state = collected
    data = jax.tree.map(np.asarray, state.buffer.replay.data)
    rows = 2 * CONFIG.num_steps
    done = data["terminated"][:rows] | data["truncated"][:rows]
    assert done.any()  # the time limit of 6 steps ends episodes
    for name, params in (("actor", first.params["actor"]), ("critic", first.critic_params)):
        h = np.asarray(first.carry[name], np.float64)
        for t in range(rows):
            np.testing.assert_allclose(data["carry"][name][t], h, rtol=1e-4, atol=1e-5, err_msg=f"{name} {t}")
            h = np.stack([encoder_step(params, h[n], data["obs"][t, n])[0] for n in range(CONFIG.num_envs)])
            h = np.where(done[t][:, None], 0.0, h)
        np.testing.assert_allclose(state.carry[name], h, rtol=1e-4, atol=1e-5)
    # A sampled window comes with the memories stored at its first step.
    batch = jit(offpolicy.sample_windows)(state.buffer, jax.random.key(9), CONFIG)
    assert batch["obs"].shape == (B, L, 2) and batch["carry"]["critic"].shape == (B, H)


def test_act_advances_only_the_actors_memory(collected):
    _, _, state = collected
    carry = jax.tree.map(lambda c: c + 0.1, sac.initial_carry(CONFIG, 3))
    obs = jnp.ones((3, 2))
    action, next_carry = jax.jit(sac.act, static_argnames=("config", "deterministic"))(
        state.params, obs, carry, jax.random.key(0), CONFIG, True
    )
    assert action.shape == (3, 1) and np.all(np.abs(np.asarray(action)) <= 2.0)
    np.testing.assert_array_equal(next_carry["critic"], carry["critic"])
    h, _ = encoder_step(state.params["actor"], np.asarray(carry["actor"][0]), np.ones(2))
    np.testing.assert_allclose(next_carry["actor"][0], h, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- the contract


@pytest.mark.slow
def test_seeds_and_a_traced_setting_compile_once():
    # No evaluation branch to compile (nothing here reads it; the learning test evaluates).
    configs = CONFIG.replace(learning_rate=jnp.array([1e-3, 3e-3]), num_evals=0)
    keys = jax.random.split(jax.random.key(0), 2)
    train = jax.jit(jax.vmap(sac.train, in_axes=(0, sweep_axes(configs))))
    lanes = train(keys, configs)
    train(keys, configs.replace(learning_rate=jnp.array([2e-3, 5e-4])))
    assert train._cache_size() == 1
    assert lanes.state.carry["actor"].shape == (2, CONFIG.num_envs, H)
    losses = np.asarray(lanes.metrics["critic_loss"])[:, CONFIG.warmup_iterations :]
    assert np.all(np.isfinite(losses)) and not np.allclose(losses[0], losses[1])


def test_memory_off_keeps_the_feed_forward_carry():
    assert sac.initial_carry(sac.Config(), 4) == ()
    lstm = CONFIG.replace(memory="lstm")
    assert [c.shape for c in sac.initial_carry(lstm, 4)["critic"]] == [(4, H), (4, H)]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(memory="rnn"), "memory must be one of"),
        (dict(memory_size=0), "memory_size must be an integer >= 1"),
        (dict(windows=(L, -1, 3)), "burn_in must be an integer >= 0"),
        (dict(windows=(L, 7, 3)), r"windows.burn_in \(7\) \+ 0 bootstrap steps must be < windows.length \(7\)"),
        (dict(windows=(L, BURN_IN, 6)), r"windows.period \(6\) must be <= the steps a window trains \(5\)"),
        (dict(n_step=3), "n_step must be 1"),
        (dict(env_id="MaskedCartPole-v1", discrete=True), "needs continuous actions"),
        (dict(buffer_size=12), r"buffer_size \(12\) must hold windows.length"),
        (dict(learning_starts=0), r"learning_starts \(0\) must cover windows.length"),
    ],
)
def test_bad_memory_settings_are_clear_errors(overrides, message):
    with pytest.raises(ValueError, match=message):  # windows: Windows' arguments, built inside
        overrides = {k: Windows(*v) if k == "windows" else v for k, v in overrides.items()}
        sac.Config(**{**CONFIG.__dict__, **overrides})
