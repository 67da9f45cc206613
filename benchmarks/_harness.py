"""What the benchmarks share.

Each measurement runs in a fresh Python process, so that nothing is compiled, cached or
warm from an earlier one, watched by the parent for time-outs and hangs. The child
names its current phase on stderr (so a hang says where it happened) and hands back its
result as one tagged JSON line on stdout. Compile time is measured apart from the
steady-state run time, because a user pays the first once and the second every run.
Every benchmark reports the same way (``report``): a text table, the same table in
Markdown for RESULTS.md, and notes on the method, the machine and its load.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time
import traceback

RESULT_TAG = "@@JAXRL_BENCH_RESULT@@"
PHASE_TAG = "@@JAXRL_BENCH_PHASE@@ "


# ============================================================================ child side


def phase(text: str) -> None:
    """Tell the parent what this child is doing now."""
    print(PHASE_TAG + text, file=sys.stderr, flush=True)


def machine_info(jax, packages=()) -> dict:
    """JAX's version, backend and devices, and the versions of ``packages``."""
    import importlib.metadata as md

    return dict(
        jax=jax.__version__,
        jaxlib=md.version("jaxlib"),
        backend=jax.default_backend(),
        devices=[str(d) for d in jax.devices()],
        **{p: md.version(p) for p in packages},
    )


def measure_and_emit(result: dict, measure, packages=()) -> None:
    """Import JAX with its persistent compilation cache off (so every compile is
    measured), add to ``result`` what ``measure(jax)`` returns, the machine and its load,
    and hand it to the parent. An exception becomes ``result["error"]`` (traceback on
    stderr), so that the table names the failure instead of the benchmark stopping."""
    os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    try:
        import jax

        jax.config.update("jax_enable_compilation_cache", False)
        result["machine"] = machine_info(jax, packages)
        result["loadavg_before"] = os.getloadavg()[0]
        result.update(measure(jax))
        result["probe_ms"] = speed_probe(jax)
    except Exception as error:
        traceback.print_exc()
        result["error"] = f"{type(error).__name__}: {error}".strip()[:500]
    print(RESULT_TAG + json.dumps(result, default=str), flush=True)


def time_compiled(jax, fn, args, runs: int):
    """Compile ``jax.jit(fn)`` for ``args`` and run the compiled function ``runs`` times
    until ``block_until_ready`` (``run_times``), noting the cores' worth of CPU other
    processes used during each run (``other_cpu``), since a shared machine slows runs
    down. ``compile_s`` is tracing, lowering and XLA's compile together; ``trace_s``,
    ``lower_s`` and ``xla_s`` are the three stages (``jax.stages``), and ``hlo_ops`` the
    operations in the lowered program (StableHLO), its size. ``runs=0`` only compiles.
    Returns that dict and the last run's output (None without runs)."""
    phase("compiling")
    start = time.perf_counter()
    traced = jax.jit(fn).trace(*args)
    traced_at = time.perf_counter()
    lowered = traced.lower()
    lowered_at = time.perf_counter()
    compiled = lowered.compile()
    compiled_at = time.perf_counter()
    compile_s = compiled_at - start
    stages = dict(trace_s=traced_at - start, lower_s=lowered_at - traced_at, xla_s=compiled_at - lowered_at)
    stages["hlo_ops"] = lowered.as_text().count("stablehlo.")
    run_times, others, out = [], [], None
    for run in range(runs):
        del out  # free the previous run's output before the next
        phase(f"run {run + 1} of {runs} (compiled in {compile_s:.1f} s)")
        before = _cpu_snapshot()
        start = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        run_times.append(time.perf_counter() - start)
        others.append(_other_cpu(before, _cpu_snapshot()))
    phase("collecting results")
    return dict(compile_s=compile_s, run_times=run_times, other_cpu=others, **stages), out


def speed_probe(jax, steps: int = 1000, repeats: int = 3) -> float:
    """Milliseconds this machine takes right now for a fixed workload: ``steps`` SGD
    steps of a 4-64-64-1 tanh MLP on a batch of 128 in one compiled loop, the fastest of
    ``repeats``. A shared or throttled machine's speed drifts, so tables print it beside
    each measurement: compare two runs' times only where their probes agree."""
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.key(0), 4)
    shapes = [(4, 64), (64, 64), (64, 1)]
    params = [jax.random.normal(k, s) / s[0] ** 0.5 for k, s in zip(keys, shapes, strict=False)]
    x = jax.random.normal(keys[3], (128, 4))
    y = jnp.sin(x.sum(axis=1, keepdims=True))

    def loss(params):
        h = x
        for w in params[:-1]:
            h = jnp.tanh(h @ w)
        return jnp.mean(jnp.square(h @ params[-1] - y))

    def sgd_step(_, params):
        return [w - 0.01 * g for w, g in zip(params, jax.grad(loss)(params), strict=True)]

    run = jax.jit(lambda params: jax.lax.fori_loop(0, steps, sgd_step, params))
    jax.block_until_ready(run(params))  # compile
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(run(params))
        best = min(best, time.perf_counter() - start)
    return 1000 * best


