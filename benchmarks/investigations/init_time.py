"""Where a pixel algorithm's ``init`` spends its run time: the orthogonal initialiser
(``jaxrl.networks.orthonormal_columns``) on each kernel shape of the Nature and MinAtar
CNNs, column by column and in blocks, and the whole ``init`` of ``benchmarks/throughput.py``'s
``dqn-atari`` and ``ppo-atari`` entries. Everything is compiled first; the fastest of
``--rounds`` runs is kept.

    python benchmarks/investigations/init_time.py [--rounds 3] [--no-entries]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import jax

from jaxrl import networks

# [rows, columns] of the matrices the initialiser orthonormalises: the Nature CNN's
# dense kernel and convolutions (8x8x4, 4x4x32, 3x3x64 patches), the MinAtar CNN's dense
# kernel on a 10x10x16 feature map, and a 64x64 MLP kernel.
SHAPES = [(3136, 512), (256, 32), (512, 64), (576, 64), (1600, 128), (64, 64)]


def fastest_s(fn, args, rounds: int) -> float:
    compiled = jax.jit(fn).lower(*args).compile()
    jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - start)
    return min(times)


def both_ways(fn, args, rounds: int) -> list[float]:
    """``fastest_s`` of ``fn`` with every matrix orthonormalised column by column, then as
    the initialiser does it (in blocks above ``BLOCKED_FROM`` elements)."""
    blocked_from, times = networks.BLOCKED_FROM, []
    try:
        for limit in (float("inf"), blocked_from):
            networks.BLOCKED_FROM = limit
            jax.clear_caches()  # so that the initialiser is traced again under the limit
            times.append(fastest_s(fn, args, rounds))
    finally:
        networks.BLOCKED_FROM = blocked_from
        jax.clear_caches()
    return times


def shapes_table(rounds: int) -> None:
    print("| matrix | column by column, ms | as the initialiser runs it, ms |\n| --- | ---: | ---: |")
    for shape in SHAPES:
        matrix = jax.random.normal(jax.random.key(0), shape)
        column, blocked = both_ways(networks.orthonormal_columns, (matrix,), rounds)
        print(f"| {shape[0]}x{shape[1]} | {column * 1e3:.1f} | {blocked * 1e3:.1f} |")


def entries_table(rounds: int) -> None:
    sys.path.insert(0, str(pathlib.Path(__file__).parent.parent))
    from throughput import ENTRIES, jaxrl_config  # noqa: PLC0415

    print("\n| entry | init column by column, s | init as it runs, s |\n| --- | ---: | ---: |")
    for name in ("dqn-atari", "ppo-atari"):
        module, config = jaxrl_config(ENTRIES[name], False)
        program = module.program(config)
        column, blocked = both_ways(lambda key: program.init(key, program.inputs()), (jax.random.key(0),), rounds)
        print(f"| {name} (1 seed) | {column:.2f} | {blocked:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed runs of each (default: %(default)s)")
    parser.add_argument("--no-entries", action="store_true", help="only the initialiser's shapes (no envpool)")
    args = parser.parse_args()
    blocks = f"blocks of {networks.ORTHONORMAL_BLOCK} columns above {networks.BLOCKED_FROM} elements"
    print(f"jax {jax.__version__}; {blocks}")
    shapes_table(args.rounds)
    if not args.no_entries:
        entries_table(args.rounds)


if __name__ == "__main__":
    main()
