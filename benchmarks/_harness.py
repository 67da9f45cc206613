"""What the benchmark scripts share: each measurement runs in a fresh Python process
(no compilation cache, nothing warm from an earlier measurement), watched by the parent
for time-outs and hangs. The child names its current phase on stderr (so a hang says
where it happened) and prints its result as one tagged JSON line on stdout. Also the
child-side timing helpers and the parent-side table helpers the scripts share."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback

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


def run_child(cmd: list[str], timeout: float, stall_timeout: float, verbose: bool = False,
              env_overrides: dict | None = None) -> dict:
    """Parent side: run ``cmd`` and return the result it emitted, or ``{"error": ...}``
    if it timed out, stopped using CPU for ``stall_timeout`` seconds (a hang), or exited
    without a result. The child's persistent compilation cache is off unless
    ``env_overrides`` (extra environment variables) switches it on."""
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


# ============================================================================ options


def add_common_arguments(parser, one, runs=True, quick=True, timeout=3600, stall_timeout=180):
    """The options the benchmark scripts share: --runs (timed runs of the compiled
    function; default 2, with ``quick`` 1 under --quick: see ``parse_arguments``) and
    --seed, unless ``runs`` is false; --timeout, --stall-timeout, --markdown, --verbose;
    and the hidden --one (metavars ``one``) that makes the script a child measuring one case."""
    if runs:
        parser.add_argument("--runs", type=int, default=None,
                            help="timed runs of the compiled function per measurement; the fastest is "
                                 f"reported (default: 2{', --quick: 1' if quick else ''})")
        parser.add_argument("--seed", type=int, default=0, help="base PRNG seed (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=timeout, help="seconds per measurement (default: %(default)s)")
    parser.add_argument("--stall-timeout", type=float, default=stall_timeout,
                        help="kill a measurement whose process uses no CPU for this many seconds, "
                             "i.e. is hung (Linux only; default: %(default)s)")
    parser.add_argument("--markdown", metavar="MD", help="also write the table(s) (and raw results) as Markdown")
    parser.add_argument("--verbose", action="store_true", help="show a failed measurement's traceback")
    parser.add_argument("--one", nargs=len(one), metavar=one, help=argparse.SUPPRESS)


def add_peer_arguments(parser, peer):
    """--no-peers and --peer-with-jaxrl-settings, for the peer library ``peer``."""
    parser.add_argument("--no-peers", action="store_true", help=f"measure jaxrl only, even if {peer} is installed")
    parser.add_argument("--peer-with-jaxrl-settings", action="store_true",
                        help=f"run {peer} under the XLA settings jaxrl applies on import (jaxrl/_xla.py) "
                             "instead of JAX's defaults")


def parse_arguments(parser, argv):
    """``parser.parse_args(argv)``, then --runs' default (1 with --quick, else 2) and check."""
    args = parser.parse_args(argv)
    if args.runs is None:
        args.runs = 1 if getattr(args, "quick", False) else 2
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    return args


# ============================================================================ child side


def measure_and_emit(result, measure, jaxrl_settings, packages=()):
    """Child side: set up JAX (under jaxrl's XLA settings, jaxrl/_xla.py, if
    ``jaxrl_settings``), record the machine (and the versions of ``packages``) and the load
    average, add what ``measure(jax)`` returns to ``result`` and emit it. An exception is
    reported as ``result["error"]`` (traceback on stderr), not raised."""
    try:
        if jaxrl_settings:
            from jaxrl._xla import configure

            configure()  # before JAX starts its backend
        jax = setup_jax()
        import importlib.metadata as md

        result["machine"] = dict(
            jax=jax.__version__, jaxlib=md.version("jaxlib"), backend=jax.default_backend(),
            devices=[str(d) for d in jax.devices()], compilation_cache=bool(jax.config.jax_enable_compilation_cache),
            xla_flags=os.environ.get("XLA_FLAGS", ""), **{p: md.version(p) for p in packages},
        )
        result["loadavg_before"] = os.getloadavg()
        result.update(measure(jax))
        result["loadavg_after"] = os.getloadavg()
        result["probe_ms"] = speed_probe(jax)
    except Exception as error:  # reported in the table, not raised
        traceback.print_exc()
        result["error"] = f"{type(error).__name__}: {error}".strip()[:500]
    emit(result)


