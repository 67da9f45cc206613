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


def step_if(learn: bool, optimizer: optax.GradientTransformation, loss_fn: Callable, params, opt_state, *args):
    """``loss_fn(params, *args) -> loss`` (no aux) and, where ``learn`` (a static switch:
    SAC's ``autotune``, CQL's ``lagrange``), one step of ``optimizer`` on it; otherwise
    ``params`` and ``opt_state`` unchanged. Returns ``(params, opt_state, loss)``."""
    if not learn:
        return params, opt_state, loss_fn(params, *args)
    params, opt_state, loss, _ = step(optimizer, lambda *a: (loss_fn(*a), ()), params, opt_state, *args)
    return params, opt_state, loss
