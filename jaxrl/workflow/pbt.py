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
from jaxrl.workflow import distributed, rundir
from jaxrl.workflow.options import DEFAULTS, RunOptions, with_keywords

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
    rounds_per_chunk: int | None = None,
    options: RunOptions = DEFAULTS,
    **deprecated,
) -> PBTResult:
    """Population-based training of ``algorithm`` on ``config``, vmapped over members.

    The members are the lanes of one program that :func:`jaxrl.workflow.runner.drive`
    runs in chunks of ``rounds_per_chunk`` rounds (default: all of them, one chunk):
    one logged row per member and iteration with the hyper-parameters it trained with
    (``pbt_<field>``), its round's ``pbt_score`` and ``pbt_parent``; checkpoints of the
    whole population; and a resume that continues an interrupted run exactly as if it
    had never stopped.

    Args:
      bounds: ``{field: (low, high)}`` for each traced field PBT tunes.
      population: members ``P`` (vmapped).
      interval: iterations per round; must divide the config's ``num_iterations``.
        Exploit/explore runs after every round but the last.
      initial: ``{field: [P]}`` starting values (default: :func:`initial_hyperparams`).
      fraction / factors / score_metric: see :func:`exploit_and_explore`; a member's
        score is the mean of ``score_metric`` over the round's iterations (NaN ignored).
      options: the run options (:class:`jaxrl.workflow.options.RunOptions`;
        ``checkpoint_every`` counts chunks); with a ``mesh``, the members are split over
        its devices (they must divide over them), each device training its own between
        the exploit steps. The same keywords given to ``train`` itself still work, with
        a DeprecationWarning.
    """
    from jaxrl import algorithms
    from jaxrl.workflow import runner

    options = with_keywords(options, deprecated, "pbt.train")
    module = algorithms.resolve(algorithm)
    program = module.program(config)
    rounds, rounds_per_chunk = _check_arguments(
        module.name, program, bounds, population, interval, fraction, rounds_per_chunk, initial, options
    )
    initial = initial_hyperparams(bounds, population, seed) if initial is None else initial
    mesh = options.mesh
    configs = swept_config(config, initial)  # checks the fields are traced and in range
    fields = tuple(bounds.items())
    members = _Population(module, configs, population, fields, interval, rounds, fraction, factors, score_metric, mesh)
    jitted = jax.jit(members.run_rounds, static_argnums=2, donate_argnums=0)
    compiled = {}

    def chunk(tree, length):
        if length not in compiled:
            compiled[length] = jitted.lower(tree, distributed.place(jnp.int32(0), mesh), length).compile()
        return compiled[length]

    key_data = distributed.place(jax.random.key_data(jax.random.key(seed)), mesh)
    driven = runner.Driven(
        name=module.name,
        init=lambda: jax.jit(members.init)(key_data),
        chunk=chunk,
        metric_names=members.metric_names,
        num_iterations=program.num_iterations,
        counter=program.counter,
        budget=program.budget,
    )
    described = dict(bounds=bounds, population=population, interval=interval, seed=seed, fraction=fraction)
    described.update(factors=list(factors), score_metric=score_metric, rounds_per_chunk=rounds_per_chunk)
    described["initial"] = {k: np.asarray(v).tolist() for k, v in initial.items()}
    meta = rundir.meta(module.name, config, pbt=described)
    result = runner.drive(driven, meta=meta, chunk_iterations=rounds_per_chunk * interval, options=options)
    return _result(result, tuple(bounds), interval)


def _check_arguments(name, program, bounds, population, interval, fraction, rounds_per_chunk, initial, options):
    """ValueErrors for arguments of :func:`train` that cannot work, before anything
    compiles; returns the run's rounds and ``rounds_per_chunk`` (its default filled in)."""
    if not isinstance(population, int) or population < 2:
        raise ValueError(f"population must be an int >= 2, got {population!r}")
    if not 0 < fraction <= 0.5:
        raise ValueError(f"fraction must be in (0, 0.5] (the share replaced each round), got {fraction}")
    for field, bound in bounds.items():
        if len(bound) != 2 or not bound[0] < bound[1]:
            raise ValueError(f"bounds[{field!r}] must be (low, high) with low < high, got {bound!r}")
    num_iterations = program.num_iterations
    if not isinstance(interval, int) or interval < 1 or num_iterations % interval:
        raise ValueError(
            f"interval must be an int >= 1 dividing the run's {num_iterations} iterations, got {interval!r}"
        )
    rounds = num_iterations // interval
    rounds_per_chunk = rounds if rounds_per_chunk is None else rounds_per_chunk
    if not isinstance(rounds_per_chunk, int) or not 1 <= rounds_per_chunk <= rounds:
        raise ValueError(
            f"rounds_per_chunk must be an int in [1, {rounds}] (the run's rounds), got {rounds_per_chunk!r}"
        )
    if not program.resumable and (options.resume or options.mesh is not None):
        raise ValueError(
            f"{name}'s population keeps part of its state on the host (a host env): it can neither be resumed "
            f"nor span a mesh"
        )
    if initial is not None and set(initial) != set(bounds):
        raise ValueError(f"initial must give the fields of bounds {sorted(bounds)}, got {sorted(initial)}")
    for field, values in (initial or {}).items():
        low, high = bounds[field]
        if np.shape(values) != (population,) or not np.all((low <= np.asarray(values)) & (np.asarray(values) <= high)):
            raise ValueError(f"initial[{field!r}] must be {population} values within {bounds[field]}")
    distributed.check_lanes(population, options.mesh, f"{name}'s population")
    return rounds, rounds_per_chunk


