"""Actors apart from the learner (``jaxrl.workflow.actor_learner``) against the lock-step
program on host envs (the Gymnasium bridge, envpool's XLA interface): env steps/s of IMPALA,
APPO and Ape-X DQN on a host env, what overlap could give at most, and time to solve.

    python benchmarks/actor_learner.py                            # impala, appo, apex: 1 and 2 actors, central
    python benchmarks/actor_learner.py --quick                    # small sizes: a smoke test
    python benchmarks/actor_learner.py --algorithms impala --actors 1 2 4 --steps 40960
    python benchmarks/actor_learner.py --env-id gymnasium:CartPole-v1 envpool:CartPole-v1 --solve 3
    python benchmarks/actor_learner.py --algorithms impala --env-id envpool:Pong-v5 --network nature_cnn \
        --channels-last --steps 4096 --chunks 4 --runs 1
    python benchmarks/actor_learner.py --learner-devices 1 --markdown out.md   # GPU: learner on GPU 0, actors after
    python benchmarks/actor_learner.py --actor-platform cpu --markdown out.md  # GPU learner, actors on the CPU
    XLA_FLAGS=--xla_force_host_platform_device_count=2 python benchmarks/actor_learner.py   # CPU, actors on CPU 1

Default configs (``impala.Config``: 16 envs x 8 steps per block, one gradient step;
``appo.Config``: PPO's 4 envs x 128 steps per block, 4 epochs of 4 minibatches;
``apex.Config``: 4 envs x 8 steps per block, 8 updates of batch 128 on prioritized
replay, after ``learning_starts`` = 2,000 steps), ``num_evals=0``, ``num_reports=0``.
Rows, for each algorithm and env id:

* **env only**: the block's envs on the host (Gymnasium ``make_vec`` sync vector env,
  ``SAME_STEP`` autoreset; or ``envpool.make``) stepped with random actions from Python.
* **env + policy, host loop**: the same, each action from the algorithm's policy under
  ``jax.jit`` (one call per time step, numpy in and out).
* **one actor alone** (``a``): the decoupled run's actor, as its thread runs it, block
  after block (``actor_learner.ActorPrograms``): a Python loop over its envs' steps
  (Gymnasium's vector env, envpool's own Python API) with one compiled policy call per
  step, then the compiled ``finish``.
* **learner only** (``b``): the learner's compiled iteration (``record.actor_learner``'s
  ``learn`` with its key and the params it publishes, donating its state, as the run
  calls it) called again and again on one pre-made block (Ape-X: after
  ``learning_starts``, so every call makes its updates); updates/s, and the env steps/s
  it could absorb (updates/s x block steps).
* **lock-step bridge**: ``runner.run`` of the algorithm's one compiled program (collect,
  then update, in one scan); steady state = env steps / ``run_seconds`` (its compile
  apart).
* **decoupled, k actors** (``--actors``): ``actor_learner.run``; steady state = env steps
  the learner consumed / seconds, over the chunks after the first (the actors compile
  their programs and fill the queue in the first); the whole-run rate beside it. Mean
  policy lag and the actors' idle fraction (blocked on a full queue) over those chunks.
* **central inference, k actors** (``--central-actors``): the same with
  ``ActorOptions(central_inference=True)``: actors only step their envs, one batched
  policy call on the learner's device answers them.
* **bounds** from ``a`` and ``b`` (seconds per env step): serial ``1 / (a + b)``, what
  lock-step should be; perfect overlap ``1 / max(a, b)``, the most one actor beside the
  learner can give. k actors can do better only where their env steps run in parallel
  (envpool's C++ threads, processes), not Python envs under one GIL.

**Time to solve** (``--solve N``): N seeds of the lock-step program, of the decoupled run
with 2 actors and with central inference, each stopping when its evaluation
reaches the algorithm's threshold (IMPALA and Ape-X 200, APPO 450, within the budgets of
tests/test_actor_learner.py's learning tests: 100k, 80k, 100k env steps; 10 evaluations):
solved runs, median wall seconds to the stop (compile and run), median env steps.

Everything runs in this one process, one row after another (the other benchmarks give
each measurement a fresh process; here JAX's import and the lock-step compiles would
double the time), with JAX's persistent compilation cache off. Floor rows report the
fastest of ``--runs`` runs; lock-step and decoupled rows one run each. The decoupled
runs of one config share the learner's compiled programs (``actor_learner`` caches
them), so only the first decoupled row's compile time includes the learner's compile.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import gc
import importlib.util
import os
import statistics
import sys
import time
import traceback
from typing import Any

from _harness import _cpu_snapshot, _other_cpu, fmt, machine_info, phase, report, speed_probe

ALGORITHMS = ("impala", "appo", "apex")
# Time to solve: (threshold, env-step budget) of tests/test_actor_learner.py's learning tests.
SOLVE = {"impala": (200.0, 100_000), "appo": (450.0, 100_000), "apex": (200.0, 80_000)}
BACKENDS = ("gymnasium", "envpool")  # host envs whose floor rows this script knows how to step


# ============================================================================ the case


@dataclasses.dataclass
class Case:
    """One algorithm on one env id: the configs and where things run."""

    algorithm: str
    env_id: str
    config: Any  # the lock-step config
    prepared: Any  # the decoupled run's (``parts.prepare``)
    parts: Any  # the algorithm's ActorLearner parts
    num_envs: int
    block_steps: int
    num_iterations: int
    chunk_iterations: int
    actor_device: Any
    learner_options: Any  # ActorOptions with the learner's devices


def make_case(jax, algorithm: str, env_id: str, args) -> Case:
    from jaxrl import algorithms
    from jaxrl.workflow import actor_learner, runner

    record = algorithms.get(algorithm)
    parts = record.actor_learner
    network = {"network": args.network} if args.network else {}
    if args.channels_last:
        network["env_kwargs"] = {"channels_last": True}
    config = record.Config(env_id=env_id, total_timesteps=args.steps, num_evals=0, num_reports=0, **network)
    prepared = parts.prepare(config)
    num_iterations = parts.num_iterations(prepared)
    chunk_iterations = runner.default_chunk_iterations(num_iterations, chunks=args.chunks)
    devices = jax.devices()
    rest = jax.devices(args.actor_platform) if args.actor_platform else devices[args.learner_devices :]
    return Case(
        algorithm=algorithm,
        env_id=env_id,
        config=config,
        prepared=prepared,
        parts=parts,
        num_envs=config.num_envs,
        block_steps=parts.block_steps(prepared),
        num_iterations=num_iterations,
        chunk_iterations=chunk_iterations,
        actor_device=rest[0] if rest else devices[0],
        learner_options=actor_learner.ActorOptions(
            actors=1, learner_devices=args.learner_devices, actor_platform=args.actor_platform
        ),
    )


def policy_fn(case: Case):
    """``act(published, obs [N, ...], key) -> action [N]``, as the algorithm's actor acts."""
    import jax.numpy as jnp

    from jaxrl.algorithms import apex, dqn, onpolicy

    config = case.prepared
    if case.algorithm in ("impala", "appo"):
        carry = onpolicy.initial_carry(config, case.num_envs)
        return lambda params, obs, key: onpolicy.behaviour_step(params, obs, carry, key, config)[0]
    epsilon = apex.lane_epsilons(jnp.zeros((), jnp.int32), config, 0, 1)
    return lambda published, obs, key: dqn.act(published["params"], obs, (), key, config, epsilon=epsilon)[0]


