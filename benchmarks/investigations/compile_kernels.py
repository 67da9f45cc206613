"""What XLA compiles for a throughput entry: while loops, fusions and fused instructions
in the optimised HLO, and the largest fusions by the operation they come from.

    python benchmarks/investigations/compile_kernels.py td3 jaxrl
    python benchmarks/investigations/compile_kernels.py dqn rejax --seeds 1

Compiles the program ``benchmarks/throughput.py`` times for the entry (jaxrl's or
rejax's, 1 seed by default) and runs nothing. On CPU, XLA's compile time follows the
number and size of the kernels (RESULTS.md, "Compile time"), which these counts show.
"""

import argparse
import collections
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import throughput  # noqa: E402


def optimised_hlo(entry: str, run: str, seeds: int) -> str:
    captured = {}

    def compile_only(jax_, fn, args, runs):
        captured["hlo"] = jax.jit(fn).trace(*args).lower().compile().as_text()
        return {}, None

    throughput.time_compiled = compile_only
    measure = {"jaxrl": throughput.run_jaxrl, "rejax": throughput.run_peer}[run]
    measure(jax, throughput.ENTRIES[entry], seeds, argparse.Namespace(quick=False, seed=0, runs=0))
    return captured["hlo"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("entry", choices=list(throughput.ENTRIES))
    parser.add_argument("run", choices=("jaxrl", "rejax"))
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--top", type=int, default=10, help="largest fusion sources to list")
    args = parser.parse_args()
    hlo = optimised_hlo(args.entry, args.run, args.seeds)
    loops = [re.search(r'op_name="([^"]*)"', line) for line in hlo.splitlines() if " while(" in line]
    sizes, sources = collections.Counter(), collections.Counter()
    fusions = 0
    for computation in re.split(r"\n(?=\S)", hlo):
        head = computation.split("\n", 1)[0].split(" ")[0]
        if "fused" not in head:
            continue
        fusions += 1
        names = re.findall(r'op_name="([^"]*)"', computation)
        source = collections.Counter(names).most_common(1)[0][0][-100:] if names else "?"
        sizes[source] += computation.count("\n")
        sources[source] += 1
    print(
        f"{args.entry} {args.run}, {args.seeds} seed(s): {len(loops)} while loops, {fusions} fusions, "
        f"{sum(sizes.values()):,} fused instructions, {hlo.count(chr(10)):,} lines of optimised HLO"
    )
    threefry = sum(bool(m) and any(k in m[1] for k in ("threefry", "_uniform", "_randint", "_normal")) for m in loops)
    print(f"while loops from random draws (threefry, uniform, randint, normal): {threefry}")
    for source, size in sizes.most_common(args.top):
        print(f"  {size:6,} instructions in {sources[source]:3} fusions: {source}")


if __name__ == "__main__":
    main()
