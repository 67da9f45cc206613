"""Sweep scaling: PPO on CartPole-v1 as 1, 4, 16 and 64 (setting x seed) lanes in one
compiled program (``jaxrl.sweep.run``), against the same lanes trained one by one.

    python benchmarks/sweep_scaling.py                         # lanes 1 4 16 64, 32,768 env steps per lane
    python benchmarks/sweep_scaling.py --lanes 1 4 --total-timesteps 16384 --plot sweep.png
    python benchmarks/sweep_scaling.py --markdown sweep.md

Lanes: 1 = one learning rate x 1 seed; L >= 4 = L / 4 learning rates (log-spaced in
[1e-4, 3e-3]) x 4 seeds. Every lane runs ``ppo.Config`` (PureJaxRL's CartPole settings)
with ``total_timesteps`` from the command line.

* sweep: ``jaxrl.sweep.run``, i.e. ``jit(vmap(vmap(ppo.train)))``; compile time is
  ``lower`` + ``compile``, run time the compiled call until ``block_until_ready``.
* one by one: ``jax.jit(ppo.train)`` compiled once, before all rows (the learning rate
  is a traced field, so every lane reuses it; its compile time is printed below the
  table), then each lane called in turn; run time is the sum.

Steps/s = lanes x env steps per lane / run time. The ratio is sweep steps/s over
one-by-one steps/s. Everything runs in this one process, one measurement at a time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jaxrl  # noqa: E402,F401  (XLA settings before JAX starts)
import jax  # noqa: E402
import numpy as np  # noqa: E402

from jaxrl import sweep  # noqa: E402
from jaxrl.algorithms import ppo  # noqa: E402

SEEDS_PER_SETTING = 4


def lanes_layout(lanes: int) -> tuple[np.ndarray, int]:
    """``(learning_rates [C], seeds)`` with ``C * seeds == lanes``."""
    if lanes == 1:
        return np.array([2.5e-4]), 1
    if lanes % SEEDS_PER_SETTING:
        raise SystemExit(f"lanes must be 1 or a multiple of {SEEDS_PER_SETTING}, got {lanes}")
    return np.geomspace(1e-4, 3e-3, lanes // SEEDS_PER_SETTING), SEEDS_PER_SETTING


def compile_single(config):
    """``(compiled ppo.train for one lane, compile seconds)``: every lane reuses it."""
    start = time.perf_counter()
    compiled = jax.jit(ppo.train).lower(jax.random.key(0), config).compile()
    return compiled, time.perf_counter() - start


def measure(lanes: int, config, compiled) -> dict:
    learning_rates, seeds = lanes_layout(lanes)
    result = sweep.run("ppo", config, {"learning_rate": learning_rates}, seeds=seeds)
    steps = int(np.max(result.metrics["timesteps"][..., -1]))

    keys = jax.random.split(jax.random.key(0), seeds)
    start = time.perf_counter()
    for lr in learning_rates:
        for key in keys:
            jax.block_until_ready(compiled(key, config.replace(learning_rate=float(lr))))
    single_run = time.perf_counter() - start

    sweep_rate, single_rate = lanes * steps / result.run_seconds, lanes * steps / single_run
    return {"lanes": lanes, "layout": f"{len(learning_rates)} x {seeds}", "steps": steps,
            "sweep_compile": result.compile_seconds, "sweep_run": result.run_seconds, "sweep_rate": sweep_rate,
            "single_run": single_run, "single_rate": single_rate,
            "ratio": sweep_rate / single_rate,
            "final_return": float(np.nanmean(sweep.final_scores(result.metrics)))}


HEADERS = ["lanes", "settings x seeds", "sweep compile s", "sweep run s", "sweep steps/s",
           "one-by-one run s", "one-by-one steps/s", "ratio", "mean final eval return"]


def row(r: dict) -> list[str]:
    return [str(r["lanes"]), r["layout"], f"{r['sweep_compile']:.1f}", f"{r['sweep_run']:.2f}",
            f"{r['sweep_rate']:,.0f}", f"{r['single_run']:.2f}",
            f"{r['single_rate']:,.0f}", f"{r['ratio']:.1f}x", f"{r['final_return']:.1f}"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--total-timesteps", type=int, default=32_768, help="env steps per lane")
    parser.add_argument("--markdown", metavar="PATH", help="also write the table as Markdown")
    parser.add_argument("--plot", metavar="PNG", help="also plot steps/s against lanes")
    args = parser.parse_args(argv)
    config = ppo.Config(env_id="CartPole-v1", total_timesteps=args.total_timesteps, num_reports=0)

    compiled, single_compile = compile_single(config)
    results = []
    for lanes in args.lanes:
        print(f"measuring {lanes} lane(s)...", flush=True)
        results.append(measure(lanes, config, compiled))
    rows = [row(r) for r in results]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADERS)]
    print()
    print("  ".join(h.rjust(w) for h, w in zip(HEADERS, widths)))
    for r in rows:
        print("  ".join(v.rjust(w) for v, w in zip(r, widths)))
    print(f"\none-by-one: jax.jit(ppo.train) compiled once in {single_compile:.1f} s, reused by every lane")
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPU(s); "
          f"{args.total_timesteps:,} env steps per lane; command: python benchmarks/sweep_scaling.py "
          + " ".join(argv if argv is not None else sys.argv[1:]))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("| " + " | ".join(HEADERS) + " |\n|" + "---|" * len(HEADERS) + "\n")
            f.writelines("| " + " | ".join(r) + " |\n" for r in rows)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axes = plt.subplots(figsize=(6, 4))
        lanes = [r["lanes"] for r in results]
        axes.plot(lanes, [r["sweep_rate"] for r in results], "o-", label="one program (jaxrl.sweep)")
        axes.plot(lanes, [r["single_rate"] for r in results], "s--", label="lanes one by one")
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        axes.set_xlabel("lanes (settings x seeds)")
        axes.set_ylabel("env steps / s")
        axes.set_title("PPO on CartPole-v1, 2-core CPU")
        axes.grid(alpha=0.3)
        axes.legend()
        figure.tight_layout()
        figure.savefig(args.plot, dpi=120)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
