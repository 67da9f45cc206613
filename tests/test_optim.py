"""``jaxrl.optim.step``: global-norm clipping then momentum SGD on a least-squares
loss, against the same three steps written in NumPy."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxrl import optim


def test_step_equals_clipped_momentum_sgd_written_in_numpy():
    rng = np.random.default_rng(0)
    kernel, bias = rng.normal(size=(5, 3)), np.zeros(3)
    x, y = rng.normal(size=(16, 5)), rng.normal(size=(16, 3))
    lr, momentum, max_norm = 0.05, 0.9, 0.1

    def loss_fn(p, x, y):
        error = x @ p["kernel"] + p["bias"] - y
        return jnp.mean(error**2), {"max_error": jnp.max(jnp.abs(error))}

    optimizer = optax.chain(optax.clip_by_global_norm(max_norm), optax.sgd(lr, momentum=momentum))
    params = {"kernel": jnp.asarray(kernel, jnp.float32), "bias": jnp.asarray(bias, jnp.float32)}
    opt_state = optimizer.init(params)
    step = jax.jit(lambda p, s: optim.step(optimizer, loss_fn, p, s, x, y))
    velocity = [np.zeros_like(kernel), np.zeros_like(bias)]
    for _ in range(3):
        error = x @ kernel + bias - y
        grads = [2 * x.T @ error / error.size, 2 * error.sum(axis=0) / error.size]
        norm = np.sqrt(sum(np.sum(g**2) for g in grads))
        assert norm > max_norm  # the clip is active
        grads = [g * max_norm / norm for g in grads]
        velocity = [g + momentum * v for g, v in zip(grads, velocity)]
        kernel, bias = kernel - lr * velocity[0], bias - lr * velocity[1]

        params, opt_state, loss, aux = step(params, opt_state)
        np.testing.assert_allclose(loss, np.mean(error**2), rtol=1e-5)
        np.testing.assert_allclose(aux["max_error"], np.max(np.abs(error)), rtol=1e-5)
        np.testing.assert_allclose(params["kernel"], kernel, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(params["bias"], bias, rtol=1e-5, atol=1e-6)
