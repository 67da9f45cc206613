"""What the benchmark scripts share: each measurement runs in a fresh Python process
(no compilation cache, nothing warm from an earlier measurement), watched by the parent
for time-outs and hangs. The child names its current phase on stderr (so a hang says
where it happened) and prints its result as one tagged JSON line on stdout. Also the
child-side timing helpers and the parent-side table helpers the scripts share."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time

RESULT_TAG = "@@JAXRL_BENCH_RESULT@@"
PHASE_TAG = "@@JAXRL_BENCH_PHASE@@ "


def phase(text: str) -> None:
    """Child side: tell the parent what the child is doing now."""
    print(PHASE_TAG + text, file=sys.stderr, flush=True)


def emit(result: dict) -> None:
    """Child side: hand the result to the parent."""
    print(RESULT_TAG + json.dumps(result, default=str), flush=True)


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a running process (Linux /proc), or None if unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def run_child(cmd: list[str], timeout: float, stall_timeout: float, verbose: bool = False) -> dict:
    """Parent side: run ``cmd`` and return the result it emitted, or ``{"error": ...}``
    if it timed out, stopped using CPU for ``stall_timeout`` seconds (a hang), or exited
    without a result."""
    env = dict(os.environ, JAX_ENABLE_COMPILATION_CACHE="false")
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    start = last_progress = time.monotonic()
    last_cpu, killed = -1.0, None
    while True:
        try:
            stdout, stderr = proc.communicate(timeout=2)
            break
        except subprocess.TimeoutExpired:
            now, cpu = time.monotonic(), cpu_seconds(proc.pid)
            if cpu is not None and cpu > last_cpu + 1.0:
                last_cpu, last_progress = cpu, now
            if now - start > timeout:
                killed = f"timed out after {timeout:.0f} s"
            elif cpu is not None and now - last_progress > stall_timeout:
                killed = (f"hung: no CPU use for {now - last_progress:.0f} s (--stall-timeout), "
                          f"{cpu:.0f} s CPU in {now - start:.0f} s")
            if killed:
                proc.kill()
                stdout, stderr = proc.communicate()
                break
    phases = [line[len(PHASE_TAG):] for line in stderr.splitlines() if line.startswith(PHASE_TAG)]
    stderr = "\n".join(line for line in stderr.splitlines() if not line.startswith(PHASE_TAG))
    last_phase = phases[-1] if phases else "start-up"
    if verbose and (killed or proc.returncode):
        sys.stderr.write(stderr + "\n")
    if killed:
        return {"error": f"{killed}; killed during: {last_phase}"}
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG):])
    tail = " | ".join(stderr.strip().splitlines()[-3:])
    return {"error": f"exited {proc.returncode} without a result during {last_phase}: {tail}"[:500]}


# ============================================================================ child side
# Shared by dqn_throughput.py and offpolicy_throughput.py.


def setup_jax():
    """Import JAX with its persistent compilation cache off (every compile is measured)."""
    os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    return jax


def cpu_snapshot():
    """(wall s, CPU s used by the whole machine, CPU s used by this process), or None
    where unknown (Linux /proc/stat; other systems get None)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:9]]
        machine = (sum(fields[:3]) + sum(fields[5:8])) / os.sysconf("SC_CLK_TCK")  # all but idle, iowait
    except (OSError, ValueError):
        machine = None
    return time.monotonic(), machine, time.process_time()


def other_cpu(before, after):
    """Cores' worth of CPU used by OTHER processes between two snapshots (None if unknown)."""
    if before[1] is None or after[1] is None or after[0] <= before[0]:
        return None
    return max(0.0, ((after[1] - before[1]) - (after[2] - before[2])) / (after[0] - before[0]))


