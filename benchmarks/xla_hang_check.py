"""Check whether vmapped PPO hangs under the current XLA settings.

    python benchmarks/xla_hang_check.py                    # with jaxrl's XLA settings
    JAXRL_NO_XLA_SETTINGS=1 python benchmarks/xla_hang_check.py   # JAX's defaults

Compiles PPO on CartPole vmapped over ``--seeds`` seeds (100k steps each) and runs it
``--runs`` times; a run that has not finished after ``--timeout`` seconds is reported as
a hang and the process exits with status 3. On a 2-core machine with jax 0.10.2, JAX's
defaults hung in most runs at 4-8 seeds; see jaxrl/_xla.py.
"""

import argparse
import os
import threading
import time

import jaxrl  # noqa: F401  (applies jaxrl's XLA settings unless JAXRL_NO_XLA_SETTINGS is set)
import jax
from jaxrl.algorithms import ppo


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    print("XLA_FLAGS:", os.environ.get("XLA_FLAGS", ""), flush=True)
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
