"""Network shapes and initialisation, and the dense layers' product and its derivatives
(checked against NumPy formulas written here)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.networks import MLP, ActorCritic, MinAtarCNN, dense_matmul


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


def _dense_case(seed=0, batch=(3, 5), fan_in=4, fan_out=6):
    rng = np.random.default_rng(seed)
    x, kernel = rng.normal(size=batch + (fan_in,)), rng.normal(size=(fan_in, fan_out))
    weights = rng.normal(size=batch + (fan_out,))  # loss = sum(weights * tanh(x @ kernel))
    return x, kernel, weights


def _dense_loss(x, kernel, weights):
    return jnp.sum(weights * jnp.tanh(dense_matmul(x, kernel)))


def test_dense_matmul_value_and_reverse_mode_match_numpy():
    x, kernel, weights = _dense_case()
    np.testing.assert_allclose(dense_matmul(jnp.asarray(x, jnp.float32), jnp.asarray(kernel, jnp.float32)),
                               x @ kernel, rtol=1e-5, atol=1e-5)
    grad_x, grad_kernel = jax.grad(_dense_loss, (0, 1))(*(jnp.asarray(a, jnp.float32) for a in (x, kernel, weights)))
    g = weights * (1.0 - np.tanh(x @ kernel) ** 2)  # dloss / d(x @ kernel), [3, 5, 6]
    expected_kernel = sum(np.outer(x[i, j], g[i, j]) for i in range(3) for j in range(5))
    np.testing.assert_allclose(grad_kernel, expected_kernel, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grad_x, g @ kernel.T, rtol=1e-4, atol=1e-4)


def test_dense_matmul_hessian_vector_products_work_and_plain_forward_mode_is_a_clear_error():
    x, kernel, weights = _dense_case(1)
    kernel_dot = np.random.default_rng(2).normal(size=kernel.shape)
    f32 = lambda *arrays: tuple(jnp.asarray(a, jnp.float32) for a in arrays)  # noqa: E731
    # Forward over reverse: the kernel-kernel block of the Hessian times kernel_dot.
    hvp = jax.jvp(lambda k: jax.grad(_dense_loss, 1)(f32(x)[0], k, f32(weights)[0]), f32(kernel), f32(kernel_dot))[1]
    t = np.tanh(x @ kernel)
    curvature = weights * (-2.0 * t * (1.0 - t**2)) * (x @ kernel_dot)  # d(g)/d(kernel) . kernel_dot
    expected = sum(np.outer(x[i, j], curvature[i, j]) for i in range(3) for j in range(5))
    np.testing.assert_allclose(hvp, expected, rtol=1e-3, atol=1e-3)
    hessian = jax.hessian(_dense_loss, 1)(*f32(x, kernel, weights))  # [4, 6, 4, 6]
    np.testing.assert_allclose(np.tensordot(hessian, kernel_dot, 2), expected, rtol=1e-3, atol=1e-3)
    with pytest.raises(TypeError, match="forward-mode"):
        jax.jvp(dense_matmul, f32(x, kernel), f32(x, kernel_dot))


def test_dense_matmul_gradient_under_vmap_matches_each_lane():
    x, kernel, weights = _dense_case(4)
    kernels = np.stack([kernel, -kernel, 2 * kernel])
    args = (jnp.asarray(x, jnp.float32), jnp.asarray(kernels, jnp.float32), jnp.asarray(weights, jnp.float32))
    batched = jax.vmap(jax.grad(_dense_loss, 1), in_axes=(None, 0, None))(*args)
    for lane in range(3):
        np.testing.assert_allclose(batched[lane], jax.grad(_dense_loss, 1)(args[0], args[1][lane], args[2]),
                                   rtol=1e-5, atol=1e-5)
