"""``jaxrl.optim``: an optimiser step on the parameters raveled into one vector is the
same step as optax's on the parameter pytree."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxrl import optim


# Adam's step is invariant to scaling one gradient element, so momentum SGD is there to
# see a gradient element that went astray.
@pytest.mark.parametrize("optimizer", [optax.adam(0.05), optax.sgd(0.05, momentum=0.9)], ids=["adam", "momentum"])
def test_steps_on_the_raveled_parameters_equal_optax_on_the_pytree(optimizer):
    """Three steps of global-norm clipping (active) and the optimiser, its state carried
    over, against the same steps on the pytree leaf by leaf; the loss and the auxiliary
    output of each step come back unchanged."""
    keys = jax.random.split(jax.random.key(0), 4)
    params = {"dense": {"kernel": jax.random.normal(keys[0], (5, 3)), "bias": jnp.zeros(3)},
              "scale": jax.random.normal(keys[1], ())}
    x, y = jax.random.normal(keys[2], (16, 5)), jax.random.normal(keys[3], (16, 3))

    def loss_fn(p, x, y):
        error = p["scale"] * (x @ p["dense"]["kernel"] + p["dense"]["bias"]) - y
        return jnp.mean(error ** 2), {"max_error": jnp.max(jnp.abs(error))}

    optimizer = optax.chain(optax.clip_by_global_norm(0.1), optimizer)
    flat_state, reference, reference_state = optim.init(optimizer, params), params, optimizer.init(params)
    assert {leaf.shape for leaf in jax.tree.leaves(flat_state) if leaf.ndim} == {(5 * 3 + 3 + 1,)}  # raveled
    step = jax.jit(lambda p, s: optim.step(optimizer, loss_fn, p, s, x, y))
    for _ in range(3):
        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(reference, x, y)
        assert optax.tree.norm(grads) > 0.1  # the clip is active
        updates, reference_state = optimizer.update(grads, reference_state, reference)
        reference = optax.apply_updates(reference, updates)
        params, flat_state, got_loss, got_aux = step(params, flat_state)
        np.testing.assert_allclose(got_loss, loss, rtol=1e-6)
        np.testing.assert_allclose(got_aux["max_error"], aux["max_error"], rtol=1e-6)
        assert jax.tree.structure(params) == jax.tree.structure(reference)
        jax.tree.map(lambda ours, theirs: np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-7),
                     params, reference)