def time_compiled(jax, fn, args, runs):
    """Compile ``jax.jit(fn)`` for ``args`` and run it ``runs`` times. Returns (lower_s,
    compile_s, [run_s...], output of the last run, [other processes' CPU load during
    each run, in cores])."""
    phase("lowering")
    t0 = time.perf_counter()
    lowered = jax.jit(fn).lower(*args)
    t1 = time.perf_counter()
    phase("compiling")
    compiled = lowered.compile()
    t2 = time.perf_counter()
    run_times, others, out = [], [], None
    for run in range(runs):
        del out  # free the previous run's output before the next
        phase(f"run {run + 1} of {runs} (compiled in {t2 - t0:.1f} s; runs so far: "
              f"{', '.join(f'{t:.2f}' for t in run_times) or 'none'})")
        before = cpu_snapshot()
        start = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        run_times.append(time.perf_counter() - start)
        others.append(other_cpu(before, cpu_snapshot()))
    phase("collecting results")
    return t1 - t0, t2 - t1, run_times, out, others


def last_finite(x):
    """Last finite value along the last axis, per leading index (NaN if none)."""
    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    out = np.full(x.shape[:-1], np.nan)
    for index in np.ndindex(*x.shape[:-1]):
        finite = np.flatnonzero(np.isfinite(x[index]))
        if finite.size:
            out[index] = x[index][finite[-1]]
    return out


def nanmean(x):
    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    return float(np.nanmean(x)) if np.isfinite(x).any() else float("nan")


def rejax_env(env_id):
    """gymnax ``env_id`` as rejax 0.1.3 needs it: ``LegacyStepAPIWrapper`` (rejax expects
    gymnax's pre-1.0 five-value step) around ``LogWrapper`` (to read the last finished
    training episodes' returns). Returns (env, env_params)."""
    import gymnax
    from gymnax.wrappers import LegacyStepAPIWrapper, LogWrapper

    class Env(LegacyStepAPIWrapper):
        # rejax deep-copies its config (in create() and in its `config` property); the
        # gymnax wrappers' __getattr__ recurses forever on the half-built copy. Envs are
        # stateless, so sharing is a correct copy.
        def __deepcopy__(self, memo):
            return self

    base_env, env_params = gymnax.make(env_id)
    return Env(LogWrapper(base_env)), env_params


# ============================================================================ parent side


def fmt(x, spec):
    """``format(x, spec)``, or "-" for None / NaN."""
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def text_table(headers, rows, left=(0,)):
    """A plain-text table; columns whose index is in ``left`` are left-aligned."""
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.ljust(w) if i in left else c.rjust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(row) for row in rows])


def markdown_table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    return "\n".join(out + ["| " + " | ".join(row) + " |" for row in rows])


def machine_lines(results, command):
    """Lines describing the machine, the software and how the measurements were taken,
    from the ``machine`` / ``loadavg_before`` / ``run_times`` entries of child results."""
    info = next((r["machine"] for r in results if "machine" in r), {})
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = "?"
    loads = [r.get("loadavg_before") for r in results if r.get("loadavg_before")]
    return [
        f"command: {command}",
        f"python {platform.python_version()} ({sys.executable}), {platform.platform()}, "
        f"{platform.processor() or platform.machine()}",
        f"cpu count: {os.cpu_count()} (usable: {affinity}); load average (1 min) before each "
        f"measurement: {', '.join(f'{l[0]:.2f}' for l in loads) or '-'}",
        f"jax {info.get('jax', '?')}, jaxlib {info.get('jaxlib', '?')}, backend {info.get('backend', '?')}, "
        f"devices {info.get('devices', '?')}, gymnax {info.get('gymnax', '?')}, "
        f"rejax {next((r['machine']['rejax'] for r in results if 'rejax' in r.get('machine', {})), '-')}",
        "each measurement in a fresh subprocess, persistent compilation cache off; "
        "compile s = lower + compile; run s = the fastest of "
        f"{len(next((r['run_times'] for r in results if 'run_times' in r), [])) or '?'} runs of the compiled "
        "function, all listed in order (on a shared machine the fastest is the better estimate); "
        "steps/s = seeds * steps/seed / run s; other CPU load = cores' worth of CPU used by OTHER "
        "processes during each run (from /proc/stat minus the measuring process; 0 = quiet machine)",
    ]


def seed_list(text):
    """argparse type: "1,8" or "1 8" -> [1, 8]."""
    try:
        values = [int(v) for v in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"seed counts must be >= 1, got {text!r}")
    return values
