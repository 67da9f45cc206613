"""The scan every algorithm's ``train`` runs: iterations of ``step`` with periodic
deterministic evaluation and progress reports, all inside one compiled program."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from jaxrl import logging as jaxrl_logging

# Reported where a step's metrics have them: env steps for RL, gradient ``updates`` for
# learning from a fixed dataset (behaviour cloning).
REPORTED = ("timesteps", "updates", "episode_return", "eval_return")


def is_checkpoint(iteration: jax.Array, num_iterations: int, count: int) -> jax.Array:
    """True at ``count`` iterations spread evenly over the run, the last one included."""
    return (iteration + 1) * count // num_iterations > iteration * count // num_iterations


def run_if(pred: jax.Array, fn: Callable, otherwise):
    """``fn()`` if ``pred`` else ``otherwise`` (a pytree like ``fn()``'s result), for a
    ``pred`` that is not batched by ``jax.vmap``.

    A ``lax.cond`` with one branch, except that ``fn`` may step host envs (an
    ``io_callback``: :mod:`jaxrl.envs.gymnasium`) under ``jax.vmap``: JAX refuses IO
    effects inside a vmapped ``cond`` but allows them in a ``while_loop`` whose predicate
    is unbatched, so this is a loop that runs ``fn`` zero times or once.
    """
    def body(carry):
        return jnp.zeros((), bool), fn()

    return jax.lax.while_loop(lambda carry: carry[0], body, (jnp.asarray(pred, bool), otherwise))[1]


def iterate(step: Callable, evaluate: Callable, state, run_key: jax.Array, start: int, stop: int,
            num_iterations: int, num_evals: int, num_reports: int):
    """Run iterations ``start .. stop - 1`` of a run of ``num_iterations``.

    Args:
      step: ``step(state, key, index) -> (state, metrics)``, iteration ``index`` (an
        int32 scalar from the scan: unbatched under ``vmap``, so branching on it
        with ``lax.cond`` skips work rather than masking it).
      evaluate: ``evaluate(params, key) -> EvalResult``, run at ``num_evals`` evenly
        spread iterations of the whole run; elsewhere ``eval_return`` / ``eval_length``
        are NaN.
      run_key: iteration ``i`` uses keys derived from ``fold_in(run_key, i)``, so a run
        split into several calls draws the same keys as one call.
      num_reports: progress reports (:func:`jaxrl.logging.report`) over the whole run.
    Returns ``(state, metrics)`` with metric leaves ``[stop - start]``.
    """

    def iteration(state, index):
        step_key, eval_key = jax.random.split(jax.random.fold_in(run_key, index))
        state, metrics = step(state, step_key, index)

        def run_eval():
            result = evaluate(state.params, eval_key)
            return jnp.mean(result.returns), jnp.mean(result.lengths.astype(jnp.float32))

        # ``index`` comes from the scan, not from vmapped data, so this stays a real
        # branch (evaluation is skipped, not masked) under vmap over seeds or configs.
        nan = jnp.full((), jnp.nan, jnp.float32)
        metrics["eval_return"], metrics["eval_length"] = run_if(
            is_checkpoint(index, num_iterations, num_evals), run_eval, (nan, nan)
        )
        if num_reports:
            jax.lax.cond(
                is_checkpoint(index, num_iterations, num_reports),
                lambda: jaxrl_logging.report({k: metrics[k] for k in REPORTED if k in metrics}),
                lambda: None,
            )
        return state, metrics

    return jax.lax.scan(iteration, state, jnp.arange(start, stop))
