"""The scan every algorithm's ``train`` runs: iterations of ``step`` with periodic
deterministic evaluation and progress reports, all inside one compiled program."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl import prng
from jaxrl.types import TrainOutput

# Reported where a step's metrics have them: env steps for RL, gradient ``updates`` for
# learning from a fixed dataset (behaviour cloning).
REPORTED = ("timesteps", "updates", "episode_return", "eval_return")


# ----------------------------------------------------------------------------- progress reports

_sinks: list[Callable[[dict], None]] = []


def report(metrics: dict) -> None:
    """Send a dict of scalars (e.g. ``timesteps``, ``episode_return``) to the host sinks.

    Safe under ``jit``, ``scan`` and ``vmap`` (under ``vmap`` each lane reports)."""
    jax.debug.callback(_dispatch, metrics)


def _dispatch(metrics: dict) -> None:
    if not _sinks:
        return
    values = {k: np.asarray(v) for k, v in metrics.items()}
    for sink in list(_sinks):
        sink(values)


@contextlib.contextmanager
def sink(fn: Callable[[dict], None]):
    """Activate ``fn(metrics)`` as a sink for reports made while the context is open."""
    _sinks.append(fn)
    try:
        yield fn
    finally:
        _sinks.remove(fn)


def is_checkpoint(iteration: jax.Array, num_iterations: int, count: int) -> jax.Array:
    """True at ``count`` iterations spread evenly over the run, the last one included."""
    return (iteration + 1) * count // num_iterations > iteration * count // num_iterations


def run_if(pred: jax.Array, fn: Callable, operand):
    """``fn(operand)`` if ``pred`` else ``operand`` (``fn`` returns a pytree like
    ``operand``), for a ``pred`` that is not batched by ``jax.vmap``.

    A one-branch ``lax.cond``, except that ``fn`` may step host envs (an ``io_callback``:
    :mod:`jaxrl.envs.gymnasium`) under ``jax.vmap``: JAX refuses IO effects inside a
    vmapped ``cond`` but allows them in a ``while_loop`` whose predicate is unbatched, so
    this is a loop that runs ``fn`` zero times or once. ``fn`` gets the loop's carry,
    not a closed-over copy, so XLA can update large operands (a replay buffer) in place.
    """

    def body(carry):
        return jnp.zeros((), bool), fn(carry[1])

    return jax.lax.while_loop(lambda carry: carry[0], body, (jnp.asarray(pred, bool), operand))[1]


def no_inputs() -> tuple:
    """The inputs of a program that learns from its env alone."""
    return ()


class Program(NamedTuple):
    """A training run, in the pieces that :func:`train` fuses into one scan and
    :mod:`jaxrl.workflow.runner` drives in chunks, and the facts about it that the runner needs.
    Every algorithm's ``program(config)`` builds one.

    Attributes:
      init: ``init(key, inputs) -> state``; ``inputs`` as :attr:`inputs` returns them.
      iteration: ``iteration(state, key, index) -> (state, metrics)``, iteration
        ``index`` (an int32 scalar from the scan: unbatched under ``vmap``, so branching
        on it with ``lax.cond`` skips work rather than masking it).
      evaluate: ``evaluate(params, key) -> EvalResult``.
      num_iterations: iterations in the whole run (schedules depend on it).
      num_evals: evaluations, spread evenly over the run; ``eval_return`` /
        ``eval_length`` are NaN between them.
      num_reports: progress reports (:func:`report`) over the run.
      counter: the metric that counts the run's progress: ``"timesteps"`` (env steps)
        or ``"updates"`` (gradient updates, for learning from a fixed dataset).
      budget: the ``counter``'s value the run is configured to reach.
      inputs: ``inputs() -> pytree`` of arrays read on the host that ``init`` learns
        from (behaviour cloning's dataset file); passed to ``init`` as an argument, so
        they are data of the compiled program, not constants.
      resumable: False where part of the run's state lives outside the pytree (an env
        stepped on the host): a checkpoint then holds the agent, not the whole run.
      restart_envs: ``restart_envs(state, key) -> state`` with fresh episodes in every
        env (reset, the policy's memory cleared), for a resumed run whose host envs
        could not be saved; None where there is nothing to restart.
    """

    init: Callable
    iteration: Callable
    evaluate: Callable
    num_iterations: int
    num_evals: int
    num_reports: int
    counter: str = "timesteps"
    budget: int = 0
    inputs: Callable = no_inputs
    resumable: bool = True
    restart_envs: Callable | None = None


def config_program(config, init: Callable, step: Callable, evaluate: Callable, /, **facts) -> Program:
    """The :class:`Program` of a run that a Config describes: ``init(key, config)``, then
    ``config.num_iterations`` iterations of ``step(state, key, config)`` (or, given
    ``iteration``, of ``iteration(state, key, index)``), ``evaluate(params, key, config)``
    at ``config.num_evals`` points and ``config.num_reports`` progress reports, toward a
    ``budget`` of ``config.total_timesteps``. ``facts`` overrides any of these or sets
    :class:`Program`'s other fields."""
    defaults = {
        "init": lambda: lambda key, inputs: init(key, config),
        "iteration": lambda: lambda state, key, index: step(state, key, config),
        "evaluate": lambda: lambda params, key: evaluate(params, key, config),
        "num_iterations": lambda: config.num_iterations,
        "num_evals": lambda: config.num_evals,
        "num_reports": lambda: config.num_reports,
        "budget": lambda: config.total_timesteps,
    }  # each read only where ``facts`` does not give it (BC's run counts updates, not env steps)
    return Program(**{name: default() for name, default in defaults.items() if name not in facts}, **facts)


def iterate(program: Program, state, run_key: jax.Array, start, length: int):
    """Run iterations ``start .. start + length - 1`` of ``program``.

    ``start`` may be traced (one compiled chunk serves every chunk of a run);
    ``length`` is static. Iteration ``i`` uses keys derived from ``fold_in(run_key, i)``,
    so a run split into several calls draws the same keys as one call. A default
    threefry key draws through :func:`jaxrl.prng.straight` (the same numbers, compiled
    faster).
    Returns ``(state, metrics)`` with metric leaves ``[length]``.
    """
    run_key = prng.straight(run_key)

    def iteration(state, index):
        step_key, eval_key = jax.random.split(jax.random.fold_in(run_key, index))
        state, metrics = program.iteration(state, step_key, index)

        def run_eval():
            result = program.evaluate(state.params, eval_key)
            return jnp.mean(result.returns), jnp.mean(result.lengths.astype(jnp.float32))

        # ``index`` comes from the scan, not from vmapped data, so this stays a real
        # branch (evaluation is skipped, not masked) under vmap over seeds or configs.
        # Without evaluations there is no branch at all: XLA:CPU runs a body beside a
        # loop whose predicate is constantly false much slower.
        nan = jnp.full((), jnp.nan, jnp.float32)
        metrics["eval_return"], metrics["eval_length"] = nan, nan
        if program.num_evals:
            metrics["eval_return"], metrics["eval_length"] = run_if(
                is_checkpoint(index, program.num_iterations, program.num_evals), lambda _: run_eval(), (nan, nan)
            )
        if program.num_reports:
            jax.lax.cond(
                is_checkpoint(index, program.num_iterations, program.num_reports),
                lambda: report({k: metrics[k] for k in REPORTED if k in metrics}),
                lambda: None,
            )
        return state, metrics

    return jax.lax.scan(iteration, state, start + jnp.arange(length, dtype=jnp.int32))


def train(program: Program, key: jax.Array, inputs=None) -> TrainOutput:
    """``program.init`` on ``inputs`` (default: ``program.inputs()``), then all
    ``program.num_iterations`` iterations in one ``lax.scan``. Metric leaves are
    ``[num_iterations]``. A default threefry key draws through
    :func:`jaxrl.prng.straight` (the same numbers, compiled faster)."""
    init_key, run_key = jax.random.split(prng.straight(key))
    state = program.init(init_key, program.inputs() if inputs is None else inputs)
    state, metrics = iterate(program, state, run_key, 0, program.num_iterations)
    return TrainOutput(state, metrics)
