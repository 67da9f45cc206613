"""What the benchmark scripts share: each measurement runs in a fresh Python process
(no compilation cache, nothing warm from an earlier measurement), watched by the parent
for time-outs and hangs. The child names its current phase on stderr (so a hang says
where it happened) and prints its result as one tagged JSON line on stdout."""

from __future__ import annotations

import json
import os
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
