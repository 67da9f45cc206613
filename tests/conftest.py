import os
import pathlib
import re
import subprocess
import sys

import jax
import pytest
from jax.experimental.compilation_cache import compilation_cache


def pytest_collection_modifyitems(items):
    """A learning test (``learns``) is slow. Run the slow tests first (stable order
    otherwise): with ``-n 2 --dist worksteal`` the two workers start on the long tests and
    the short ones fill the gaps, instead of one worker finishing alone on a learning test."""
    for item in items:
        if item.get_closest_marker("learns") is not None:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def _compile_optimised(optimised: bool) -> None:
    """XLA's default optimisation level, or LLVM at -O0 (``jax_disable_most_optimizations``),
    for this process's compiles and those of the processes it starts."""
    if optimised:
        os.environ.pop("JAX_DISABLE_MOST_OPTIMIZATIONS", None)
    else:
        os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1"
    jax.config.update("jax_disable_most_optimizations", not optimised)


ELEMENTAL_EMITTERS = "--xla_cpu_use_fusion_emitters=false"


def _compile_with_elemental_emitters() -> None:
    """XLA:CPU's elemental IR emitters instead of its fusion emitters, for this process
    and those it starts: another code generator for the same kernels, which compiles the
    suite's small programs faster (benchmarks/RESULTS.md). Two computations of one float
    (in two programs, or twice in one) may then round apart, so tests compare those to
    rounding; one program run twice (a resumed run and its straight twin) stays exact.
    Only where this jaxlib knows the flag (an unknown one aborts the process)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if ELEMENTAL_EMITTERS in flags:
        return  # set by the process that started this one
    flags = f"{flags} {ELEMENTAL_EMITTERS}".strip()
    probe = [sys.executable, "-c", "import jax; jax.devices()"]
    if subprocess.run(probe, env={**os.environ, "XLA_FLAGS": flags}, capture_output=True).returncode == 0:
        os.environ["XLA_FLAGS"] = flags


def pytest_configure(config):
    """Tests compile with LLVM at -O0 and XLA:CPU's elemental emitters, since compiling is
    most of a test's time and both change how XLA:CPU generates its kernels, not what they
    compute. Tests marked ``optimised``, whose runs outweigh their compiles (most learning
    tests, convolutions), compile at XLA's default optimisation level
    (``pytest_runtest_protocol``; the times: benchmarks/RESULTS.md, "The test suite at LLVM
    -O0" and the sections after it)."""
    _compile_with_elemental_emitters()
    _compile_optimised(False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """An ``optimised`` test's setup, call and teardown compile optimised: the module
    fixture it trains in, set up for it, too."""
    optimised = item.get_closest_marker("optimised") is not None
    if optimised:
        _compile_optimised(True)
    try:
        yield
    finally:
        if optimised:
            _compile_optimised(False)


@pytest.fixture(scope="session", autouse=True)
def _private_compilation_cache_dir(tmp_path_factory):
    """A CLI test without ``--no-cache`` caches into a directory of this worker's own,
    never the user's ``~/.cache/jaxrl`` shared with the other worker."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JAXRL_CACHE_DIR", str(tmp_path_factory.mktemp("xla-cache")))
        yield


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_programs():
    """XLA:CPU maps memory for each compiled kernel until JAX drops the executable, so a
    worker that keeps every program of a thousand tests reaches the kernel's
    ``vm.max_map_count`` (65530 maps); its next compile then fails to map memory and
    XLA:CPU crashes (benchmarks/investigations/xla_compile_crash_stacks.md). Each test
    module's programs are dropped when it ends."""
    yield
    jax.clear_caches()


@pytest.fixture(autouse=True)
def _restore_compilation_cache_dir():
    """``python -m jaxrl train`` turns JAX's persistent cache on for its process; a test
    that calls the CLI in-process must not leave it on for the tests after it. JAX keeps
    using a cache it has opened whatever the setting says later, so it is reset too."""
    before = jax.config.jax_compilation_cache_dir, jax.config.jax_compilation_cache_max_size
    yield
    if (jax.config.jax_compilation_cache_dir, jax.config.jax_compilation_cache_max_size) != before:
        jax.config.update("jax_compilation_cache_dir", before[0])
        jax.config.update("jax_compilation_cache_max_size", before[1])  # the CLI bounds it
        compilation_cache.reset_cache()


# ----------------------------------------------------------------------------- no silent skips

# Import names of the test extra's packages that differ from the package's name.
IMPORT_NAMES = {"orbax-checkpoint": "orbax", "pytest-xdist": "xdist", "tensorboardx": "tensorboardX"}
MISSING = re.compile(r"could not import '([^']+)'")


def _test_extra_modules() -> set:
    """Top-level import names of the ``test`` extra's packages that apply here (their
    environment markers hold)."""
    import tomllib
    from packaging.requirements import Requirement

    pyproject = tomllib.loads((pathlib.Path(__file__).parent.parent / "pyproject.toml").read_text())
    modules = set()
    for text in pyproject["project"]["optional-dependencies"]["test"]:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate():
            name = requirement.name.lower()
            modules.add(IMPORT_NAMES.get(name, name.replace("-", "_")))
    return modules


def _fail_if_the_test_extra_is_broken(report) -> None:
    """Under ``CI=true``, a skip because a package of the ``test`` extra does not import
    (``pytest.importorskip``) is a failure: a broken install must not pass as a green run."""
    if not (report.skipped and os.environ.get("CI") == "true" and isinstance(report.longrepr, tuple)):
        return
    found = MISSING.search(str(report.longrepr[2]))
    if found and found.group(1).partition(".")[0] in _test_extra_modules():
        report.outcome = "failed"
        report.longrepr = f"{report.longrepr[2]}: the test extra installs it, and under CI=true it must import"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_if_the_test_extra_is_broken(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_if_the_test_extra_is_broken(outcome.get_result())  # a module-level importorskip