def published_params(jax, case: Case, device):
    """The learner's initial published params (what an actor acts with), on ``device``."""
    state = jax.jit(functools.partial(case.parts.learner_init, config=case.prepared))(jax.random.key(0))
    return jax.device_put(case.parts.published(state), device)


def host_vector_env(case: Case, seed: int):
    """The block's ``num_envs`` envs as one host vector env: ``(env, action_space)``."""
    backend, _, task = case.env_id.partition(":")
    if backend == "envpool":
        import envpool

        env = envpool.make(task, env_type="gymnasium", num_envs=case.num_envs, batch_size=case.num_envs, seed=seed)
        return env, env.action_space
    import gymnasium
    from gymnasium.vector import AutoresetMode

    env = gymnasium.make_vec(
        task,
        num_envs=case.num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )
    return env, env.single_action_space


def timed(fn, runs: int):
    """``fn()`` ``runs`` times: ``(fastest seconds, all seconds, other processes' CPUs
    during each)``."""
    times, others = [], []
    for run in range(runs):
        phase(f"run {run + 1} of {runs}")
        before = _cpu_snapshot()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        others.append(_other_cpu(before, _cpu_snapshot()))
    return min(times), times, others


# ============================================================================ rows


def env_only(jax, case: Case, args) -> dict:
    """Random actions through the host vector env, from a Python loop."""
    import numpy as np

    env, space = host_vector_env(case, args.seed)
    rng = np.random.default_rng(args.seed)
    num_steps = args.steps // case.num_envs

    def run():
        env.reset(seed=args.seed)
        for _ in range(num_steps):
            env.step(rng.integers(0, space.n, case.num_envs))

    best, times, others = timed(run, args.runs)
    env.close()
    return dict(compile_s=0.0, run_s=best, run_times=times, other_cpu=others, env_steps=num_steps * case.num_envs)


