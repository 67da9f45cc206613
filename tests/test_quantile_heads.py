"""QR-DQN and IQN as heads of the DQN family (jaxrl.value_heads.Quantile and
ImplicitQuantile): the quantile Huber loss against a NumPy double loop, IQN's cosine
embedding and network against a hand computation, QR-DQN's projection-free target, the
quantile fractions of IQN's three roles, clear errors, what composes and what is
refused and one compiled run of each head (their learning tests are rows of
benchmarks/learning_table.py).

Compiles dominate on a 2-core CPU: the numerical tests run small functions eagerly or
jitted once, and one module-scoped program per head serves the run tests.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import networks, value_heads
from jaxrl.algorithms import apex, dqn, iql, r2d2, vdn
from jaxrl.config import from_json, to_json
from jaxrl.exploration import NoisyNets
from jaxrl.value_heads import ImplicitQuantile, Quantile
from jaxrl.workflow import cli

TINY = dict(
    num_envs=2,
    total_timesteps=64,
    hidden_sizes=(8,),
    num_evals=1,
    eval_episodes=1,
    num_reports=0,
    num_steps=1,
    batch_size=4,
    buffer_size=32,
    learning_starts=8,
)
SMALL_IQN = ImplicitQuantile(num_online=4, num_target=3, num_acting=2, embedding_dim=6)


# ----------------------------------------------------------------------------- numerics


def quantile_huber_reference(quantiles, fractions, targets, kappa):
    """Dabney et al. (2017), eq. 10, one pair at a time."""
    total = 0.0
    for i in range(len(quantiles)):
        row = 0.0
        for j in range(len(targets)):
            u = targets[j] - quantiles[i]
            huber = 0.5 * u * u if abs(u) <= kappa else kappa * (abs(u) - 0.5 * kappa)
            row += abs(fractions[i] - (u < 0)) * huber / kappa
        total += row / len(targets)
    return total


def test_quantile_huber_loss_matches_numpy_double_loop():
    rng = np.random.default_rng(0)
    for kappa in (0.05, 1.0, 10.0):  # 0.05: mostly the linear branch; 10: the quadratic one
        for n, m in ((7, 7), (5, 9)):
            quantiles, targets = rng.normal(0.0, 2.0, n), rng.normal(0.5, 2.0, m)
            fractions = rng.uniform(size=n)
            got = value_heads.quantile_huber_loss(
                jnp.asarray(quantiles, jnp.float32),
                jnp.asarray(fractions, jnp.float32),
                jnp.asarray(targets, jnp.float32),
                kappa,
            )
            expected = quantile_huber_reference(quantiles, fractions, targets, kappa)
            np.testing.assert_allclose(float(got), expected, rtol=1e-5, atol=1e-6)
    # Both branches in one input: errors inside and outside kappa.
    quantiles, targets = np.array([0.0, 1.0]), np.array([0.1, -0.2, 3.0])
    errors = np.abs(targets[None] - quantiles[:, None])
    assert np.any(errors <= 0.5) and np.any(errors > 0.5)
    got = value_heads.quantile_huber_loss(jnp.asarray(quantiles), jnp.asarray([0.25, 0.75]), jnp.asarray(targets), 0.5)
    np.testing.assert_allclose(float(got), quantile_huber_reference(quantiles, [0.25, 0.75], targets, 0.5), rtol=1e-5)
    # Batched as the heads use it: rows [B, N] against [B, M], fractions shared or per row.
    q, t, tau = rng.normal(size=(3, 4)), rng.normal(size=(3, 6)), rng.uniform(size=(3, 4))
    rows = value_heads.batched_quantile_loss(jnp.asarray(q), jnp.asarray(tau), jnp.asarray(t), 1.0)
    np.testing.assert_allclose(
        np.asarray(rows), [quantile_huber_reference(q[b], tau[b], t[b], 1.0) for b in range(3)], rtol=1e-5
    )


def test_quantile_target_is_reward_plus_discounted_quantiles():
    """QR-DQN's target, no projection: ``r + discount * theta'_j`` per sample, the
    discount zero at termination."""
    rng = np.random.default_rng(1)
    head = Quantile(num_quantiles=5)
    next_out, reward = rng.normal(size=(6, 5)), rng.normal(size=6)
    discount = 0.99 * np.array([1, 0, 1, 1, 0, 1], np.float32)  # terminations
    got = np.asarray(head.target(jnp.asarray(next_out), jnp.asarray(reward), jnp.asarray(discount)))
    expected = np.stack([[reward[b] + discount[b] * next_out[b, j] for j in range(5)] for b in range(6)])
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    np.testing.assert_allclose(got[[1, 4]], np.broadcast_to(reward[[1, 4], None], (2, 5)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(head.fractions()), (2 * np.arange(5) + 1) / 10, rtol=1e-6)
    iqn = ImplicitQuantile()  # IQN's from the pair's quantiles
    got = iqn.target((jnp.asarray(next_out), jnp.zeros((6, 5))), jnp.asarray(reward), jnp.asarray(discount))
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-6)


def test_quantile_heads_q_values_are_the_quantiles_means():
    rng = np.random.default_rng(2)
    out = jnp.asarray(rng.normal(size=(4, 3, 5)), jnp.float32)  # [B, A, N]
    action = jnp.asarray([0, 2, 1, 2])
    taus = jnp.asarray(rng.uniform(size=(4, 5)), jnp.float32)
    for head, network_out in ((Quantile(num_quantiles=5), out), (SMALL_IQN, (out, taus))):
        np.testing.assert_allclose(np.asarray(head.q_values(network_out)), np.asarray(out).mean(-1), rtol=1e-6)
        taken = head.at_action(network_out, action)
        quantiles = taken[0] if isinstance(taken, tuple) else taken
        np.testing.assert_array_equal(np.asarray(quantiles), np.asarray(out)[np.arange(4), np.asarray(action)])
        target = jnp.asarray(rng.normal(size=(4, 6)), jnp.float32)
        loss, priority, q = head.td_loss(taken, target)
        fractions = np.asarray(taus) if isinstance(taken, tuple) else np.broadcast_to(head.fractions(), (4, 5))
        expected = [
            quantile_huber_reference(np.asarray(quantiles)[b], fractions[b], np.asarray(target)[b], 1.0)
            for b in range(4)
        ]
        np.testing.assert_allclose(np.asarray(loss), expected, rtol=1e-5)
        np.testing.assert_array_equal(np.asarray(priority), np.asarray(loss))  # the loss is the priority error
        np.testing.assert_allclose(np.asarray(q), np.asarray(quantiles).mean(-1), rtol=1e-6)


def test_iqn_cosine_embedding_and_network_match_a_hand_computation():
    """``phi(tau) = ReLU(cos(pi i tau) @ W + b)``, ``i = 0..n-1``, multiplies the torso's
    features; the head maps each product: ``q[b, a, k] = (x_b * phi(tau_bk)) @ W_q + b_q``."""
    embedding = networks.QuantileEmbedding(embedding_dim=6, features=5)
    taus = jax.random.uniform(jax.random.key(0), (3, 4))
    params = embedding.init(jax.random.key(1), taus)["params"]["dense"]
    params = {**params, "bias": jax.random.normal(jax.random.key(4), params["bias"].shape)}  # not zeros
    w, b = np.asarray(params["kernel"], np.float64), np.asarray(params["bias"], np.float64)
    cosines = np.cos(np.pi * np.arange(6) * np.asarray(taus, np.float64)[..., None])  # [3, 4, 6]
    expected = np.maximum(cosines @ w + b, 0.0)
    got = embedding.apply({"params": {"dense": params}}, taus)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-6)

    network = networks.QNetwork(num_actions=2, hidden_sizes=(8,), quantile_embedding=6)
    obs = jax.random.normal(jax.random.key(2), (3, 4))
    variables = network.init(jax.random.key(3), obs, taus=taus)
    variables = jax.tree.map(lambda v: v + 0.1 * jax.random.normal(jax.random.key(5), v.shape), variables)
    quantiles, returned = network.apply(variables, obs, taus=taus)
    assert quantiles.shape == (3, 2, 4) and returned is taus
    p = variables["params"]
    mlp = p["MLP_0"]["Dense_0"]
    x = np.maximum(np.asarray(obs) @ np.asarray(mlp["kernel"]) + np.asarray(mlp["bias"]), 0.0)  # [3, 8]
    dense = p["quantile_embedding"]["dense"]
    phi = np.maximum(cosines @ np.asarray(dense["kernel"]) + np.asarray(dense["bias"]), 0.0)  # [3, 4, 8]
    q = (x[:, None, :] * phi) @ np.asarray(p["q"]["kernel"]) + np.asarray(p["q"]["bias"])  # [3, 4, 2]
    np.testing.assert_allclose(np.asarray(quantiles), q.transpose(0, 2, 1), rtol=1e-4, atol=1e-5)
    # Fractions [N] shared by the batch: each row as if given its own copy.
    shared, _ = network.apply(variables, obs, taus=taus[0])
    each, _ = network.apply(variables, obs, taus=jnp.broadcast_to(taus[0], (3, 4)))
    np.testing.assert_allclose(np.asarray(shared), np.asarray(each), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="quantile_embedding"):
        network.apply(variables, obs)  # no fractions


def test_iqn_fractions_of_the_three_roles():
    head = ImplicitQuantile(num_online=5, num_target=6, num_acting=4)
    key, (online, target, acting) = head.learning_fractions(jax.random.key(0), (7,))
    assert (online.shape, target.shape, acting.shape) == ((7, 5), (7, 6), (7, 4))
    assert key.shape == () and not np.array_equal(jax.random.key_data(key), jax.random.key_data(jax.random.key(0)))
    for taus in (online, target, acting):
        assert np.all((np.asarray(taus) >= 0) & (np.asarray(taus) <= 1))
    assert len(np.unique(np.asarray(online))) == online.size  # fresh per sample
    # Acting: K fractions shared by a batch; the K midpoints without a key (deterministic).
    next_key, taus = head.acting_fractions(jax.random.key(1))
    assert taus.shape == (4,) and next_key is not None
    none, midpoints = head.acting_fractions(None)
    assert none is None
    np.testing.assert_allclose(np.asarray(midpoints), [0.125, 0.375, 0.625, 0.875], rtol=1e-6)
    # CVaR: acting fractions (the next action's choice too) in [0, alpha]; the loss's stay on [0, 1].
    cvar = head.replace(risk="cvar", cvar_alpha=0.2)
    _, (online, target, acting) = cvar.learning_fractions(jax.random.key(2), (1000,))
    assert np.all(np.asarray(acting) <= 0.2) and np.asarray(acting).max() > 0.19
    assert np.asarray(online).max() > 0.5 and np.asarray(target).max() > 0.5
    np.testing.assert_allclose(np.asarray(cvar.acting_fractions(None)[1]), 0.2 * np.asarray(midpoints), rtol=1e-6)
    assert np.all(np.asarray(cvar.acting_fractions(jax.random.key(3))[1]) <= 0.2)
    # Every other head draws nothing and leaves the key alone (its programs unchanged).
    for other in (value_heads.Scalar(), value_heads.Categorical(), Quantile()):
        key = jax.random.key(4)
        assert other.learning_fractions(key, (7,)) == (key, (None, None, None))
        assert other.acting_fractions(key) == (key, None) and other.network_settings() == {}


# ----------------------------------------------------------------------------- configuration


def test_shorthands_and_variants():
    assert isinstance(dqn.Config(head="qr").head, Quantile)
    assert isinstance(dqn.Config(head="iqn").head, ImplicitQuantile)
    assert isinstance(dqn.qr_dqn().head, Quantile) and dqn.algorithm.variants["qr_dqn"]["head"] == dqn.qr_dqn().head
    assert isinstance(dqn.iqn().head, ImplicitQuantile) and dqn.algorithm.variants["iqn"]["head"] == dqn.iqn().head
    assert dqn.iqn(n_step=5).n_step == 5
    defaults = ImplicitQuantile()
    assert (defaults.num_online, defaults.num_target, defaults.num_acting, defaults.embedding_dim) == (64, 64, 32, 64)
    # The command line's variant and dotted fields; the parts' JSON (run.json) round trip.
    args = cli.build_parser().parse_args(["train", "dqn", "--variant", "iqn", "--set", "head.risk=cvar"])
    config = cli.make_config(dqn.algorithm, args)
    assert config.head == ImplicitQuantile(risk="cvar")
    for head in (config.head, Quantile(num_quantiles=7, kappa=2.0)):
        assert from_json(to_json(head)) == head


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: Quantile(num_quantiles=0), "num_quantiles"),
        (lambda: ImplicitQuantile(num_online=0), "num_online"),
        (lambda: ImplicitQuantile(num_target=0), "num_target"),
        (lambda: ImplicitQuantile(num_acting=0), "num_acting"),
        (lambda: ImplicitQuantile(embedding_dim=0), "embedding_dim"),
        (lambda: ImplicitQuantile(risk="wang"), "risk"),
    ],
)
def test_bad_static_head_is_a_clear_error(make, field):
    with pytest.raises(ValueError, match=field):
        make()


@pytest.mark.parametrize(
    "head, field",
    [
        (Quantile(kappa=0.0), r"head\.kappa must lie in"),
        (ImplicitQuantile(kappa=-1.0), r"head\.kappa must lie in"),
        (ImplicitQuantile(risk="cvar", cvar_alpha=0.0), r"head\.cvar_alpha must lie in"),
        (ImplicitQuantile(risk="cvar", cvar_alpha=1.5), r"head\.cvar_alpha must lie in"),
    ],
)
def test_bad_traced_head_is_a_clear_error(head, field):
    with pytest.raises(ValueError, match=field):
        dqn.init(jax.random.key(0), dqn.Config(head=head, **TINY))


def test_refused_compositions_name_the_field():
    """R2D2's sequence targets are scalar and VDN sums scalar values: both refuse the
    quantile heads; a whole network of the user's cannot take IQN's fractions."""
    for head in (Quantile(), ImplicitQuantile()):
        with pytest.raises(ValueError, match="distributional"):
            r2d2.Config(head=head)
        with pytest.raises(ValueError, match="head=jaxrl.value_heads.Scalar"):
            vdn.Config(head=head)
    whole = networks.Whole(lambda spec: networks.MLP((8,)))
    with pytest.raises(ValueError, match="network: a whole network .*head=ImplicitQuantile"):
        dqn.Config(network=whole, head=ImplicitQuantile())


def test_iql_and_apex_trace_with_quantile_heads():
    """IQL (each agent-transition a DQN sample) and Ape-X (DQN's loss and acting) take
    both heads; traced, not compiled."""
    for head in (Quantile(num_quantiles=3), SMALL_IQN):
        for module, config in (
            (iql, iql.Config(head=head, **{**TINY, "learning_starts": 8})),
            (apex, apex.Config(head=head, **TINY)),
        ):
            out = jax.eval_shape(module.train, jax.random.key(0), config)
            assert out.metrics["loss"].shape == (config.num_iterations,), module.__name__


# ----------------------------------------------------------------------------- runs


@pytest.fixture(scope="module", params=["qr", "iqn"])
def tiny_run(request):
    """Two seeds of a tiny run, vmapped: QR-DQN with DQN's defaults (double, dueling,
    3-step, prioritized), IQN with noisy nets, CVaR acting and the target network
    choosing the next action (``double=False``: its own pass at the acting fractions)."""
    if request.param == "qr":
        config = dqn.Config(head=Quantile(num_quantiles=5), **TINY)
    else:
        head = SMALL_IQN.replace(risk="cvar", cvar_alpha=0.5)
        config = dqn.Config(head=head, exploration=NoisyNets(), double=False, **TINY)
    keys = jax.random.split(jax.random.key(0), 2)
    return config, jax.jit(jax.vmap(dqn.train, in_axes=(0, None)))(keys, config)


def test_train_jits_and_vmaps_over_seeds(tiny_run):
    config, out = tiny_run
    loss = np.asarray(out.metrics["loss"])
    assert loss.shape == (2, config.num_iterations)
    assert np.all(np.isfinite(loss[:, config.warmup_iterations :])) and np.all(loss[:, config.warmup_iterations :] >= 0)
    assert not np.allclose(loss[0, config.warmup_iterations :], loss[1, config.warmup_iterations :])
    # Greedy acting is deterministic (IQN: the acting fractions' midpoints) and is the
    # argmax of the quantiles' means.
    params = jax.tree.map(lambda x: x[0], out.state.params)
    obs = jax.random.normal(jax.random.key(5), (6, 4))
    act = jax.jit(dqn.act, static_argnames=("config", "deterministic"))
    first, _ = act(params, obs, (), jax.random.key(6), config=config, deterministic=True)
    second, _ = act(params, obs, (), jax.random.key(7), config=config, deterministic=True)
    np.testing.assert_array_equal(np.asarray(first), np.asarray(second))
    q = dqn.q_values(params, obs, config)
    np.testing.assert_array_equal(np.asarray(first), np.asarray(q).argmax(-1))


# ----------------------------------------------------------------------------- learning


# QR-DQN's learning test (the ``qr_dqn`` variant with 32 quantiles, (64, 64) hidden units
# and a learning rate of 5e-3 annealed to 0, 100k env steps of CartPole-v1, >= 475 in 2 of
# the first 3 seeds of split(key(42), 4); trials: 4 of 4 seeds of key 42, 8 of 8 of key 7,
# 6 of 8 of key 0 with 80k) is a row of benchmarks/learning_table.py;
# test_train_jits_and_vmaps_over_seeds runs its head end to end.
# IQN's learning test (the ``iqn`` variant with 8 / 8 / 8 fractions and a 32-term cosine
# embedding, (64, 64) hidden units, a learning rate of 6e-3 annealed to 0, 100k env steps
# of CartPole-v1, >= 475 in 2 of the first 3 seeds of split(key(42), 4); trials: 4 of 4
# seeds of key 42, 8 of 8 of key 7, 7 of 8 of key 0) is a row of
# benchmarks/learning_table.py beside QR-DQN's, to keep the suite within its 20 minutes;
# the quantile Huber loss, the target and the fractions are checked against NumPy above.
