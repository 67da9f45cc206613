"""Sweep scaling: PPO on CartPole-v1 as 1, 4, 16 and 64 (setting x seed) lanes in one
compiled program (``jaxrl.workflow.sweep.run``), against the same lanes trained one by one.

    python benchmarks/sweep_scaling.py                         # lanes 1 4 16 64, 32,768 env steps per lane
    python benchmarks/sweep_scaling.py --lanes 1 4 --total-timesteps 16384 --plot sweep.png
    python benchmarks/sweep_scaling.py --markdown sweep.md
    python benchmarks/sweep_scaling.py --devices 2            # plus the sweep split over 2 host devices

Lanes: 1 = one learning rate x 1 seed; L >= 4 = L / 4 learning rates (log-spaced in
[1e-4, 3e-3]) x 4 seeds. Every lane runs ``ppo.Config`` (PureJaxRL's CartPole settings)
with ``total_timesteps`` from the command line.

* sweep: ``jaxrl.workflow.sweep.run`` in one chunk, i.e. ``jit(vmap(ppo.train))`` over the lanes;
  compile time is ``lower`` + ``compile``, run time the compiled call until its metrics are on the host.
* one by one: ``jax.jit(ppo.train)`` compiled once, before all rows (the learning rate
  is a traced field, so every lane reuses it; its compile time is printed below the
  table), then each lane called in turn; run time is the sum.

* sharded (``--devices N``): the same ``jaxrl.workflow.sweep.run``, its lanes split over a mesh
  of the first N devices (``RunOptions(mesh=...)``; of as many as divide the lanes, so 1 lane
  runs on 1 device); on a CPU those are N forced host devices
  (``--xla_force_host_platform_device_count``), so it runs in a subprocess started
  with that flag, after the other measurements.

Steps/s = lanes x env steps per lane / run time. The ratio is sweep steps/s over
one-by-one steps/s. Everything else runs in this one process, one measurement at a time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from _harness import machine_info, report  # noqa: E402

from jaxrl.algorithms import ppo  # noqa: E402
from jaxrl.workflow import distributed, sweep  # noqa: E402
from jaxrl.workflow.options import RunOptions  # noqa: E402

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


def measure_sweep(lanes: int, config, mesh=None):
    learning_rates, seeds = lanes_layout(lanes)
    whole_run = ppo.program(config).num_iterations  # one chunk: the sweep as one program
    settings = {"learning_rate": learning_rates}
    return sweep.run("ppo", config, settings, seeds, chunk_iterations=whole_run, options=RunOptions(mesh=mesh))


def measure_sharded(args) -> list[dict]:
    """The sharded column: this script again, in a process with ``args.devices`` host
    devices, measuring only ``sweep.run`` (one JSON line per lane count)."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={args.devices}".strip()
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--sharded-worker",
        "--total-timesteps",
        str(args.total_timesteps),
        "--lanes",
        *map(str, args.lanes),
    ]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def measure(lanes: int, config, compiled) -> dict:
    learning_rates, seeds = lanes_layout(lanes)
    load = os.getloadavg()[0]
    result = measure_sweep(lanes, config)
    steps = int(np.max(result.metrics["timesteps"][..., -1]))

    keys = jax.random.split(jax.random.key(0), seeds)
    start = time.perf_counter()
    for lr in learning_rates:
        for key in keys:
            jax.block_until_ready(compiled(key, config.replace(learning_rate=float(lr))))
    single_run = time.perf_counter() - start

    sweep_rate, single_rate = lanes * steps / result.run_seconds, lanes * steps / single_run
    return {
        "machine": machine_info(jax),
        "loadavg_before": load,
        "lanes": lanes,
        "layout": f"{len(learning_rates)} x {seeds}",
        "steps": steps,
        "sweep_compile": result.compile_seconds,
        "sweep_run": result.run_seconds,
        "sweep_rate": sweep_rate,
        "single_run": single_run,
        "single_rate": single_rate,
        "ratio": sweep_rate / single_rate,
        "final_return": float(np.nanmean(sweep.final_scores(result.metrics))),
    }


