"""Issue 40's compile crash, reproduced without jaxrl: every program XLA:CPU compiles
keeps memory mappings of its own (code and data of each kernel) until JAX drops the
executable. A process that keeps enough programs reaches the kernel's
``vm.max_map_count`` (65530 by default); XLA's JIT then logs "LLVM compilation error:
Cannot allocate memory" for each kernel it cannot map, and the process dies of a
segmentation fault or an abort inside ``backend_compile_and_load`` instead of raising.

    python benchmarks/investigations/xla_map_count.py --programs 400              # maps grow
    python benchmarks/investigations/xla_map_count.py --programs 400 --clear-every 50
    # The crash in seconds, with a lower limit (root; put the old value back after):
    sysctl vm.max_map_count=1500 && python benchmarks/investigations/xla_map_count.py --programs 600

Prints the process's mappings (lines of /proc/self/maps) every ``--report-every``
programs. With ``--clear-every N``, ``jax.clear_caches()`` every N programs keeps the
count bounded (tests/conftest.py does this after each test module).
"""

from __future__ import annotations

import argparse
import faulthandler

import jax
import jax.numpy as jnp


def mappings() -> int:
    with open("/proc/self/maps") as maps:
        return sum(1 for _ in maps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=400)
    parser.add_argument("--clear-every", type=int, default=0)
    parser.add_argument("--report-every", type=int, default=50)
    args = parser.parse_args()
    faulthandler.enable()
    with open("/proc/sys/vm/max_map_count") as limit:
        print(f"vm.max_map_count {limit.read().strip()}; at start: {mappings()} mappings", flush=True)
    for index in range(args.programs):
        # A new shape each time: a new program, compiled and kept by jit's cache.
        program = jax.jit(lambda x: jnp.tanh(x @ x.T).sum(0) * 2 + jnp.sin(x).mean())
        program(jnp.ones((index + 2, 3))).block_until_ready()
        if args.clear_every and (index + 1) % args.clear_every == 0:
            jax.clear_caches()
        if (index + 1) % args.report_every == 0:
            print(f"{index + 1} programs: {mappings()} mappings", flush=True)


if __name__ == "__main__":
    main()
