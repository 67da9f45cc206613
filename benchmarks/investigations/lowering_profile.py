"""Where jaxrl's lowering goes for a throughput entry: ``cProfile`` around
``traced.lower()`` of the program ``benchmarks/throughput.py`` times (1 seed, vmapped,
JAX's persistent cache off), with the cumulative time of the random key type's lowering
rules (``random_bits``, ``split``, ``fold_in``) and the size of the lowered program.

    python benchmarks/investigations/lowering_profile.py td3

Profiled seconds are inflated by the profiler: compare the rules' share of the profiled
lowering, and take unprofiled stage times from ``benchmarks/compile_time.py``.
"""

import argparse
import cProfile
import os
import pstats
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
from throughput import ENTRIES, jaxrl_config  # noqa: E402

RULES = ("random_bits_lowering", "random_split_lowering", "random_fold_in_lowering")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("entry", nargs="?", default="td3", help="a throughput.py entry (default: %(default)s)")
    args = parser.parse_args()
    jax.config.update("jax_enable_compilation_cache", False)
    module, config = jaxrl_config(ENTRIES[args.entry], False)
    keys = jax.random.split(jax.random.key(0), 1)
    traced = jax.jit(jax.vmap(module.train, in_axes=(0, None))).trace(keys, config)
    profile = cProfile.Profile()
    lowered = profile.runcall(traced.lower)
    stats = pstats.Stats(profile).stats  # {(file, line, name): (calls, primitive calls, tottime, cumtime, callers)}
    total = sum(tottime for _, _, tottime, _, _ in stats.values())
    print(f"{args.entry}: lowering, profiled: {total:.2f} s")
    for rule in RULES:
        found = [(calls, cumtime) for (_, _, name), (calls, _, _, cumtime, _) in stats.items() if name == rule]
        calls, cumtime = (sum(c for c, _ in found), sum(t for _, t in found)) if found else (0, 0.0)
        print(f"  {rule}: {calls} calls, {cumtime:.2f} s ({cumtime / total:.0%})")
    text = lowered.as_text()
    print(f"lowered program: {text.count(chr(10)):,} lines, {text.count('func.func'):,} functions")


if __name__ == "__main__":
    main()