def _cpu_snapshot():
    """(wall s, CPU s used by the whole machine, CPU s used by this process); the machine's
    is None where /proc/stat is missing (not Linux)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:9]]
        machine = (sum(fields[:3]) + sum(fields[5:8])) / os.sysconf("SC_CLK_TCK")  # all but idle, iowait
    except (OSError, ValueError):
        machine = None
    return time.monotonic(), machine, time.process_time()


def _other_cpu(before, after):
    """Cores' worth of CPU used by OTHER processes between two snapshots (None if unknown)."""
    if before[1] is None or after[1] is None or after[0] <= before[0]:
        return None
    return max(0.0, ((after[1] - before[1]) - (after[2] - before[2])) / (after[0] - before[0]))


# ============================================================================ parent side


def add_common_arguments(parser, one, runs=True, timeout=3600, stall_timeout=180) -> None:
    """The options every child-measuring benchmark has: --runs and --seed (unless
    ``runs`` is false), --timeout, --stall-timeout, --markdown, --verbose, and the hidden
    --one (metavars ``one``) that makes the script a child measuring one case."""
    import argparse

    if runs:
        parser.add_argument(
            "--runs",
            type=int,
            default=None,
            help="timed runs of each compiled function; the fastest is reported (default: 2, --quick: 1)",
        )
        parser.add_argument("--seed", type=int, default=0, help="base PRNG seed (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=timeout, help="seconds per measurement (default: %(default)s)")
    parser.add_argument(
        "--stall-timeout",
        type=float,
        default=stall_timeout,
        help="kill a measurement whose process uses no CPU for this many seconds, i.e. is hung "
        "(Linux only; default: %(default)s)",
    )
    parser.add_argument("--markdown", metavar="MD", help="also write the table and notes as Markdown")
    parser.add_argument("--verbose", action="store_true", help="show a failed measurement's traceback")
    parser.add_argument("--one", nargs=len(one), metavar=one, help=argparse.SUPPRESS)


def peer_missing(peer: str, no_peers: bool) -> str | None:
    """Why the peer library ``peer`` is not measured (--no-peers, not installed), or None."""
    import importlib.util

    if no_peers:
        return f"{peer}: not run (--no-peers)"
    if importlib.util.find_spec(peer) is None:
        return f"{peer}: not installed (pip install {peer}), peer comparison skipped"
    return None


def run_child(
    cmd: list[str], timeout: float, stall_timeout: float, verbose: bool = False, env_overrides: dict | None = None
) -> dict:
    """Run ``cmd`` and return the result it emitted, or ``{"error": ...}`` if it timed out,
    used no CPU for ``stall_timeout`` seconds (a hang), or exited without a result. The
    persistent compilation cache is off unless ``env_overrides`` switches it on."""
    env = dict(os.environ, JAX_ENABLE_COMPILATION_CACHE="false")
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env.update(env_overrides or {})
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    start = last_progress = time.monotonic()
    last_cpu, killed = -1.0, None
    while True:
        try:
            stdout, stderr = proc.communicate(timeout=2)
            break
        except subprocess.TimeoutExpired:
            now, cpu = time.monotonic(), _process_cpu_seconds(proc.pid)
            if cpu is not None and cpu > last_cpu + 1.0:
                last_cpu, last_progress = cpu, now
            if now - start > timeout:
                killed = f"timed out after {timeout:.0f} s"
            elif cpu is not None and now - last_progress > stall_timeout:
                killed = (
                    f"hung: no CPU use for {now - last_progress:.0f} s (--stall-timeout), "
                    f"{cpu:.0f} s CPU in {now - start:.0f} s"
                )
            if killed:
                proc.kill()
                stdout, stderr = proc.communicate()
                break
    phases = [line[len(PHASE_TAG) :] for line in stderr.splitlines() if line.startswith(PHASE_TAG)]
    stderr = "\n".join(line for line in stderr.splitlines() if not line.startswith(PHASE_TAG))
    last_phase = phases[-1] if phases else "start-up"
    if verbose and (killed or proc.returncode):
        sys.stderr.write(stderr + "\n")
    if killed:
        return {"error": f"{killed}; killed during: {last_phase}"}
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG) :])
    tail = " | ".join(stderr.strip().splitlines()[-3:])
    return {"error": f"exited {proc.returncode} without a result during {last_phase}: {tail}"[:500]}