def speed_probe(jax, steps: int = 1000, repeats: int = 3) -> float:
    """Milliseconds this machine takes for a fixed workload, right now: ``steps`` SGD
    steps of a 4-64-64-1 tanh MLP on a batch of 128 in one compiled loop (the fastest of
    ``repeats`` runs). This machine's speed drifts by up to 2x within an hour with no
    other process running, so tables print it beside each measurement: compare two
    runs' times only where their probes agree."""
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.key(0), 4)
    params = [jax.random.normal(k, shape) / shape[0] ** 0.5 for k, shape in zip(keys, [(4, 64), (64, 64), (64, 1)])]
    x = jax.random.normal(keys[3], (128, 4))
    y = jnp.sin(x.sum(axis=1, keepdims=True))

    def loss(params):
        h = x
        for w in params[:-1]:
            h = jnp.tanh(h @ w)
        return jnp.mean(jnp.square(h @ params[-1] - y))

    def sgd_step(_, params):
        return [w - 0.01 * g for w, g in zip(params, jax.grad(loss)(params))]

    run = jax.jit(lambda params: jax.lax.fori_loop(0, steps, sgd_step, params))
    jax.block_until_ready(run(params))  # compile
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(run(params))
        best = min(best, time.perf_counter() - start)
    return 1000 * best


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


def tiny_sgd(jax, params, grads):
    """``params - 1e-6 * grads``: the update of a floor program (network passes only), so
    that each step depends on the last and XLA cannot hoist any out of the loop."""
    return jax.tree.map(lambda p, g: p - 1e-6 * g, params, grads)


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


def rejax_returns(ts, returns, evals):
    """final_eval_return (mean over seeds of the last evaluation's returns), final_train_return
    (of the last finished training episodes, from the ``rejax_env`` LogWrapper's state) and
    evals_done of a vmapped rejax run: ``ts`` its final train state, ``returns`` its
    evaluations' returns, ``evals`` the evaluations asked for."""
    import numpy as np

    log_state = ts.env_state  # LogEnvState [seeds, num_envs]
    valid = np.asarray(log_state.returned_episode_valid)
    last_returns = np.where(valid, np.asarray(log_state.returned_episode_returns, np.float64), np.nan)
    return dict(
        final_eval_return=float(np.mean(np.asarray(returns)[:, -1])) if evals else float("nan"),
        final_train_return=nanmean(np.nanmean(last_returns, axis=-1)) if np.isfinite(last_returns).any()
        else float("nan"),
        evals_done=int(np.asarray(returns).shape[1]) if evals else 0,
    )


# ============================================================================ parent side


def peer_missing(peer, no_peers):
    """Why the peer library ``peer`` is not measured (--no-peers, not installed), or None."""
    if no_peers:
        return f"{peer}: not run (--no-peers)"
    if importlib.util.find_spec(peer) is None:
        return f"{peer}: not installed (pip install {peer}), peer comparison skipped"
    return None


def measure_in_child(script, key, args, options=()):
    """Run ``script --one <key's values>`` in a fresh process (``run_child`` with ``args``'
    --timeout, --stall-timeout, --verbose) and return its result; a failed one gets ``key``,
    so the tables can name it. ``options``: ``args`` attributes passed on, a true flag as
    ``--name``, any other value as ``--name value``; None and False are left out."""
    cmd = [sys.executable, os.path.abspath(script), "--one", *map(str, key.values())]
    for name in options:
        value = getattr(args, name)
        if value is not None and value is not False:
            cmd += ["--" + name.replace("_", "-")] + ([] if value is True else [str(value)])
    result = run_child(cmd, args.timeout, args.stall_timeout, args.verbose)
    return {**key, **result} if "error" in result else result


def derive_timing(results):
    """Per successful result: run_s (the fastest run), total_compile_s (lower + compile) and
    steps_per_s (seeds * steps_per_seed / run_s; None where no env steps are taken)."""
    for r in results:
        if "error" not in r:
            r["run_s"] = min(r["run_times"])
            r["total_compile_s"] = r["lower_s"] + r["compile_s"]
            r["steps_per_s"] = r["seeds"] * r["steps_per_seed"] / r["run_s"] if r["steps_per_seed"] else None


