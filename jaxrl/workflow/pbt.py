"""Population-based training (Jaderberg et al., 2017) inside one compiled program.

A population of ``P`` members of one algorithm, each with its own values of some traced
hyper-parameters, trains in rounds of ``interval`` iterations (vmapped over members).
After each round, inside the same ``lax.scan``, the members are ranked by their mean
``score_metric`` over the round; each of the worst ``fraction`` copies the agent (every
state field but its envs, replay buffer and counters: parameters, target networks,
optimiser state, observation statistics) of a random one of the best ``fraction``
(exploit) and takes that member's hyper-parameters multiplied by a random factor from
``factors``, clipped to the bounds (explore)::

    from jaxrl.workflow import pbt
    result = pbt.train("ppo", ppo.Config(), {"learning_rate": (1e-4, 3e-3), "ent_coef": (1e-4, 0.05)},
                       population=8, interval=10)
    result.hyperparams["learning_rate"]   # [rounds + 1, P]: each member's value per round
    result.parents                        # [rounds, P]: whom each member copied (itself if kept)
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl import loop
from jaxrl.config import get_path, replace_paths, sweep_axes, swept_config
from jaxrl.workflow import rundir

# State fields that belong to a member's own stream of experience, not to its agent:
# exploit leaves them in place.
MEMBER_OWN = ("env_state", "obs", "timesteps", "updates", "buffer", "dataset")


@dataclasses.dataclass
class PBTResult:
    """What :func:`train` returns.

    Attributes:
      state: the members' final states, leaves ``[P, ...]``.
      metrics: ``{name: [P, iterations]}`` by member slot (a slot's agent is replaced
        when it is exploited: see ``parents``).
      hyperparams: ``{name: [rounds + 1, P]}``: the values each member trained with in
        each round, then the final ones.
      parents: ``[rounds, P]`` int: after round ``r``, member ``i`` holds the agent of
        member ``parents[r, i]`` (``i`` itself unless it was replaced).
      scores: ``[rounds, P]``: each member's ranking score in each round.
      compile_seconds / run_seconds.
    """

    state: Any
    metrics: dict
    hyperparams: dict
    parents: np.ndarray
    scores: np.ndarray
    compile_seconds: float
    run_seconds: float

    def lineage(self, member: int) -> list[int]:
        """The member whose agent ``member`` descends from at the start of each round,
        oldest first (``[rounds + 1]``, ending with ``member``)."""
        chain = [member]
        for parents in self.parents[::-1]:
            chain.append(int(parents[chain[-1]]))
        return chain[::-1]


def exploit_and_explore(
    state,
    hyperparams: dict,
    scores: jax.Array,
    key: jax.Array,
    bounds: dict,
    fraction: float,
    factors: tuple[float, ...],
):
    """One PBT step on a population (leaves ``[P, ...]``).

    The ``ceil(fraction * P)`` lowest ``scores`` (NaN ranks lowest) copy the agent
    fields (all but :data:`MEMBER_OWN`) of a uniformly drawn member among as many
    highest, and its hyper-parameters times a factor drawn from ``factors``, clipped to
    ``bounds[name] = (low, high)``. Returns ``(state, hyperparams, parents [P])``.
    """
    population = scores.shape[0]
    count = max(1, math.ceil(fraction * population))
    order = jnp.argsort(jnp.where(jnp.isnan(scores), -jnp.inf, scores))
    worst, best = order[:count], order[population - count :]
    source_key, factor_key = jax.random.split(key)
    sources = best[jax.random.randint(source_key, (count,), 0, count)]
    parents = jnp.arange(population).at[worst].set(sources)

    def copy_agent(name, value):
        return value if name in MEMBER_OWN else jax.tree.map(lambda leaf: leaf[parents], value)

    state = state.replace(**{f.name: copy_agent(f.name, getattr(state, f.name)) for f in dataclasses.fields(state)})
    explored = {}
    for index, (name, values) in enumerate(hyperparams.items()):
        factor = jax.random.choice(jax.random.fold_in(factor_key, index), jnp.asarray(factors, values.dtype), (count,))
        low, high = bounds[name]
        explored[name] = values.at[worst].set(jnp.clip(values[sources] * factor, low, high))
    return state, explored, parents


def initial_hyperparams(bounds: dict, population: int, seed: int) -> dict:
    """Each member's starting values: log-uniform in ``(low, high)`` for positive
    bounds, uniform otherwise."""
    rng = np.random.default_rng(seed)
    values = {}
    for name, (low, high) in bounds.items():
        if low > 0:
            values[name] = np.exp(rng.uniform(math.log(low), math.log(high), population))
        else:
            values[name] = rng.uniform(low, high, population)
    return values


def train(
    algorithm,
    config,
    bounds: dict,
    population: int = 8,
    interval: int = 10,
    seed: int = 0,
    fraction: float = 0.25,
    factors: tuple[float, ...] = (0.8, 1.25),
    score_metric: str = "episode_return",
    initial: dict | None = None,
    *,
    logdir: str | None = None,
    loggers=None,
    rounds_per_chunk: int | None = None,
    checkpoint_every: int | None = None,
    keep_checkpoints: int = 3,
    resume: bool = False,
    progress: bool = False,
) -> PBTResult:
    """Population-based training of ``algorithm`` on ``config``, vmapped over members.

    By default the whole run is one compiled program. With ``rounds_per_chunk`` (or a
    ``logdir``, loggers or ``progress``), it runs in chunks of that many rounds through
    :func:`jaxrl.workflow.runner.drive`: one logged row per member and iteration with the
    hyper-parameters it trained with (``pbt_<field>``), its round's ``pbt_score`` and
    ``pbt_parent``; checkpoints of the whole population; and ``resume`` continuing an
    interrupted run exactly as if it had never stopped.

    Args:
      bounds: ``{field: (low, high)}`` for each traced field PBT tunes.
      population: members ``P`` (vmapped).
      interval: iterations per round; must divide the config's ``num_iterations``.
        Exploit/explore runs after every round but the last.
      initial: ``{field: [P]}`` starting values (default: :func:`initial_hyperparams`).
      fraction / factors / score_metric: see :func:`exploit_and_explore`; a member's
        score is the mean of ``score_metric`` over the round's iterations (NaN ignored).
      logdir / loggers / checkpoint_every / keep_checkpoints / resume / progress: as
        :func:`jaxrl.workflow.runner.run`'s (``loggers`` default to CSV in ``logdir``;
        ``checkpoint_every`` counts chunks).
    """
    from jaxrl import algorithms
    from jaxrl.workflow import runner

    module = algorithms.resolve(algorithm)
    name = module.name
    if not isinstance(population, int) or population < 2:
        raise ValueError(f"population must be an int >= 2, got {population!r}")
    if not 0 < fraction <= 0.5:
        raise ValueError(f"fraction must be in (0, 0.5] (the share replaced each round), got {fraction}")
    for field, bound in bounds.items():
        if len(bound) != 2 or not bound[0] < bound[1]:
            raise ValueError(f"bounds[{field!r}] must be (low, high) with low < high, got {bound!r}")
    program = module.program(config)
    num_iterations = program.num_iterations
    if not isinstance(interval, int) or interval < 1 or num_iterations % interval:
        raise ValueError(
            f"interval must be an int >= 1 dividing the run's {num_iterations} iterations, got {interval!r}"
        )
    rounds = num_iterations // interval
    chunked = logdir is not None or rounds_per_chunk is not None or bool(loggers) or progress or resume
    rounds_per_chunk = rounds if rounds_per_chunk is None else rounds_per_chunk
    if not isinstance(rounds_per_chunk, int) or not 1 <= rounds_per_chunk <= rounds:
        raise ValueError(
            f"rounds_per_chunk must be an int in [1, {rounds}] (the run's rounds), got {rounds_per_chunk!r}"
        )
    if resume and not program.resumable:
        raise ValueError(f"{name}'s population cannot be resumed: part of its state lives on the host (a host env)")
    initial = initial_hyperparams(bounds, population, seed) if initial is None else initial
    if set(initial) != set(bounds):
        raise ValueError(f"initial must give the fields of bounds {sorted(bounds)}, got {sorted(initial)}")
    for field, values in initial.items():
        low, high = bounds[field]
        if np.shape(values) != (population,) or not np.all((low <= np.asarray(values)) & (np.asarray(values) <= high)):
            raise ValueError(f"initial[{field!r}] must be {population} values within {bounds[field]}")
    configs = swept_config(config, initial)  # checks the fields are traced and in range
    axes = sweep_axes(configs)
    start_values = {field: get_path(configs, field) for field in bounds}

    def population_init(key):
        init_key, run_key, pbt_key = jax.random.split(key, 3)

        def member_init(member_key, member_config):
            return module.program(member_config).init(member_key, ())

        states = jax.vmap(member_init, in_axes=(0, axes))(jax.random.split(init_key, population), configs)
        run_keys = jax.random.split(run_key, population)
        return {"states": states, "values": start_values, "run_keys": run_keys, "pbt_key": pbt_key}

    def run_rounds(tree, start, length):
        """Iterations ``start .. start + length - 1``, whole rounds: ``(tree, metrics
        {name: [P, length]})``, the members' own metrics and the ``pbt_*`` columns."""

        def one_round(carry, round_index):
            states, values = carry
            round_configs = replace_paths(configs, values)

            def member_round(state, member_key, member_config):
                program = module.program(member_config)
                return loop.iterate(program, state, member_key, round_index * interval, interval)

            states, metrics = jax.vmap(member_round, in_axes=(0, 0, axes))(states, tree["run_keys"], round_configs)
            if score_metric not in metrics:
                raise ValueError(
                    f"score_metric {score_metric!r} is not a metric of {name}; "
                    f"its metrics: {', '.join(sorted(metrics))}"
                )
            scores = jnp.nanmean(metrics[score_metric], axis=1)
            new_states, new_values, parents = exploit_and_explore(
                states, values, scores, jax.random.fold_in(tree["pbt_key"], round_index), bounds, fraction, factors
            )
            last = round_index == rounds - 1  # no exploit after the final round
            new_states, new_values, parents = jax.tree.map(
                lambda kept, changed: jnp.where(last, kept, changed),
                (states, values, jnp.arange(population)),
                (new_states, new_values, parents),
            )
            per_round = {f"pbt_{field}": value for field, value in values.items()}
            per_round.update(pbt_score=scores, pbt_parent=parents)
            metrics.update({k: jnp.broadcast_to(v[:, None], (population, interval)) for k, v in per_round.items()})
            return (new_states, new_values), metrics

        first_round = start // interval
        (states, values), metrics = jax.lax.scan(
            one_round, (tree["states"], tree["values"]), first_round + jnp.arange(length // interval)
        )
        # [rounds, P, interval] -> [P, length], each row following its member slot
        metrics = jax.tree.map(lambda m: jnp.moveaxis(m, 1, 0).reshape((population, -1) + m.shape[3:]), metrics)
        return {**tree, "states": states, "values": values}, metrics

    jitted = jax.jit(run_rounds, static_argnums=2, donate_argnums=0)
    compiled = {}

    def chunk(tree, length):
        if length not in compiled:
            compiled[length] = jitted.lower(tree, jnp.int32(0), length).compile()
        return compiled[length]

    driven = runner.Driven(
        name=name,
        init=lambda: jax.jit(population_init)(jax.random.key(seed)),
        chunk=chunk,
        metric_names=lambda tree, length: jax.eval_shape(functools.partial(run_rounds, length=length), tree, 0)[1],
        num_iterations=num_iterations,
        counter=program.counter,
        budget=program.budget,
    )
    meta = rundir.meta(
        name,
        config,
        pbt={
            "bounds": bounds,
            "initial": {k: np.asarray(v).tolist() for k, v in initial.items()},
            "population": population,
            "interval": interval,
            "seed": seed,
            "fraction": fraction,
            "factors": list(factors),
            "score_metric": score_metric,
            "rounds_per_chunk": rounds_per_chunk,
        },
    )
    result = runner.drive(
        driven,
        meta=meta,
        logdir=logdir,
        loggers=("csv",) if loggers is None and chunked else (loggers or ()),
        chunk_iterations=rounds_per_chunk * interval,
        checkpoint_every=checkpoint_every,
        keep_checkpoints=keep_checkpoints,
        resume=resume,
        progress=progress,
    )
    member_metrics = {k: v for k, v in result.metrics.items() if not k.startswith("pbt_")}
    round_ends = np.arange(interval - 1, num_iterations, interval)
    per_round = {k: np.asarray(v)[:, round_ends].T for k, v in result.metrics.items() if k.startswith("pbt_")}
    final_values = jax.tree.map(np.asarray, result.state["values"])
    return PBTResult(
        result.state["states"],
        member_metrics,
        {field: np.concatenate([per_round[f"pbt_{field}"], final_values[field][None]]) for field in bounds},
        per_round["pbt_parent"].astype(np.int64),
        per_round["pbt_score"],
        result.compile_seconds,
        result.run_seconds,
    )
