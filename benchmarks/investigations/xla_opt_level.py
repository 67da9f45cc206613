"""Compile and run time of jaxrl programs at XLA:CPU's backend optimisation levels
(``--xla_backend_optimization_level``, LLVM's -O level for the generated kernels; XLA's
default is 2). Each level in a fresh process, 2 vmapped seeds of each preset at a small
budget, compile (``lower().compile()``) apart from the run.

    python benchmarks/investigations/xla_opt_level.py --levels 2 1 0

The table and what it showed: benchmarks/RESULTS.md, "The test suite" (why the test suite
keeps XLA's default level).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

CHILD = "--child"


def child() -> None:
    import jax

    from jaxrl.algorithms import dqn, ppo, sac

    cases = {
        "ppo CartPole-v1 100k": (ppo, ppo.preset("CartPole-v1", total_timesteps=100_000, num_reports=0)),
        "dqn CartPole-v1 20k": (dqn, dqn.preset("CartPole-v1", total_timesteps=20_000, num_reports=0)),
        "sac Pendulum-v1 5k": (sac, sac.preset("Pendulum-v1", total_timesteps=5_000, num_reports=0)),
    }
    keys = jax.random.split(jax.random.key(0), 2)
    for name, (module, config) in cases.items():
        train = jax.jit(jax.vmap(module.train, in_axes=(0, None)), static_argnums=1)
        start = time.perf_counter()
        compiled = train.lower(keys, config).compile()
        compiled_at = time.perf_counter()
        jax.block_until_ready(compiled(keys))
        print(f"{name}\t{compiled_at - start:.1f}\t{time.perf_counter() - compiled_at:.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[2, 1, 0])
    args = parser.parse_args()
    print("| program | level | compile (s) | run (s) |")
    print("| --- | --- | --- | --- |")
    for level in args.levels:
        flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_backend_optimization_level={level}".strip()
        out = subprocess.run(
            [sys.executable, __file__, CHILD],
            env={**os.environ, "XLA_FLAGS": flags},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for line in out.splitlines():
            name, compile_seconds, run_seconds = line.split("\t")
            print(f"| {name} | {level} | {compile_seconds} | {run_seconds} |", flush=True)


if __name__ == "__main__":
    child() if CHILD in sys.argv else main()
