"""The optimiser step every algorithm uses: an optax update of a parameter pytree on
the gradient of a loss. ::

    opt_state = optimizer.init(params)
    params, opt_state, loss, aux = optim.step(optimizer, loss_fn, params, opt_state, batch)
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import optax


def step(optimizer: optax.GradientTransformation, loss_fn: Callable, params, opt_state, *args):
    """One step of ``optimizer`` on ``loss_fn(params, *args) -> (loss, aux)``.
    Returns ``(params, opt_state, loss, aux)``."""
    (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, *args)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, aux
