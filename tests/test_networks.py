"""Network shapes and initialisation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

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
    logits, value = net.apply(params, obs)
    assert logits.shape == (6, 3) and value.shape == (6,)
    # A small policy head: the initial policy is close to uniform.
    probs = jax.nn.softmax(logits)
    assert np.allclose(probs, 1 / 3, atol=0.05)


def test_actor_critic_continuous_has_state_independent_log_std():
    net = ActorCritic(action_dim=2, discrete=False, hidden_sizes=(16, 16), log_std_init=-0.5)
    obs = jax.random.normal(jax.random.key(1), (4, 3))
    params = net.init(jax.random.key(0), obs)
    (mean, log_std), value = net.apply(params, obs)
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
