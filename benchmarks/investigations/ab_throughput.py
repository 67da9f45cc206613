"""Throughput of two jaxrl trees side by side, interleaved: ``benchmarks/throughput.py``'s
``jaxrl`` row of each entry, each tree's own script and code, alternating tree by tree.

    python benchmarks/investigations/ab_throughput.py OLD_TREE NEW_TREE \\
        --entries ppo ppo-gru dqn sac td3 --seeds 1 8 --rounds 3 --markdown out.md

A tree is a jaxrl checkout (e.g. a ``git worktree`` of another commit). For each entry,
number of seeds and round, each tree measures once in a fresh process
(``throughput.py --one ENTRY jaxrl SEEDS --runs 1``: compile, then one timed run, with
JAX's persistent cache off); the tree that goes first alternates from round to round,
because this machine's speed drifts by several percent over minutes. Reported: each
tree's median run and compile seconds over the rounds, and new / old.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

RESULT_TAG = "@@JAXRL_BENCH_RESULT@@"  # benchmarks/_harness.py's


def measure(tree: str, entry: str, seeds: int, timeout: float) -> dict:
    """One ``throughput.py --one`` child of ``tree``: its result dict."""
    command = [sys.executable, os.path.join(tree, "benchmarks", "throughput.py"), "--one", entry, "jaxrl", str(seeds)]
    command += ["--runs", "1"]
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=tree)
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG) :])
    return {"error": f"exit {done.returncode}: {done.stderr[-500:]}"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--entries", nargs="+", default=["ppo", "ppo-gru", "dqn", "sac", "td3"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--markdown", metavar="MD")
    args = parser.parse_args(argv)
    trees = {"old": args.old, "new": args.new}
    rows = []
    for entry in args.entries:
        for seeds in args.seeds:
            samples = {name: [] for name in trees}
            for round_ in range(args.rounds):
                order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
                for name in order:
                    result = measure(trees[name], entry, seeds, args.timeout)
                    if "error" in result:
                        print(f"{entry} x{seeds} {name}: {result['error']}", file=sys.stderr)
                        continue
                    samples[name].append((result["run_times"][0], result["compile_s"]))
                    print(
                        f"{entry} x{seeds} round {round_ + 1} {name}: run {result['run_times'][0]:.2f} s, "
                        f"compile {result['compile_s']:.1f} s",
                        file=sys.stderr,
                        flush=True,
                    )
            medians = {
                name: tuple(statistics.median(values) for values in zip(*runs)) if runs else (float("nan"),) * 2
                for name, runs in samples.items()
            }
            rows.append((entry, seeds, medians, samples))
    lines = [
        f"`python benchmarks/investigations/ab_throughput.py OLD NEW --entries {' '.join(args.entries)} "
        f"--seeds {' '.join(map(str, args.seeds))} --rounds {args.rounds}`",
        "",
        "| entry | seeds | old run s | new run s | new / old | old compile s | new compile s | runs (old; new) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for entry, seeds, medians, samples in rows:
        (old_run, old_compile), (new_run, new_compile) = medians["old"], medians["new"]
        runs = "; ".join(", ".join(f"{run:.2f}" for run, _ in samples[name]) for name in ("old", "new"))
        lines.append(
            f"| {entry} | {seeds} | {old_run:.2f} | {new_run:.2f} | {new_run / old_run:.3f} | "
            f"{old_compile:.1f} | {new_compile:.1f} | {runs} |"
        )
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