def env_policy_loop(jax, case: Case, args) -> dict:
    """The host vector env, each time step's actions from the jitted policy."""
    import numpy as np

    act = policy_fn(case)
    # envpool's frames are [C, H, W]; with --channels-last the policy reads [H, W, C], as the adapter gives them.
    layout = (lambda obs: jax.numpy.moveaxis(obs, 1, -1)) if args.channels_last else (lambda obs: obs)
    step_act = jax.jit(lambda params, obs, key, t: act(params, layout(obs), jax.random.fold_in(key, t)))
    params = published_params(jax, case, case.actor_device)
    key = jax.device_put(jax.random.key(args.seed), case.actor_device)
    env, _ = host_vector_env(case, args.seed)
    num_steps = args.steps // case.num_envs
    obs, _ = env.reset(seed=args.seed)
    start = time.perf_counter()
    jax.block_until_ready(step_act(params, obs, key, np.int32(0)))
    compile_s = time.perf_counter() - start

    def run():
        obs, _ = env.reset(seed=args.seed)
        for t in range(num_steps):
            obs, *_ = env.step(np.asarray(step_act(params, obs, key, np.int32(t))))

    best, times, others = timed(run, args.runs)
    env.close()
    return dict(compile_s=compile_s, run_s=best, run_times=times, other_cpu=others, env_steps=num_steps * case.num_envs)


def actor_block(jax, case: Case, args) -> dict:
    """One actor alone: its blocks one after another, as the actor thread makes them
    (``actor_learner.ActorPrograms``: host envs stepped from Python with one compiled
    policy call per step, then the compiled ``finish``; block after block, waiting for
    each). The row holds one block (``block``), for the learner-only row."""
    from jaxrl.workflow import actor_learner

    device = case.actor_device
    params = published_params(jax, case, device)
    programs = actor_learner.ActorPrograms(case.parts, case.prepared, 1)
    start = time.perf_counter()
    actor = programs.actor(0, device, jax.random.key(args.seed))
    block = jax.block_until_ready(actor.block(params, 0))
    compile_s = time.perf_counter() - start  # tracing, compiling, creating the host envs, and the first block
    num_blocks = args.steps // case.block_steps
    sequence = iter(range(1, 1 << 30))

    def run():
        for _ in range(num_blocks):
            jax.block_until_ready(actor.block(params, next(sequence)))

    best, times, others = timed(run, args.runs)
    actor.close()
    return dict(
        compile_s=compile_s,
        run_s=best,
        run_times=times,
        other_cpu=others,
        env_steps=num_blocks * case.block_steps,
        block=block,
    )


