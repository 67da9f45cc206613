"""Run every benchmark script and assemble ``benchmarks/RESULTS.md``.

    python benchmarks/run_all.py                    # everything (long: run it on a quiet machine)
    python benchmarks/run_all.py --quick            # every script's smoke-test settings
    python benchmarks/run_all.py --only time_to_solve sweep_scaling
    pip install -e ".[peers]"                       # rejax and flashbax, for the peer columns

Each script runs in its own process, one after another (they time themselves, so never
two at once), with ``--markdown`` (and ``--plot`` where it has one) into
``benchmarks/results/`` (not committed), beside a ``<script>.json`` with its command,
exit status, wall time and date. RESULTS.md then holds the machine, the versions, and
per script those and its tables (raw JSON left in the per-script files), for every
script with results there: ``--only`` reruns some and keeps the others' last results,
``--only`` with no script just reassembles. A script that fails is reported there and
the rest still run. The hand-written one-off measurements in ``HAND_WRITTEN`` follow.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS_DIR = os.path.join(HERE, "results")

# name: (arguments, arguments under --quick, has --plot)
SCRIPTS = {
    "time_to_solve": ([], ["--cells", "cartpole-ppo", "pendulum-ddpg"], True),
    "throughput": ([], ["--quick"], True),
    "buffers": ([], ["--quick"], False),
    "sweep_scaling": ([], ["--lanes", "1", "4", "--total-timesteps", "8192"], True),
    "gymnasium_bridge": ([], ["--quick"], False),
}
# one-off measurements written by hand (command beside each table), appended as they are
HAND_WRITTEN = (
    "investigations/core_cleanup.md",
    "investigations/memory.md",
    "investigations/es_alphazero.md",
    "investigations/multiagent.md",
    "investigations/learning_table.md",
    "investigations/gsde.md",
)
PACKAGES = ("jax", "jaxlib", "flax", "optax", "gymnax", "numpy", "rejax", "flashbax", "gymnasium")


def version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def run_script(name: str, quick: bool) -> dict:
    arguments, quick_arguments, has_plot = SCRIPTS[name]
    markdown = os.path.join(RESULTS_DIR, f"{name}.md")
    command = [
        os.path.join("benchmarks", f"{name}.py"),
        *(quick_arguments if quick else arguments),
        "--markdown",
        os.path.relpath(markdown, os.path.dirname(HERE)),
    ]
    if has_plot:
        command += ["--plot", os.path.relpath(os.path.join(RESULTS_DIR, f"{name}.png"), os.path.dirname(HERE))]
    print(f"== {name}: python {' '.join(command)}", flush=True)
    if os.path.exists(markdown):
        os.remove(markdown)  # never report an earlier run's tables as this one's
    start = time.monotonic()
    with open(os.path.join(RESULTS_DIR, f"{name}.log"), "w") as log:
        status = subprocess.run(
            [sys.executable, *command], cwd=os.path.dirname(HERE), stdout=log, stderr=subprocess.STDOUT
        ).returncode
    seconds = time.monotonic() - start
    print(f"   exit status {status} after {seconds:.0f} s (log: benchmarks/results/{name}.log)", flush=True)
    run = dict(
        name=name,
        command="python " + " ".join(command),
        status=status,
        seconds=seconds,
        date=datetime.datetime.now().isoformat(timespec="minutes"),
        quick=quick,
    )
    with open(os.path.join(RESULTS_DIR, f"{name}.json"), "w") as f:
        json.dump(run, f, indent=1)
    return run


def load_run(name: str) -> dict | None:
    """The last recorded run of script ``name`` with its tables, or None if there is none."""
    path = os.path.join(RESULTS_DIR, f"{name}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        run = json.load(f)
    run["tables"] = ""
    markdown = os.path.join(RESULTS_DIR, f"{name}.md")
    if os.path.exists(markdown):
        with open(markdown) as f:
            run["tables"] = re.split(r"\n+Raw results:\n", f.read())[0].strip()
    return run


def machine_section() -> list[str]:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = "?"
    return [
        f"- date: {datetime.datetime.now().isoformat(timespec='minutes')}",
        f"- machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs ({usable} usable), load average before: "
        + ", ".join(f"{v:.2f}" for v in os.getloadavg()),
        f"- python {platform.python_version()}; " + ", ".join(f"{p} {version(p)}" for p in PACKAGES),
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="each script's small settings")
    parser.add_argument(
        "--only",
        nargs="*",
        choices=list(SCRIPTS),
        metavar="SCRIPT",
        help=f"run only these (none: just reassemble RESULTS.md): {', '.join(SCRIPTS)}",
    )
    parser.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"), help="default: %(default)s")
    args = parser.parse_args(argv)
    os.makedirs(RESULTS_DIR, exist_ok=True)
    header = machine_section()
    ran = [run_script(name, args.quick) for name in (SCRIPTS if args.only is None else args.only)]
    runs = [run for run in map(load_run, SCRIPTS) if run is not None]
    invocation = " ".join(["python benchmarks/run_all.py", *(argv if argv is not None else sys.argv[1:])])
    lines = [
        "# jaxrl benchmark results",
        "",
        f"Assembled by `{invocation}`. Every number below comes from the command shown above it, run on "
        "this machine one script at a time.",
        "",
        *header,
        "",
    ]
    for run in runs:
        lines += [
            f"## {run['name']}",
            "",
            f"`{run['command']}`: exit status {run['status']}, "
            f"{run['seconds']:.0f} s wall, {run['date']}" + (" (--quick settings)" if run["quick"] else ""),
            "",
        ]
        lines += [run["tables"] or f"(no tables: see `benchmarks/results/{run['name']}.log`)", ""]
    for name in HAND_WRITTEN:
        with open(os.path.join(HERE, name)) as f:
            lines += [f.read().strip(), "", f"(from `benchmarks/{name}`)", ""]
    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {args.out}")
    return 0 if all(run["status"] == 0 for run in ran) else 1


if __name__ == "__main__":
    raise SystemExit(main())
