"""What the Gymnasium bridge costs: env stepping and PPO training through host callbacks.

    python benchmarks/gymnasium_bridge.py                   # 1, 8, 64 envs; PPO 100k steps
    python benchmarks/gymnasium_bridge.py --quick           # 1 run each, PPO 20k steps
    python benchmarks/gymnasium_bridge.py --envs 8 --markdown out.md

Each measurement runs in a fresh subprocess with JAX's persistent compilation cache off.

* Stepping, for each number of envs N (``--envs``): ``--steps`` time steps of uniformly
  random actions in all N envs of ``gymnasium:CartPole-v1``, (a) through the bridge: one
  ``jax.jit`` program, a ``lax.scan`` over ``jax.vmap(env.step)`` (one host callback per
  time step); (b) a plain Python loop over the same kind of ``gymnasium.vector`` env
  (``SyncVectorEnv``, ``SAME_STEP`` autoreset) with NumPy random actions. Both report
  env steps/s; "bridge cost" = bridge time / loop time - 1, the price of running inside
  the compiled program (callback, copies, the bridge's bookkeeping).
* Training: PPO (``ppo.Config`` defaults: 4 envs x 128 steps, 10 evaluations of 10
  episodes) on ``gymnasium:CartPole-v1`` and on gymnax's ``CartPole-v1`` for
  ``--total-timesteps``: compile time and steps/s of the compiled run, and their ratio.

The run time is the fastest of ``--runs`` runs of the compiled function (the fastest,
because on a shared machine the others are slowed by other work), the compile time
reported apart from it.
"""

from __future__ import annotations

import argparse
import sys
import time

from _harness import (
    add_common_arguments,
    derive_timing,
    fmt,
    measure_and_emit,
    measure_in_child,
    measure_plan,
    phase,
    report,
    time_compiled,
)

GYM_ID = "CartPole-v1"
LABELS = {
    "bridge": "bridge: scan of vmap(env.step)",
    "python": "Python loop over the vector env",
    "ppo-bridge": "PPO on gymnasium:CartPole-v1",
    "ppo-gymnax": "PPO on gymnax CartPole-v1",
}
PEER = {"bridge": "python", "ppo-bridge": "ppo-gymnax"}  # what each bridged row is compared with


# ============================================================================ child side


def step_bridge(jax, args, num_envs):
    import jax.numpy as jnp

    from jaxrl import envs

    env, params = envs.make("gymnasium:" + GYM_ID)

    def run(key):
        reset_key, run_key = jax.random.split(key)
        _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, num_envs), params)

        def one_step(carry, key):
            state, total = carry
            action = jax.random.bernoulli(key, shape=(num_envs,)).astype(jnp.int32)
            _, state, reward, *_ = jax.vmap(env.step, in_axes=(None, 0, 0, None))(key, state, action, params)
            return (state, total + reward.sum()), None

        return jax.lax.scan(one_step, (state, jnp.zeros(())), jax.random.split(run_key, args.steps))[0][1]

    timing, _ = time_compiled(jax, run, (jax.random.key(args.seed),), args.runs)
    return dict(timing, steps_per_seed=args.steps * num_envs)


def step_python(args, num_envs):
    import gymnasium
    import numpy as np
    from gymnasium.vector import AutoresetMode

    vector_env = gymnasium.make_vec(
        GYM_ID, num_envs=num_envs, vectorization_mode="sync", vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP}
    )
    rng = np.random.default_rng(args.seed)
    run_times = []
    for run in range(args.runs):
        phase(f"python loop, run {run + 1} of {args.runs}")
        vector_env.reset(seed=args.seed)
        start = time.perf_counter()
        for _ in range(args.steps):
            vector_env.step(rng.integers(0, 2, num_envs))
        run_times.append(time.perf_counter() - start)
    vector_env.close()
    return dict(compile_s=0.0, run_times=run_times, steps_per_seed=args.steps * num_envs)


def train_ppo(jax, args, env_id):
    import numpy as np

    from jaxrl.algorithms import ppo

    config = ppo.Config(env_id=env_id, total_timesteps=args.total_timesteps, num_reports=0)
    timing, out = time_compiled(jax, ppo.train, (jax.random.key(args.seed), config), args.runs)
    evals = np.asarray(out.metrics["eval_return"])
    evals = evals[np.isfinite(evals)]
    return dict(
        timing, steps_per_seed=int(out.state.timesteps), final_eval_return=float(evals[-1]) if evals.size else None
    )


