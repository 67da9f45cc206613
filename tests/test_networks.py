"""Network shapes and initialisation (the orthogonal initializer against NumPy's QR),
and forward-mode derivatives of every network against finite differences."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import networks
from jaxrl.networks import MLP, ActorCritic, MinAtarCNN


def test_mlp_flattens_observation_dims():
    net = MLP((32, 16), "relu", obs_ndim=2)
    x = jnp.ones((5, 3, 4))
    params = net.init(jax.random.key(0), x)
    assert net.apply(params, x).shape == (5, 16)


def test_minatar_cnn_shapes():
    net = MinAtarCNN((64,))
    x = jnp.ones((2, 7, 10, 10, 4))  # extra leading batch dims are kept
    params = net.init(jax.random.key(0), x)
    assert net.apply(params, x).shape == (2, 7, 64)


@pytest.mark.parametrize("network, obs_shape", [("mlp", (4,)), ("cnn", (10, 10, 4))])
def test_actor_critic_discrete(network, obs_shape):
    net = ActorCritic(action_dim=3, discrete=True, network=network, hidden_sizes=(32,), obs_ndim=len(obs_shape))
    obs = jax.random.normal(jax.random.key(1), (6,) + obs_shape)
    params = net.init(jax.random.key(0), obs)
    logits, value, carry = net.apply(params, obs)
    assert carry == ()
    assert logits.shape == (6, 3) and value.shape == (6,)
    # A small policy head: the initial policy is close to uniform.
    probs = jax.nn.softmax(logits)
    assert np.allclose(probs, 1 / 3, atol=0.05)


def test_actor_critic_continuous_has_state_independent_log_std():
    net = ActorCritic(action_dim=2, discrete=False, hidden_sizes=(16, 16), log_std_init=-0.5)
    obs = jax.random.normal(jax.random.key(1), (4, 3))
    params = net.init(jax.random.key(0), obs)
    (mean, log_std), value, _ = net.apply(params, obs)
    assert mean.shape == (4, 2) and log_std.shape == (2,) and value.shape == (4,)
    np.testing.assert_allclose(log_std, -0.5)


def test_unknown_network_or_activation_is_a_clear_error():
    obs = jnp.ones((1, 4))
    with pytest.raises(ValueError, match="activation"):
        MLP((8,), "swishy").init(jax.random.key(0), obs)
    with pytest.raises(ValueError, match="network"):
        ActorCritic(action_dim=2, discrete=True, network="transformer").init(jax.random.key(0), obs)
    with pytest.raises(ValueError, match="cnn"):
        ActorCritic(action_dim=2, discrete=True, network="cnn").init(jax.random.key(0), obs)


@pytest.mark.parametrize("shape", [(7, 7), (12, 5), (40, 3)])
def test_orthonormal_columns_equal_numpy_qr_with_a_positive_diagonal(shape):
    matrix = np.random.default_rng(sum(shape)).normal(size=shape)
    q, r = np.linalg.qr(matrix)
    expected = q * np.sign(np.diag(r))  # the unique QR with R's diagonal positive
    np.testing.assert_allclose(networks.orthonormal_columns(jnp.asarray(matrix, jnp.float32)), expected, atol=2e-5)


@pytest.mark.parametrize("shape", [(4, 64), (64, 64), (64, 2), (3, 3, 4, 16)])
def test_orthogonal_initializer_gives_scaled_orthogonal_rows_or_columns(shape):
    weights = np.asarray(networks.orthogonal(0.5)(jax.random.key(0), shape), np.float64).reshape(-1, shape[-1])
    gram = weights.T @ weights if weights.shape[0] >= weights.shape[1] else weights @ weights.T
    np.testing.assert_allclose(gram, 0.25 * np.eye(len(gram)), atol=1e-5)


def test_orthogonal_initializer_is_haar_distributed():
    """Over many keys, 3x3 draws have E[w_ij] = 0 and E[w_ij^2] = 1/3, and determinant
    +1 and -1 equally often (a sign convention left out of the QR would fix it)."""
    draws = np.asarray(
        jax.vmap(lambda key: networks.orthogonal(1.0)(key, (3, 3)))(jax.random.split(jax.random.key(1), 4000)),
        np.float64,
    )
    np.testing.assert_allclose(draws.mean(axis=0), 0.0, atol=0.05)
    np.testing.assert_allclose((draws**2).mean(axis=0), 1 / 3, atol=0.03)
    assert abs(np.mean(np.linalg.det(draws) > 0) - 0.5) < 0.04


def _networks():
    """(module, inputs) for every network the algorithms build, with smooth activations
    (finite differences across a ReLU's kink would not be a derivative)."""
    obs, image = jnp.ones((5, 4)), jnp.ones((5, 10, 10, 2))
    action = jnp.ones((5, 2))
    return {
        "mlp": (MLP((8, 6)), (obs,)),
        "minatar_cnn": (MinAtarCNN((8,), "silu"), (image,)),
        "actor_critic_discrete": (ActorCritic(3, True, hidden_sizes=(8,)), (obs,)),
        "actor_critic_continuous": (ActorCritic(2, False, hidden_sizes=(8,)), (obs,)),
        "actor_critic_cnn": (ActorCritic(3, True, "cnn", (8,), obs_ndim=3), (image,)),
        **{
            f"actor_critic_{kind}": (
                ActorCritic(3, True, hidden_sizes=(8,), memory=kind, memory_size=6),
                (
                    jnp.ones((3, 5, 4)),
                    networks.initial_carry(kind, 6, 5),
                    jnp.array([[0] * 5, [1, 0, 0, 1, 0], [0] * 5], bool),
                ),
            )
            for kind in ("gru", "lstm")
        },
        "q_network": (networks.QNetwork(3, hidden_sizes=(8,), activation="silu"), (obs,)),
        "rainbow_q_network": (
            networks.QNetwork(3, hidden_sizes=(8,), activation="silu", dueling=True, noisy=True, num_atoms=5),
            (obs, False, jnp.linspace(-1.0, 1.0, (8 + 3 * 5) + (8 + 5))),
        ),  # noise_size()
        "gaussian_actor": (networks.Actor(2, "gaussian", hidden_sizes=(8,), activation="silu"), (obs,)),
        "deterministic_actor": (networks.Actor(2, "deterministic", hidden_sizes=(8,), activation="silu"), (obs,)),
        "twin_continuous_q": (networks.ensemble(networks.ContinuousQ, 2)((8,), "silu"), (obs, action)),
    }


@pytest.mark.parametrize("name", list(_networks()))
def test_forward_mode_through_every_network_matches_finite_differences(name):
    """``jax.jvp`` (and ``jax.jacfwd``'s machinery) through the network's parameters and
    its float inputs, against a central difference along the same random direction."""
    module, inputs = _networks()[name]
    rng = np.random.default_rng(0)
    inputs = tuple(
        jnp.asarray(rng.normal(size=x.shape), jnp.float32) if isinstance(x, jax.Array) and x.ndim > 1 else x
        for x in inputs
    )
    params = module.init(jax.random.key(0), *inputs)
    floats = (params, inputs[0])
    tangent = jax.tree.map(lambda x: jnp.asarray(0.1 * rng.normal(size=x.shape), jnp.float32), floats)

    def output(params, obs):
        return jax.tree.leaves(module.apply(params, obs, *inputs[1:]))

    _, forward = jax.jvp(output, floats, tangent)
    eps = 1e-2
    shifted = [jax.tree.map(lambda x, t, sign=sign: x + sign * eps * t, floats, tangent) for sign in (1, -1)]
    for jvp_leaf, plus, minus in zip(forward, output(*shifted[0]), output(*shifted[1])):
        np.testing.assert_allclose(jvp_leaf, (plus - minus) / (2 * eps), rtol=2e-2, atol=2e-3)
