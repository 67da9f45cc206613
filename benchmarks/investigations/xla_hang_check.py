"""Run vmapped PPO several times under a watchdog, to see whether XLA:CPU hangs.

    python benchmarks/investigations/xla_hang_check.py [--seeds 8] [--runs 10] [--timeout 120]

Compiles ``ppo.train`` (CartPole-v1, 200 iterations of 512 steps) vmapped over
``--seeds`` seeds under JAX's default settings and runs it ``--runs`` times. A run that
has not finished after ``--timeout`` seconds is reported as a hang and the process exits
with status 3 at once, since a hung XLA program cannot be interrupted from Python.
"""

import argparse
import os
import threading
import time

import jax

from jaxrl.algorithms import ppo


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    print(f"jax {jax.__version__}, XLA_FLAGS: {os.environ.get('XLA_FLAGS', '')!r}", flush=True)
    config = ppo.Config(num_reports=0, total_timesteps=512 * 200)
    train = jax.jit(jax.vmap(ppo.train, in_axes=(0, None)))
    keys = jax.random.split(jax.random.key(0), args.seeds)
    start = time.perf_counter()
    compiled = train.lower(keys, config).compile()
    print(f"compiled in {time.perf_counter() - start:.1f} s", flush=True)
    for run in range(args.runs):
        finished = threading.Event()

        def watchdog(run=run, finished=finished):
            if not finished.wait(args.timeout):
                print(f"HANG in run {run + 1}: no result after {args.timeout:.0f} s", flush=True)
                os._exit(3)

        threading.Thread(target=watchdog, daemon=True).start()
        start = time.perf_counter()
        jax.block_until_ready(compiled(jax.random.split(jax.random.key(run), args.seeds), config))
        finished.set()
        print(f"run {run + 1}: {time.perf_counter() - start:.1f} s", flush=True)
    print(f"no hang in {args.runs} runs")


if __name__ == "__main__":
    main()