def peer_ratios(results, same=("seeds",), libraries=("jaxrl",)):
    """X / rejax ratio_steps and ratio_compile for each successful result of a library in
    ``libraries`` whose rejax result (equal in the fields ``same``) succeeded too."""
    by_key = {(r["library"], *(r[f] for f in same)): r for r in results}
    for r in results:
        peer = by_key.get(("rejax", *(r[f] for f in same)))
        if r["library"] in libraries and peer and "error" not in peer and "error" not in r:
            r["ratio_steps"] = r["steps_per_s"] / peer["steps_per_s"]
            r["ratio_compile"] = r["total_compile_s"] / peer["total_compile_s"]


def timing_status(result):
    """The progress line's summary of a successful timed result."""
    return (f"compile {result['lower_s'] + result['compile_s']:.1f}s, runs "
            + ", ".join(f"{t:.2f}s" for t in result["run_times"])
            + " (other CPU load " + ", ".join(fmt(c, ".2f") for c in result["other_cpu"]) + ")"
            + f", final eval return {fmt(result['final_eval_return'], '.1f')}")


def other_cpu_warning(results):
    """A warning line if other processes used the CPU during a timed run, else none."""
    others = [c for r in results for c in r.get("other_cpu", []) if c is not None]
    if not others or max(others) <= 0.2:
        return []
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return [f"WARNING: other processes used up to {max(others):.2f} of the {usable} usable CPUs during "
            "a timed run (column 'other CPU load'): those run times are inflated and noisy; compare "
            "the fastest runs, or rerun on a quiet machine."]


def settings_lines(results, label):
    """One "<label(result)> settings: name=value, ..." line per label, from the results' settings."""
    lines = {}
    for r in results:
        if "settings" in r:
            lines.setdefault(label(r), f"{label(r)} settings: "
                             + ", ".join(f"{k}={v}" for k, v in r["settings"].items()))
    return list(lines.values())


def write_markdown(path, lines, results):
    """Write ``lines`` and the raw ``results`` (JSON) to ``path`` as Markdown."""
    lines = lines + ["", "Raw results:", "", "```json", json.dumps(results, indent=1, default=str), "```", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))
    print(f"\nwrote {path}")


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


def machine_lines(results, command, other_cpu=True):
    """Lines describing the machine, the software and how the measurements were taken,
    from the ``machine`` / ``loadavg_before`` / ``run_times`` entries of child results;
    ``other_cpu``: the table has the "other CPU load" column."""
    info = next((r["machine"] for r in results if "machine" in r), {})
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = "?"
    loads = [r.get("loadavg_before") for r in results if r.get("loadavg_before")]
    probes = [r["probe_ms"] for r in results if r.get("probe_ms")]
    return [
        f"command: {command}",
        f"python {platform.python_version()} ({sys.executable}), {platform.platform()}, "
        f"{platform.processor() or platform.machine()}",
        f"cpu count: {os.cpu_count()} (usable: {affinity}); load average (1 min) before each "
        f"measurement: {', '.join(f'{l[0]:.2f}' for l in loads) or '-'}",
        "machine speed probe after each measurement (ms for a fixed small MLP training loop, "
        f"harness.speed_probe; lower = faster; times are comparable where these agree): "
        f"{', '.join(f'{p:.0f}' for p in probes) or '-'}",
        f"jax {info.get('jax', '?')}, jaxlib {info.get('jaxlib', '?')}, backend {info.get('backend', '?')}, "
        f"devices {info.get('devices', '?')}, gymnax {info.get('gymnax', '?')}, "
        f"rejax {next((r['machine']['rejax'] for r in results if 'rejax' in r.get('machine', {})), '-')}",
        "each measurement in a fresh subprocess, persistent compilation cache off; "
        "compile s = lower + compile; run s = the fastest of "
        f"{len(next((r['run_times'] for r in results if 'run_times' in r), [])) or '?'} runs of the compiled "
        "function, all listed in order ("
        + ("on a shared machine the fastest is the better estimate); steps/s = seeds * steps/seed / run s; "
           "other CPU load = cores' worth of CPU used by OTHER processes during each run (from /proc/stat "
           "minus the measuring process; 0 = quiet machine)" if other_cpu else
           "the first includes no compilation; on a shared machine the fastest is the better estimate); "
           "steps/s = seeds * steps/seed / run s"),
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