def child_main(args):
    kind, num_envs = args.one[0], int(args.one[1])

    def measure(jax):
        if kind == "bridge":
            return step_bridge(jax, args, num_envs)
        if kind == "python":
            return step_python(args, num_envs)
        return train_ppo(jax, args, ("gymnasium:" if kind == "ppo-bridge" else "") + GYM_ID)

    measure_and_emit({"kind": kind, "envs": num_envs}, measure, packages=("gymnax", "gymnasium"))


# ============================================================================ parent side


def parent_main(args):
    plan = [(kind, n) for n in args.envs for kind in ("bridge", "python")]
    if args.total_timesteps:
        plan += [("ppo-bridge", 4), ("ppo-gymnax", 4)]
    results = measure_plan(
        plan,
        lambda item: measure_in_child(
            __file__, {"kind": item[0], "envs": item[1]}, args, ("steps", "total_timesteps", "seed", "runs")
        ),
        label=lambda item: f"{LABELS[item[0]]}, {item[1]} envs",
    )
    derive_timing(results)
    by_key = {(r["kind"], r["envs"]): r for r in results}
    for r in results:
        peer = by_key.get((PEER.get(r["kind"]), r["envs"]))
        if peer and "error" not in r and "error" not in peer:
            r["cost"] = r["run_s"] / peer["run_s"] - 1.0
            r["per_step_us"] = (r["run_s"] - peer["run_s"]) / (r["steps_per_seed"] / r["envs"]) * 1e6

    headers = [
        "run",
        "envs",
        "env steps",
        "compile s",
        "run s (fastest)",
        "all runs s",
        "steps/s",
        "bridge cost",
        "extra us per time step",
        "final eval return",
    ]
    rows = []
    for r in results:
        if "error" in r:
            rows.append([LABELS[r["kind"]], str(r["envs"]), "FAILED (see below)"] + ["-"] * 7)
            continue
        rows.append(
            [
                LABELS[r["kind"]],
                str(r["envs"]),
                f"{r['steps_per_seed']:,}",
                f"{r['compile_s']:.1f}",
                f"{r['run_s']:.3f}",
                ", ".join(f"{t:.3f}" for t in r["run_times"]),
                f"{r['steps_per_s']:,.0f}",
                f"{100 * r['cost']:+.0f}%" if "cost" in r else "-",
                fmt(r.get("per_step_us"), ".0f"),
                fmt(r.get("final_eval_return"), ".1f"),
            ]
        )
    title = (
        f"Gymnasium bridge on {GYM_ID}: {args.steps:,} random time steps per env count; "
        f"PPO {args.total_timesteps:,} steps (ppo.Config defaults, 4 envs)"
    )
    notes = [f"error: {LABELS[r['kind']]}, {r['envs']} envs: {r['error']}" for r in results if "error" in r]
    notes += [
        "bridge cost = run time / the unbridged peer's run time - 1 (random stepping: the Python loop; "
        "PPO: gymnax's JAX CartPole); extra us per time step = that difference per time step of all envs.",
        "each measurement in a fresh subprocess, persistent compilation cache off; compile s = tracing, "
        f"lowering and compiling; run s = the fastest of {args.runs} runs",
    ]
    report(title, headers, rows, notes, results, args.markdown)
    return 1 if any("error" in r for r in results) else 0


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--envs",
        type=int,
        nargs="+",
        default=[1, 8, 64],
        help="numbers of envs for the stepping comparison (default: 1 8 64)",
    )
    parser.add_argument(
        "--steps", type=int, default=None, help="time steps per stepping measurement (default: 5000, --quick: 1000)"
    )
    parser.add_argument(
        "--total-timesteps",
        type=int,
        default=None,
        help="PPO env steps, 0 = skip PPO (default: 100000, --quick: 20480)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes and 1 run each: a smoke test")
    add_common_arguments(parser, ("KIND", "ENVS"))
    args = parser.parse_args(argv)
    args.runs = args.runs or (1 if args.quick else 2)
    if args.steps is None:
        args.steps = 1000 if args.quick else 5000
    if args.total_timesteps is None:
        args.total_timesteps = 20_480 if args.quick else 100_000
    if args.runs < 1 or args.steps < 1 or args.total_timesteps < 0 or 0 < args.total_timesteps < 512:
        parser.error("--runs and --steps must be >= 1, --total-timesteps 0 or >= 512 (one PPO iteration)")
    if args.one:
        child_main(args)
        return 0
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