HEADERS = [
    "lanes",
    "settings x seeds",
    "sweep compile s",
    "sweep run s",
    "sweep steps/s",
    "one-by-one run s",
    "one-by-one steps/s",
    "ratio",
    "mean final eval return",
]
SHARDED_HEADERS = ["sharded compile s", "sharded run s", "sharded steps/s"]


def row(r: dict) -> list[str]:
    cells = [
        str(r["lanes"]),
        r["layout"],
        f"{r['sweep_compile']:.1f}",
        f"{r['sweep_run']:.2f}",
        f"{r['sweep_rate']:,.0f}",
        f"{r['single_run']:.2f}",
        f"{r['single_rate']:,.0f}",
        f"{r['ratio']:.1f}x",
        f"{r['final_return']:.1f}",
    ]
    if "sharded_run" in r:
        cells += [f"{r['sharded_compile']:.1f}", f"{r['sharded_run']:.2f}", f"{r['sharded_rate']:,.0f}"]
    return cells


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--total-timesteps", type=int, default=32_768, help="env steps per lane")
    parser.add_argument("--markdown", metavar="PATH", help="also write the table and notes as Markdown")
    parser.add_argument("--plot", metavar="PNG", help="also plot steps/s against lanes")
    parser.add_argument(
        "--devices",
        type=int,
        default=1,
        help="also run the sweep split over this many devices (forced host devices on CPU)",
    )
    parser.add_argument("--sharded-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    config = ppo.Config(env_id="CartPole-v1", total_timesteps=args.total_timesteps, num_reports=0)
    if args.sharded_worker:
        for lanes in args.lanes:
            devices = math.gcd(lanes, jax.device_count())  # the lanes must divide over the devices
            result = measure_sweep(lanes, config, distributed.make_mesh(jax.devices()[:devices]))
            steps = int(np.max(result.metrics["timesteps"][..., -1]))
            print(
                json.dumps(
                    {
                        "lanes": lanes,
                        "devices": devices,
                        "sharded_compile": result.compile_seconds,
                        "sharded_run": result.run_seconds,
                        "sharded_rate": lanes * steps / result.run_seconds,
                    }
                ),
                flush=True,
            )
        return 0

    compiled, single_compile = compile_single(config)
    results = []
    for lanes in args.lanes:
        print(f"measuring {lanes} lane(s)...", flush=True)
        results.append(measure(lanes, config, compiled))
    headers = HEADERS
    if args.devices > 1:
        print(f"measuring the sweeps split over {args.devices} devices...", flush=True)
        for r, sharded in zip(results, measure_sharded(args), strict=True):
            r.update(sharded)
        headers = HEADERS + SHARDED_HEADERS
    notes = [
        f"one by one: jax.jit(ppo.train) compiled once in {single_compile:.1f} s, reused by every lane",
        f"{args.total_timesteps:,} env steps per lane; everything in one process, one measurement at a time",
    ]
    if args.devices > 1:
        notes.append(f"sharded: the sweep split over up to {args.devices} devices (as many as divide its lanes)")
    report(
        "Sweep scaling: PPO on CartPole-v1 as lanes of one program (jaxrl.workflow.sweep) or one by one",
        headers,
        [row(r) for r in results],
        notes,
        results,
        args.markdown,
        left=(),
    )
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axes = plt.subplots(figsize=(6, 4))
        lanes = [r["lanes"] for r in results]
        axes.plot(lanes, [r["sweep_rate"] for r in results], "o-", label="one program (jaxrl.workflow.sweep)")
        axes.plot(lanes, [r["single_rate"] for r in results], "s--", label="lanes one by one")
        if args.devices > 1:
            axes.plot(lanes, [r["sharded_rate"] for r in results], "^-", label=f"one program on {args.devices} devices")
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        axes.set_xlabel("lanes (settings x seeds)")
        axes.set_ylabel("env steps / s")
        axes.set_title(f"PPO on CartPole-v1, {os.cpu_count()} CPUs")
        axes.grid(alpha=0.3)
        axes.legend()
        figure.tight_layout()
        figure.savefig(args.plot, dpi=120)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
