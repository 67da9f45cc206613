"""Where the test suite's time goes: JAX's trace, lowering and XLA compile time per test.

A pytest plugin, and a report over what it wrote. Run the suite with it (any pytest
arguments; each xdist worker writes one JSON file), then summarise::

    PYTHONPATH=benchmarks/investigations SUITE_PROFILE_DIR=/tmp/suite-profile \
        python -m pytest -q -n 2 --dist worksteal -p suite_profile --durations=0 > /tmp/durations.txt
    python benchmarks/investigations/suite_profile.py /tmp/suite-profile /tmp/durations.txt

The report gives the suite's worker-seconds (from ``--durations=0``) split into tracing,
lowering, XLA's backend compile and the rest (running, subprocesses, Python), then each
file and its longest tests. With ``SUITE_PROFILE_HASH=1`` the plugin also fingerprints each
compiled module (through JAX's private ``jax._src`` compiler hook: an investigation aid,
never library code) and the report counts the compile time spent on modules another test
had compiled already, which is what a cache shared across tests could save.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import re
import sys
import time

import pytest

_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
}
_current = ["<between tests>"]
_times: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
_modules: list[tuple[str, str, float]] = []  # (test, fingerprint, seconds)


def _listener(event, duration, **_):
    if event in _EVENTS:
        _times[_current[0]][_EVENTS[event]] += duration


def _fingerprint_compiles():
    import hashlib

    from jax._src import compiler
    from jax._src.interpreters import mlir

    original = compiler.compile_or_get_cached

    def compile_or_get_cached(backend, computation, *args, **kwargs):
        digest = hashlib.sha1(mlir.module_to_bytecode(computation)).hexdigest()
        start = time.perf_counter()
        out = original(backend, computation, *args, **kwargs)
        _modules.append((_current[0], digest, time.perf_counter() - start))
        return out

    compiler.compile_or_get_cached = compile_or_get_cached


def pytest_configure(config):
    import jax

    jax.monitoring.register_event_duration_secs_listener(_listener)
    if os.environ.get("SUITE_PROFILE_HASH") == "1":
        _fingerprint_compiles()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current[0] = item.nodeid
    yield
    _current[0] = "<between tests>"


def pytest_unconfigure(config):
    directory = os.environ.get("SUITE_PROFILE_DIR", "suite-profile")
    os.makedirs(directory, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(directory, f"{worker}-{os.getpid()}.json"), "w") as f:
        json.dump({"times": _times, "modules": _modules}, f)


def report(directory: str, durations: str, longest: int = 5) -> None:
    times: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    modules = []
    for path in glob.glob(os.path.join(directory, "*.json")):
        with open(path) as f:
            data = json.load(f)
        for test, parts in data["times"].items():
            times[test].update(parts)
        modules += data["modules"]
    total = collections.Counter()
    with open(durations) as f:
        for line in f:
            match = re.match(r"([\d.]+)s (?:setup|call|teardown)\s+(\S+)", line)
            if match:
                total[match.group(2)] += float(match.group(1))
    parts = {name: sum(t[name] for t in times.values()) for name in ("trace", "lower", "compile")}
    whole = sum(total.values())
    print(f"worker-seconds {whole:.0f}: " + ", ".join(f"{k} {v:.0f}" for k, v in parts.items()), end="")
    print(f", rest {whole - sum(parts.values()):.0f}")
    if modules:
        first, again = {}, 0.0
        for test, digest, seconds in modules:
            if digest in first and first[digest] != test:
                again += seconds
            first.setdefault(digest, test)
        compiled = sum(m[2] for m in modules)
        print(f"modules compiled {len(modules)}, {compiled:.0f} s; compiled again in a later test {again:.0f} s")
    by_file = collections.defaultdict(list)
    for test, seconds in total.items():
        by_file[test.split("::")[0]].append((seconds, test))
    for file, tests in sorted(by_file.items(), key=lambda kv: -sum(s for s, _ in kv[1])):
        compile_time = sum(times[t]["compile"] for _, t in tests)
        print(f"{sum(s for s, _ in tests):7.0f} s  compile {compile_time:5.0f}  {file}")
        for seconds, test in sorted(tests, reverse=True)[:longest]:
            print(f"         {seconds:6.1f}  compile {times[test]['compile']:5.1f}  {test.split('::', 1)[1]}")


if __name__ == "__main__":
    report(*sys.argv[1:3])
