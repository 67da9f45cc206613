"""Compile time of jaxrl's PPO, DQN, SAC and TD3 beside rejax's, at the throughput
benchmark's settings, split into JAX's stages.

    python benchmarks/compile_time.py                      # ppo dqn sac td3, 1 and 8 seeds
    python benchmarks/compile_time.py ppo --seeds 1 --repeats 3

Each measurement compiles ``jax.vmap(train)`` over the seeds for one entry of
``throughput.ENTRIES`` (the same program ``throughput.py`` times, its evaluations
included) in a fresh process with JAX's persistent compilation cache off, and runs
nothing. Columns: trace s (Python tracing to a jaxpr), lower s (jaxpr to StableHLO),
XLA s (XLA's compile of the StableHLO), compile s (the three), HLO ops (operations in
the lowered program) and / rejax (compile s over rejax's at the same seeds). With
``--repeats`` each case runs in that many processes and the fastest is reported: on a
shared machine the others are slowed by other work.
"""

from __future__ import annotations

import argparse
import sys

from _harness import add_common_arguments, measure_in_child, measure_plan, peer_missing, report
from throughput import ENTRIES, emit_one

ALGORITHMS = ("ppo", "dqn", "sac", "td3")
HEADERS = ["run", "algorithm", "seeds", "trace s", "lower s", "XLA s", "compile s", "HLO ops", "/ rejax"]


def fastest(results) -> list[dict]:
    """Per (entry, run, seeds), the measurement with the smallest compile time (a failure
    only where every repeat failed), with ``rejax_ratio`` on jaxrl's rows."""
    best = {}
    for r in results:
        key = (r["entry"], r["run"], r["seeds"])
        if key not in best or ("error" in best[key] and "error" not in r):
            best[key] = r
        elif "error" not in r and r["compile_s"] < best[key]["compile_s"]:
            best[key] = r
    for (name, run, seeds), r in best.items():
        peer = best.get((name, "rejax", seeds))
        if run == "jaxrl" and "error" not in r and peer and "error" not in peer:
            r["rejax_ratio"] = r["compile_s"] / peer["compile_s"]
    return list(best.values())


def row(r) -> list[str]:
    cells = [r["run"], r["entry"], str(r["seeds"])]
    if "error" in r:
        return cells + ["FAILED (see below)"] + ["-"] * (len(HEADERS) - 4)
    ratio = f"{r['rejax_ratio']:.2f}x" if "rejax_ratio" in r else "-"
    return cells + [
        f"{r['trace_s']:.2f}",
        f"{r['lower_s']:.2f}",
        f"{r['xla_s']:.2f}",
        f"{r['compile_s']:.2f}",
        f"{r['hlo_ops']:,}",
        ratio,
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("algos", nargs="*", metavar="ALGO", help=f"entries (default: {' '.join(ALGORITHMS)})")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 8], help="numbers of vmapped seeds (default: 1 8)")
    parser.add_argument("--repeats", type=int, default=1, help="processes per case; the fastest counts (default: 1)")
    parser.add_argument("--no-peers", action="store_true", help="measure no rejax rows, even if rejax is installed")
    parser.add_argument("--quick", action="store_true", help=argparse.SUPPRESS)  # read by throughput's builders
    add_common_arguments(parser, ("ENTRY", "RUN", "SEEDS"), timeout=600)
    args = parser.parse_args(argv)
    args.runs = 0  # compile only
    if args.one:
        emit_one(args, ENTRIES)
        return 0

    names = args.algos or list(ALGORITHMS)
    unknown = [name for name in names if name not in ENTRIES]
    if unknown:
        parser.error(f"unknown entry {', '.join(map(repr, unknown))}; choose from {', '.join(ENTRIES)}")
    if args.repeats < 1 or min(args.seeds) < 1:
        parser.error("--repeats and --seeds must be >= 1")
    peer_note = peer_missing("rejax", args.no_peers)
    plan = [
        (name, run, seeds)
        for _ in range(args.repeats)
        for name in names
        for seeds in args.seeds
        for run in ["jaxrl"] + ["rejax"] * bool(ENTRIES[name].peer and not peer_note)
    ]
    results = measure_plan(
        plan,
        lambda item: measure_in_child(
            __file__, dict(zip(("entry", "run", "seeds"), item, strict=True)), args, ("seed",)
        ),
        label=lambda item: f"{item[0]}: {item[1]}, {item[2]} seed{'s' * (item[2] > 1)}",
    )
    best = sorted(fastest(results), key=lambda r: (names.index(r["entry"]), r["seeds"], r["run"]))
    notes = [f"error: {r['entry']} {r['run']} x{r['seeds']}: {r['error']}" for r in best if "error" in r]
    notes += [f"{name}: {ENTRIES[name].title}; the program throughput.py times" for name in names]
    notes += ([peer_note] if peer_note else []) + [f"fastest of {args.repeats} process(es) per row"]
    report("Compile time by stage, seeds vmapped", HEADERS, [row(r) for r in best], notes, best, args.markdown, (0, 1))
    return 0 if all("error" not in r for r in best if r["run"] == "jaxrl") else 1


if __name__ == "__main__":
    sys.exit(main())