@dataclasses.dataclass(frozen=True, eq=False)  # eq=False: hashed by identity, as jit hashes its function
class _Population:
    """A population's two programs, :meth:`init` and :meth:`run_rounds`, for the
    members' ``configs`` (swept leaves ``[P]``, from :func:`jaxrl.config.swept_config`)
    and the arguments of :func:`train`; ``bounds`` as ``((field, (low, high)), ...)``."""

    module: Any
    configs: Any
    population: int
    bounds: tuple
    interval: int
    rounds: int
    fraction: float
    factors: tuple
    score_metric: str = "episode_return"
    mesh: Any = None

    def init(self, key_data):
        """The population's tree before its first round: the members' ``states``, the
        ``values`` of the tuned fields, their ``run_keys`` and the ``pbt_key``."""
        init_key, run_key, pbt_key = jax.random.split(jax.random.wrap_key_data(key_data), 3)
        axes = sweep_axes(self.configs)
        population = self.population
        member_init = lambda key, config: self.module.program(config).init(key, ())  # noqa: E731
        states = jax.vmap(member_init, in_axes=(0, axes))(jax.random.split(init_key, population), self.configs)
        values = {field: get_path(self.configs, field) for field, _ in self.bounds}
        run_keys = jax.random.split(run_key, population)
        tree = {"states": states, "values": values, "run_keys": run_keys, "pbt_key": pbt_key}
        return distributed.constrain_lanes(tree, self.mesh)

    def run_rounds(self, tree, start, length):
        """Iterations ``start .. start + length - 1``, whole rounds: ``(tree, metrics
        {name: [P, length]})``, the members' own metrics and the ``pbt_*`` columns."""
        (states, values), metrics = jax.lax.scan(
            functools.partial(self._round, tree["run_keys"], tree["pbt_key"]),
            (tree["states"], tree["values"]),
            start // self.interval + jnp.arange(length // self.interval),
        )
        # [rounds, P, interval] -> [P, length], each row following its member slot
        metrics = jax.tree.map(lambda m: jnp.moveaxis(m, 1, 0).reshape((m.shape[1], -1) + m.shape[3:]), metrics)
        return distributed.constrain_lanes(({**tree, "states": states, "values": values}, metrics), self.mesh)

    def metric_names(self, tree, length: int) -> dict:
        """The metrics of :meth:`run_rounds` (traced, not compiled)."""
        return jax.eval_shape(functools.partial(self.run_rounds, length=length), tree, 0)[1]

    def _round(self, run_keys, pbt_key, carry, round_index):
        """One round: every member trains ``interval`` iterations (on its own device
        with a mesh), then the population exploits and explores (but after the last)."""
        states, values = carry
        axes = sweep_axes(self.configs)

        def members(states, run_keys, configs, first):
            member_round = lambda s, k, c: loop.iterate(self.module.program(c), s, k, first, self.interval)  # noqa: E731
            return jax.vmap(member_round, in_axes=(0, 0, axes))(states, run_keys, configs)

        round_configs = replace_paths(self.configs, values)
        states, metrics = distributed.lanes_split(members, self.mesh)(
            states, run_keys, round_configs, round_index * self.interval
        )
        if self.score_metric not in metrics:
            raise ValueError(
                f"score_metric {self.score_metric!r} is not a metric of {self.module.name}; "
                f"its metrics: {', '.join(sorted(metrics))}"
            )
        scores = jnp.nanmean(metrics[self.score_metric], axis=1)
        bounds = dict(self.bounds)
        new_states, new_values, parents = exploit_and_explore(
            states, values, scores, jax.random.fold_in(pbt_key, round_index), bounds, self.fraction, self.factors
        )
        population = self.population
        last = round_index == self.rounds - 1  # no exploit after the final round
        new_states, new_values, parents = jax.tree.map(
            lambda kept, changed: jnp.where(last, kept, changed),
            (states, values, jnp.arange(population)),
            (new_states, new_values, parents),
        )
        per_round = {f"pbt_{field}": value for field, value in values.items()}
        per_round.update(pbt_score=scores, pbt_parent=parents)
        metrics.update({k: jnp.broadcast_to(v[:, None], (population, self.interval)) for k, v in per_round.items()})
        return (new_states, new_values), metrics


def _result(result, fields: tuple, interval: int) -> PBTResult:
    """:func:`train`'s result from the runner's: the members' metrics, and the ``pbt_*``
    columns as one row per round."""
    member_metrics = {k: v for k, v in result.metrics.items() if not k.startswith("pbt_")}
    round_ends = np.arange(interval - 1, result.completed, interval)
    per_round = {k: np.asarray(v)[:, round_ends].T for k, v in result.metrics.items() if k.startswith("pbt_")}
    final_values = distributed.to_host(result.state["values"])
    return PBTResult(
        result.state["states"],
        member_metrics,
        {field: np.concatenate([per_round[f"pbt_{field}"], final_values[field][None]]) for field in fields},
        per_round["pbt_parent"].astype(np.int64),
        per_round["pbt_score"],
        result.compile_seconds,
        result.run_seconds,
    )