def _process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a running process (Linux /proc), or None if unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def measure_in_child(script: str, key: dict, args, options=()) -> dict:
    """Run ``script --one <key's values>`` in a fresh process (``run_child`` with ``args``'
    --timeout, --stall-timeout and --verbose) and return its result, which always holds
    ``key`` so that the table can name a failure. ``options``: ``args`` attributes passed
    on, a true flag as ``--name``, any other value as ``--name value`` (None and False are
    left out)."""
    cmd = [sys.executable, os.path.abspath(script), "--one", *map(str, key.values())]
    for name in options:
        value = getattr(args, name)
        if value is not None and value is not False:
            cmd += ["--" + name.replace("_", "-")] + ([] if value is True else [str(value)])
    return {**key, **run_child(cmd, args.timeout, args.stall_timeout, args.verbose)}


def measure_plan(plan, measure, label) -> list[dict]:
    """``measure(item)`` for each item of ``plan``, one after another (they time
    themselves, so never two at once), with progress on stderr."""
    results = []
    for n, item in enumerate(plan, 1):
        print(f"[{n}/{len(plan)}] {label(item)} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        result = measure(item)
        results.append(result)
        status = result.get("error") or (
            f"compile {result['compile_s']:.1f} s, runs " + ", ".join(f"{t:.2f} s" for t in result["run_times"])
            if "run_times" in result
            else "done"
        )
        print(f"    {status} (wall {time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
    return results


def derive_timing(results) -> None:
    """Per successful result: ``run_s``, its fastest run (on a shared machine the best
    estimate of the steady-state time), and ``steps_per_s`` = seeds * steps per seed / run_s."""
    for r in results:
        if "error" not in r:
            r["run_s"] = min(r["run_times"])
            r["steps_per_s"] = r.get("seeds", 1) * r["steps_per_seed"] / r["run_s"]


# ============================================================================ reporting


def fmt(x, spec: str) -> str:
    """``format(x, spec)``, or "-" for None / NaN."""
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def text_table(headers, rows, left=(0,)) -> str:
    """A plain-text table; columns whose index is in ``left`` are left-aligned."""
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(
            c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(row) for row in rows])


def markdown_table(headers, rows) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    return "\n".join(out + ["| " + " | ".join(row) + " |" for row in rows])


def machine_lines(results) -> list[str]:
    """The command, the machine, the software and the machine's load and speed, from what
    the measurements recorded (``measure_and_emit``)."""
    info = {}
    for r in results:
        info.update(r.get("machine", {}))  # the peers' children add their versions
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = "?"
    loads = [r["loadavg_before"] for r in results if r.get("loadavg_before") is not None]
    probes = [r["probe_ms"] for r in results if r.get("probe_ms")]
    versions = ", ".join(f"{k} {v}" for k, v in info.items() if k not in ("backend", "devices"))
    lines = [
        f"command: {shlex.join(['python', *sys.argv])}",
        f"python {platform.python_version()}, {platform.platform()}, {os.cpu_count()} CPUs ({usable} usable); "
        f"load average (1 min) before each measurement: {', '.join(f'{v:.2f}' for v in loads) or '-'}",
        f"{versions or 'versions unknown'}; backend {info.get('backend', '?')}, devices {info.get('devices', '?')}",
    ]
    if probes:
        lines.append(
            "machine speed probe after each measurement (ms for a fixed small MLP training loop; lower is "
            f"faster; compare times only where these agree): {', '.join(f'{p:.0f}' for p in probes)}"
        )
    others = [c for r in results for c in r.get("other_cpu", []) if c is not None]
    if others and max(others) > 0.2:
        lines.append(
            f"WARNING: other processes used up to {max(others):.2f} CPUs during a timed run: those times "
            "are inflated and noisy; rerun on a quiet machine."
        )
    return lines


def report(title: str, headers, rows, notes, results, markdown: str | None = None, left=(0,)) -> None:
    """Print ``title``, the table, ``notes`` and the machine's lines; with ``markdown``,
    write the same there (the raw ``results`` as JSON at the end, after "Raw results:",
    which ``run_all.py`` leaves out of RESULTS.md)."""
    lines = list(notes) + machine_lines(results)
    print(f"\n{title}\n\n{text_table(headers, rows, left)}\n")
    print("\n".join(lines))
    if markdown:
        text = [f"### {title}", "", markdown_table(headers, rows), ""] + [f"- {line}" for line in lines]
        text += ["", "Raw results:", "", "```json", json.dumps(results, indent=1, default=str), "```", ""]
        with open(markdown, "w") as f:
            f.write("\n".join(text))
        print(f"\nwrote {markdown}")