def learner_only(jax, case: Case, args, block) -> dict:
    """The learner's compiled iteration (as ``actor_learner.run`` calls it: ``learn``, its
    key and the params it publishes) again and again on one block, on the learner's devices."""
    import numpy as np

    from jaxrl import algorithms
    from jaxrl.workflow import actor_learner

    if block is None:
        raise RuntimeError("no block to learn from: the actor-block row failed")
    config = case.prepared
    placement, place_block = actor_learner._learner_placement(case.learner_options)
    programs = actor_learner._LearnerPrograms(algorithms.get(case.algorithm), config)
    key = jax.random.key(args.seed)
    block = place_block(block)
    holder = {"state": jax.device_put(programs.init(key), placement)}
    start = time.perf_counter()
    compiled = programs.compiled_iteration(holder["state"], block, key)
    compile_s = time.perf_counter() - start
    # Ape-X: fill replay to learning_starts first, so that every timed call makes its updates.
    warm_up = -(-getattr(config, "learning_starts", 0) // case.block_steps) + 1
    for i in range(warm_up):
        holder["state"], *_ = compiled(holder["state"], block, key, np.int32(i))
    jax.block_until_ready(holder["state"])
    num_blocks = args.steps // case.block_steps

    def run():
        for i in range(num_blocks):
            holder["state"], *_ = compiled(holder["state"], block, key, np.int32(i))
        jax.block_until_ready(holder["state"])

    best, times, others = timed(run, args.runs)
    return dict(
        compile_s=compile_s,
        run_s=best,
        run_times=times,
        other_cpu=others,
        env_steps=num_blocks * case.block_steps,
        updates_per_s=num_blocks / best,
    )


def lock_step(jax, case: Case, args) -> dict:
    """``runner.run``: the algorithm's one compiled program, envs through the bridge."""
    from jaxrl.workflow import runner

    before = _cpu_snapshot()
    result = runner.run(case.algorithm, case.config, seeds=1, seed=args.seed, chunk_iterations=case.chunk_iterations)
    other = _other_cpu(before, _cpu_snapshot())
    steps = int(result.metrics["timesteps"][0, -1])
    return dict(
        compile_s=result.compile_seconds,
        run_s=result.run_seconds,
        run_times=[result.run_seconds],
        other_cpu=[other],
        env_steps=steps,
        whole_steps_per_s=steps / result.run_seconds,
    )


def decoupled(jax, case: Case, args, actors: int, central: bool = False) -> dict:
    """``actor_learner.run`` with ``actors`` actor threads (answered by a central
    inference server with ``central``); steady state over the chunks after the first
    (from each chunk's ``learner_updates_per_second``)."""
    import numpy as np

    from jaxrl.workflow import actor_learner

    options = actor_learner.ActorOptions(
        actors=actors,
        learner_devices=args.learner_devices,
        actor_platform=args.actor_platform,
        queue_size=args.queue_size,
        central_inference=central,
    )
    before = _cpu_snapshot()
    result = actor_learner.run(
        case.algorithm, case.config, actors=options, seed=args.seed, chunk_iterations=case.chunk_iterations
    )
    other = _other_cpu(before, _cpu_snapshot())
    m = {name: np.asarray(values[0]) for name, values in result.metrics.items()}
    steps = int(m["timesteps"][-1])
    chunk = (np.asarray(result.iterations) - 1) // case.chunk_iterations  # each row's (= iteration's) chunk
    first_chunk_rows = chunk == 0
    # Every row of a chunk holds the chunk's rate: its seconds are its rows / that rate.
    row_seconds = 1.0 / m["learner_updates_per_second"]
    steady = ~first_chunk_rows
    steady_s = row_seconds[steady].sum()
    return dict(
        compile_s=result.compile_seconds,
        run_s=steady_s,
        run_times=[result.run_seconds],
        other_cpu=[other],
        env_steps=int(steady.sum()) * case.block_steps,
        whole_steps_per_s=steps / result.run_seconds,
        first_chunk_s=float(row_seconds[first_chunk_rows].sum()),
        lag=float(np.mean(result.lags[steady])),
        idle=float(np.sum(m["actor_idle_fraction"][steady] * row_seconds[steady]) / steady_s),
        actor_steps_per_s=float(np.sum(m["actor_steps_per_second"][steady] * row_seconds[steady]) / steady_s),
        restarts=result.restarts,
    )


def time_to_solve(jax, case: Case, args) -> list[dict]:
    """``--solve`` seeds of the lock-step program, the decoupled run with 2 actors and
    central inference (unless ``--central-actors`` is empty), each stopping at
    :data:`SOLVE`'s threshold: a row per run (``kind`` "solve")."""
    import numpy as np

    from jaxrl.workflow import actor_learner, runner

    threshold, budget = SOLVE[case.algorithm]
    config = case.config.replace(total_timesteps=budget, num_evals=10)
    place = dict(learner_devices=args.learner_devices, actor_platform=args.actor_platform, queue_size=args.queue_size)
    modes = {"lock-step": None, "decoupled-2": actor_learner.ActorOptions(actors=2, **place)}
    if args.central_actors:
        modes["central-2"] = actor_learner.ActorOptions(actors=2, central_inference=True, **place)
    rows = []
    for mode, options in modes.items():
        for seed in range(args.solve):
            phase(f"time to solve: {mode}, seed {seed}")
            if options is None:
                result = runner.run(case.algorithm, config, seeds=1, seed=seed, target=threshold)
            else:
                result = actor_learner.run(case.algorithm, config, actors=options, seed=seed, target=threshold)
            rows.append(
                dict(
                    algorithm=case.algorithm,
                    env_id=case.env_id,
                    kind="solve",
                    mode=mode,
                    seed=seed,
                    solved=bool(np.nanmax(result.metrics["eval_return"]) >= threshold),
                    compile_s=result.compile_seconds,
                    wall_s=result.compile_seconds + result.run_seconds,
                    env_steps=int(result.metrics["timesteps"][0, -1]),
                )
            )
            print(f"    {mode} seed {seed}: {rows[-1]}", file=sys.stderr, flush=True)
    return rows


def overlap_bounds(actor_row: dict, learner_row: dict) -> list[dict]:
    """Serial ``1 / (a + b)`` and perfect-overlap ``1 / max(a, b)`` steps/s from the
    actor's ``a`` and the learner's ``b`` seconds per env step."""
    a = actor_row["run_s"] / actor_row["env_steps"]
    b = learner_row["run_s"] / learner_row["env_steps"]
    return [
        dict(kind="bound-serial", steps_per_s=1.0 / (a + b), a_us=1e6 * a, b_us=1e6 * b),
        dict(kind="bound-overlap", steps_per_s=1.0 / max(a, b), a_us=1e6 * a, b_us=1e6 * b, gain=(a + b) / max(a, b)),
    ]


# ============================================================================ the plan


def measure_case(jax, case: Case, args) -> list[dict]:
    """Every row of one algorithm on one env id, one after another."""
    key = dict(algorithm=case.algorithm, env_id=case.env_id)
    rows = []

    def measure(kind, fn, *fn_args, **extra):
        """``fn``'s row (an exception becomes its ``error``), with ``steps_per_s``."""
        print(f"  {case.algorithm} on {case.env_id}: {kind} ...", file=sys.stderr, flush=True)
        gc.collect()
        start = time.perf_counter()
        row = {**key, "kind": kind, **extra, "loadavg_before": os.getloadavg()[0]}
        try:
            row.update(fn(jax, case, args, *fn_args))
            row["steps_per_s"] = row["env_steps"] / row["run_s"]
        except Exception as error:
            traceback.print_exc()
            row["error"] = f"{type(error).__name__}: {error}".strip()[:500]
        status = row.get("error") or f"compile {row['compile_s']:.1f} s, {row['steps_per_s']:,.0f} steps/s"
        print(f"    {status} (wall {time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
        rows.append(row)
        return row

    measure("env", env_only)
    measure("env-policy-loop", env_policy_loop)
    actor_row = measure("actor-block", actor_block)
    learner_row = measure("learner", learner_only, actor_row.pop("block", None))
    lock_row = measure("lock-step", lock_step)
    for actors in args.actors:
        measure(f"decoupled-{actors}", decoupled, actors, actors=actors)
    for actors in args.central_actors:
        measure(f"central-{actors}", decoupled, actors, True, actors=actors)
    if "error" not in actor_row and "error" not in learner_row:
        rows += [{**key, **bound} for bound in overlap_bounds(actor_row, learner_row)]
    if args.solve:
        rows += time_to_solve(jax, case, args)
    lock_rate = None if "error" in lock_row else lock_row["steps_per_s"]
    for row in rows:
        if lock_rate and "steps_per_s" in row:
            row["vs_lock_step"] = row["steps_per_s"] / lock_rate
    return rows


LABELS = {
    "env": "env only (random actions, host loop)",
    "env-policy-loop": "env + policy: host loop, jitted policy per step",
    "actor-block": "one actor alone: its blocks, as its thread makes them (a)",
    "learner": "learner only: compiled learn on one block (b)",
    "lock-step": "lock-step bridge (runner.run)",
    "bound-serial": "bound: serial, 1 / (a + b)",
    "bound-overlap": "bound: perfect overlap, 1 / max(a, b)",
}


def label(row: dict) -> str:
    kind = row["kind"]
    if kind.startswith(("decoupled-", "central-")):
        actors = row["actors"]
        how = "central inference" if kind.startswith("central-") else "decoupled"
        return f"{how}, {actors} actor{'s' if actors > 1 else ''} (actor_learner.run)"
    return LABELS[kind]


def table(rows: list[dict], cases: dict) -> tuple[list[str], list[list[str]]]:
    headers = [
        "algorithm",
        "env",
        "row",
        "compile s",
        "timed s",
        "env steps/s",
        "x lock-step",
        "updates/s",
        "whole-run steps/s",
        "policy lag",
        "actor idle",
    ]
    out = []
    for r in rows:
        if r["kind"] == "solve":
            continue
        case = cases[(r["algorithm"], r["env_id"])]
        head = [r["algorithm"], f"{r['env_id']} ({case.num_envs}x{case.block_steps // case.num_envs})", label(r)]
        if "error" in r:
            out.append(head + ["FAILED (see below)"] + ["-"] * 7)
            continue
        bound = r["kind"].startswith("bound")
        out.append(
            head
            + [
                "-" if bound else f"{r['compile_s']:.1f}",
                "-" if bound else f"{r['run_s']:.2f}",
                f"{r['steps_per_s']:,.0f}",
                fmt(r.get("vs_lock_step"), ".2f"),
                fmt(r.get("updates_per_s"), ",.0f"),
                fmt(r.get("whole_steps_per_s"), ",.0f"),
                fmt(r.get("lag"), ".2f"),
                f"{100 * r['idle']:.1f}%" if "idle" in r else "-",
            ]
        )
    return headers, out


def notes(rows: list[dict], cases: dict, args) -> list[str]:
    lines = [f"error: {r['algorithm']} on {r['env_id']}, {label(r)}: {r['error']}" for r in rows if "error" in r]
    for (algorithm, env_id), case in cases.items():
        lines.append(
            f"{algorithm} on {env_id}: block = {case.num_envs} envs x {case.block_steps // case.num_envs} steps = "
            f"{case.block_steps} env steps; {case.num_iterations} blocks per timed run in chunks of "
            f"{case.chunk_iterations}; actors on {case.actor_device}, learner on the first "
            f"{args.learner_devices} device(s)"
        )
        mine = {r["kind"]: r for r in rows if (r["algorithm"], r["env_id"]) == (algorithm, env_id)}
        overlap = mine.get("bound-overlap")
        if overlap:
            share = overlap["a_us"] / (overlap["a_us"] + overlap["b_us"])
            lines.append(
                f"{algorithm} on {env_id}: a = {overlap['a_us']:.1f} us (actor) and b = {overlap['b_us']:.1f} us "
                f"(learner) per env step: the env + policy side is {100 * share:.0f}% of the serial time, so "
                f"perfect overlap can give at most {overlap['gain']:.2f}x over serial"
            )
        for r in mine.values():
            if r["kind"].startswith(("decoupled-", "central-")) and "error" not in r:
                lines.append(
                    f"{algorithm} on {env_id}, {label(r)}: first chunk {r['first_chunk_s']:.1f} s "
                    f"(the actors compile there), actors sent {r['actor_steps_per_s']:,.0f} env steps/s in the "
                    f"steady chunks, restarts {r['restarts']}"
                )
    solves = collections.defaultdict(list)
    for r in rows:
        if r["kind"] == "solve":
            solves[(r["algorithm"], r["env_id"], r["mode"])].append(r)
    for (algorithm, env_id, mode), runs in solves.items():
        threshold, budget = SOLVE[algorithm]
        wall = statistics.median(r["wall_s"] for r in runs)
        compile_s = statistics.median(r["compile_s"] for r in runs)
        steps = statistics.median(r["env_steps"] for r in runs)
        lines.append(
            f"time to solve, {algorithm} on {env_id}, {mode}: {sum(r['solved'] for r in runs)} of {len(runs)} runs "
            f"reached {threshold:g} within {budget:,} env steps; median {wall:.1f} s (compile {compile_s:.1f} s), "
            f"median {steps:,.0f} env steps; each run's seconds: {', '.join(format(r['wall_s'], '.1f') for r in runs)}"
        )
    lines += [
        "env steps/s: floor rows, the fastest of "
        f"{args.runs} runs of {args.steps:,} env steps; learner only: the env steps it could absorb (updates/s x "
        "block steps); lock-step: env steps / run_seconds (compile apart); decoupled: env steps the learner "
        "consumed / seconds over the chunks after the first (the whole-run rate, first chunk included, beside it)",
        "x lock-step = env steps/s / the lock-step row's; policy lag = learner version minus the block's, "
        "mean over the steady chunks; actor idle = actors' time blocked on a full queue "
        f"(queue size {args.queue_size})",
        "all rows in one process, one after another; JAX's persistent compilation cache off",
    ]
    return lines


# ============================================================================ main


def run(args) -> int:
    os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    from jaxrl.workflow import actor_learner

    try:
        actor_learner.ActorOptions(actors=1, learner_devices=args.learner_devices, actor_platform=args.actor_platform)
    except ValueError as error:
        print(f"--learner-devices / --actor-platform: {error}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    rows, cases, skipped = [], {}, []
    for env_id in args.env_id:
        backend = env_id.partition(":")[0]
        if importlib.util.find_spec(backend) is None:
            skipped.append(f"{env_id}: skipped, {backend} is not installed (pip install {backend})")
            print(skipped[-1], file=sys.stderr, flush=True)
            continue
        for algorithm in args.algorithms:
            case = make_case(jax, algorithm, env_id, args)
            cases[(algorithm, env_id)] = case
            rows += measure_case(jax, case, args)
    if not rows:
        print("nothing measured:", *skipped, sep="\n", file=sys.stderr)
        return 1
    rows[0]["machine"] = machine_info(jax, ("gymnasium",) + (("envpool",) if "envpool" in str(args.env_id) else ()))
    phase("speed probe")
    rows[-1]["probe_ms"] = speed_probe(jax)
    wall = time.perf_counter() - start
    headers, body = table(rows, cases)
    title = (
        f"Decoupled actors vs the lock-step bridge: {', '.join(args.algorithms)} on {', '.join(cases_envs(cases))}, "
        f"{args.steps:,} env steps per timed run"
    )
    lines = skipped + notes(rows, cases, args) + [f"wall time of the whole benchmark: {wall:.0f} s"]
    report(title, headers, body, lines, rows, args.markdown, left=(0, 1, 2))
    return 1 if any("error" in r for r in rows) else 0


def cases_envs(cases: dict) -> list[str]:
    return list(dict.fromkeys(env_id for _, env_id in cases))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--algorithms", nargs="+", choices=ALGORITHMS, default=list(ALGORITHMS), help="default: %(default)s"
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="env steps per timed run, rounded down to whole blocks (default: 20480, --quick: 8192)",
    )
    parser.add_argument(
        "--actors", type=int, nargs="+", default=[1, 2], help="actor counts of the decoupled rows (default: 1 2)"
    )
    parser.add_argument(
        "--central-actors",
        type=int,
        nargs="*",
        default=[2],
        help="actor counts of the central-inference rows (default: 2; none: no such rows)",
    )
    parser.add_argument("--network", help="the algorithms' network (e.g. nature_cnn for Atari frames)")
    parser.add_argument(
        "--channels-last", action="store_true", help="envpool's frames as [H, W, C], the pixel networks' layout"
    )
    parser.add_argument(
        "--solve", type=int, default=0, metavar="SEEDS", help="time to solve over SEEDS seeds per mode (default: none)"
    )
    parser.add_argument(
        "--learner-devices",
        type=int,
        default=1,
        help="the learner runs on the first K devices, actors on the rest (or on the first where none remain): "
        "ActorOptions.learner_devices (default: %(default)s)",
    )
    parser.add_argument(
        "--actor-platform",
        default=None,
        help="the actors' platform (cpu: actors on the host beside a GPU learner): ActorOptions.actor_platform",
    )
    parser.add_argument(
        "--queue-size", type=int, default=2, help="blocks the decoupled queue holds (default: %(default)s)"
    )
    parser.add_argument(
        "--env-id",
        nargs="+",
        default=["gymnasium:CartPole-v1"],
        help="host env ids, gymnasium:<id> or envpool:<id>; envpool's are skipped where it is not installed "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--chunks", type=int, default=10, help="chunks per lock-step / decoupled run (default: %(default)s)"
    )
    parser.add_argument(
        "--runs", type=int, default=None, help="timed runs of each floor row, the fastest reported (default: 2)"
    )
    parser.add_argument("--seed", type=int, default=0, help="default: %(default)s")
    parser.add_argument("--quick", action="store_true", help="small sizes and 1 run each: a smoke test")
    parser.add_argument("--markdown", metavar="MD", help="also write the table and notes as Markdown")
    args = parser.parse_args(argv)
    args.runs = args.runs or (1 if args.quick else 2)
    if args.steps is None:
        args.steps = 8192 if args.quick else 20480
    for env_id in args.env_id:
        if env_id.partition(":")[0] not in BACKENDS or not env_id.partition(":")[2]:
            parser.error(f"--env-id {env_id!r}: expected gymnasium:<id> or envpool:<id> (a host env)")
    if min(args.actors) < 1 or args.runs < 1 or args.learner_devices < 1 or args.queue_size < 1:
        parser.error("--actors, --runs, --learner-devices and --queue-size must be >= 1")
    if args.chunks < 2:
        parser.error("--chunks must be >= 2: the decoupled steady state leaves the first chunk out")
    if args.steps < 128 * args.chunks:
        parser.error(f"--steps must be at least 128 x --chunks = {128 * args.chunks} (a block per chunk)")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
