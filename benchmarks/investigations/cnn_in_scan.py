"""One IMPALA iteration with a CNN, compiled alone and inside a ``lax.scan`` (as the
runner's chunk runs its iterations): on XLA:CPU the scanned iteration is several times
slower than the same iteration called on its own, which makes the lock-step program on
pixels far slower than its parts (benchmarks/RESULTS.md, "Actors apart from the learner").

    python benchmarks/investigations/cnn_in_scan.py Breakout-MinAtar --network cnn
    python benchmarks/investigations/cnn_in_scan.py envpool:Pong-v5 --network nature_cnn --channels-last
"""

from __future__ import annotations

import argparse
import functools
import time

import jax


def milliseconds(fn, calls: int) -> float:
    jax.block_until_ready(fn(0))  # compile
    start = time.perf_counter()
    for call in range(calls):
        jax.block_until_ready(fn(call + 1))
    return (time.perf_counter() - start) / calls * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("env_id")
    parser.add_argument("--network", default="cnn")
    parser.add_argument("--channels-last", action="store_true", help="envpool's frames as [H, W, C]")
    parser.add_argument("--iterations", type=int, default=4, help="iterations in the scan (default: %(default)s)")
    args = parser.parse_args()

    from jaxrl.algorithms import impala

    env_kwargs = {"channels_last": True} if args.channels_last else {}
    config = impala.Config(
        env_id=args.env_id, env_kwargs=env_kwargs, network=args.network, policy_lag=0, num_evals=0, num_reports=0
    )
    state = jax.jit(impala.init)(jax.random.key(0), config)
    step = jax.jit(functools.partial(impala.step, config=config))

    @jax.jit
    def scanned(state, key):
        keys = jax.random.split(key, args.iterations)
        return jax.lax.scan(lambda state, key: impala.step(state, key, config), state, keys)

    alone = milliseconds(lambda i: step(state, jax.random.key(i)), calls=args.iterations)
    inside = milliseconds(lambda i: scanned(state, jax.random.key(i)), calls=1) / args.iterations
    print(
        f"{args.env_id}, {args.network}: one iteration alone {alone:.1f} ms, inside a scan of {args.iterations} "
        f"{inside:.1f} ms per iteration ({inside / alone:.1f}x)"
    )


if __name__ == "__main__":
    main()
