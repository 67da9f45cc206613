"""Runs that survive a cluster: SIGTERM and Ctrl-C stop a run after its chunk in flight
with a checkpoint, damaged checkpoints are skipped on resume, a save a full disk cuts
short leaves the earlier checkpoints whole, and damaged or shared compilation caches
never hand a process a broken executable. Whatever stops, the resumed run ends equal,
bit for bit, to the run that never stopped.

The command-line tests run ``python -m jaxrl`` in fresh processes, as a cluster does,
sharing one compilation cache (its own per test where the cache is what is tested)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from filelock import FileLock
from test_runner import leaves

from jaxrl.algorithms import ppo
from jaxrl.workflow import runner, saved, stopping
from jaxrl.workflow.checkpoint import CHECKSUMS, Checkpoints, DamagedCheckpoint
from jaxrl.workflow.options import RunOptions

pytestmark = pytest.mark.slow  # compiles or runs whole training programs: see pyproject.toml

# 32 iterations of 256 env steps in 8 chunks of 4, each checkpointed: a signal sent
# after the second checkpoint lands with six chunks and their saves still to run.
ITERATIONS = 32
TRAIN = ["train", "ppo", "--total-timesteps", "8192", "--set", "num_envs=8", "--set", "num_steps=32"]
TRAIN += ["--set", "hidden_sizes=32,32", "--chunks", "8", "--checkpoint-every", "1", "--no-progress"]
SWEEP = ["sweep", "ppo", "--total-timesteps", "8192", "--set", "num_envs=8", "--set", "num_steps=32"]
SWEEP += ["--set", "hidden_sizes=32,32", "--grid", "lr=3e-4,1e-3", "--chunks", "8", "--checkpoint-every", "1"]
COMMANDS = {"train": TRAIN, "sweep": SWEEP}
# JAX caches every program this module's processes compile, however quickly: what a
# process loads does not depend on how fast the machine compiles.
COMPILE = {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}


@pytest.fixture(scope="session")
def shared(tmp_path_factory):
    """A directory every xdist worker of this run sees, with a lock: what is made there
    is made once (pytest-xdist's recipe for fixtures run once per session)."""
    root = tmp_path_factory.getbasetemp()
    folder = (root.parent if "PYTEST_XDIST_WORKER" in os.environ else root) / "long_runs"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def cache_dir(shared):
    """One compilation cache for this module's processes: each program compiles once."""
    return shared / "cache"


def jaxrl_process(args, cache, **popen) -> subprocess.Popen:
    env = {**os.environ, **COMPILE, "JAXRL_CACHE_DIR": str(cache)}
    return subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


def patched_jaxrl(patch: str, args, cache, tmp_path) -> subprocess.Popen:
    """``python -m jaxrl args`` with ``patch`` (Python source) run first."""
    script = tmp_path / "patched_jaxrl.py"
    script.write_text(
        f"{textwrap.dedent(patch)}\nimport sys\nfrom jaxrl.workflow.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    )
    return jaxrl_process([str(script), *args], cache)


def read_until(process: subprocess.Popen, said: str) -> bool:
    """Read the process's stderr up to a line ``said``; False if it ended first."""
    while line := process.stderr.readline().decode():
        if line.strip() == said:
            return True
    return False


def finish(process: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    _, err = process.communicate(timeout=timeout)
    return process.returncode, err.decode()


def python_m_jaxrl(args, cache) -> str:
    """Run ``python -m jaxrl args`` to its end; its stderr."""
    status, err = finish(jaxrl_process(["-m", "jaxrl", *args], cache))
    assert status == 0, err[-3000:]
    return err


def without_event_loop_reports(err: str) -> str:
    """``err`` without the tracebacks of orbax's writer threads that outlive the process's
    event loop ("Event loop is closed", many lines each): what is left says what failed."""
    return re.sub(r"Traceback \(most recent call last\):\n(?:  .*\n)*?RuntimeError: Event loop is closed\n", "", err)


def checkpoint_steps(logdir) -> list[int]:
    """The finished (checksummed) checkpoints in ``logdir``."""
    folder = logdir / "checkpoints"
    names = os.listdir(folder) if folder.is_dir() else []
    return sorted(int(name) for name in names if name.isdigit() and (folder / name / CHECKSUMS).exists())


def wait_for_checkpoints(logdir, count: int, process: subprocess.Popen) -> list[int]:
    deadline = time.monotonic() + 600
    while len(steps := checkpoint_steps(logdir)) < count:
        assert process.poll() is None, process.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return steps


def assert_same_run(logdir, straight_dir):
    """Every logged row as written, and the final state, equal the straight run's."""
    assert (logdir / "metrics.csv").read_text() == (straight_dir / "metrics.csv").read_text()
    resumed, straight = saved.load(logdir), saved.load(straight_dir)
    assert resumed.step == straight.step
    for a, b in zip(leaves(resumed.state), leaves(straight.state), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.fixture(scope="module")
def straight(shared, cache_dir):
    """Each command run to its end without a signal: ``{kind: logdir}``."""
    runs = {kind: shared / f"straight_{kind}" for kind in COMMANDS}
    with FileLock(shared / "straight.lock"):
        for kind, command in COMMANDS.items():
            if not (runs[kind] / "done").exists():
                shutil.rmtree(runs[kind], ignore_errors=True)
                python_m_jaxrl([*command, "--logdir", str(runs[kind])], cache_dir)
                (runs[kind] / "done").touch()
    return runs


# ----------------------------------------------------------------------------- signals

# The third save waits until the first SIGTERM was noted (jaxrl restores the default
# handler then), so the signal lands with chunks still to run however fast they run.
THIRD_SAVE_AWAITS_SIGTERM = """
import signal, sys, time
from jaxrl.workflow import rundir

save, saves = rundir.RunDir.save, []

def save_once_signalled(self, *args, **kwargs):
    saves.append(1)
    if len(saves) == 3:
        print("at the third save", file=sys.stderr, flush=True)
        deadline = time.monotonic() + 600
        while signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL and time.monotonic() < deadline:
            time.sleep(0.01)
    save(self, *args, **kwargs)

rundir.RunDir.save = save_once_signalled
"""


@pytest.mark.parametrize("kind", ["train", "sweep"])
def test_sigterm_stops_after_the_chunk_in_flight_with_a_checkpoint_and_resume_is_exact(
    kind, straight, cache_dir, tmp_path
):
    logdir = tmp_path / "run"
    command = [*COMMANDS[kind], "--logdir", str(logdir)]
    process = patched_jaxrl(THIRD_SAVE_AWAITS_SIGTERM, command, cache_dir, tmp_path)
    seen = wait_for_checkpoints(logdir, 2, process)
    process.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    status, err = finish(process, timeout=60)  # well within a cluster's grace period
    assert status == stopping.EXIT_STOPPED == 75, err[-3000:]
    assert time.monotonic() - signalled < 60
    (said,) = [line for line in err.splitlines() if "stopped by SIGTERM" in line]
    assert said.startswith("jaxrl: ppo stopped by SIGTERM after iteration ") and "continue with --resume" in said
    stopped_at = int(said.split("after iteration ")[1].split(" ")[0].replace(",", ""))
    # The chunk in flight, saved; or, where the signal came as the second checkpoint was
    # still being finished, no chunk was in flight and that checkpoint holds the run.
    assert checkpoint_steps(logdir)[-1] == stopped_at >= max(seen)
    assert stopped_at < ITERATIONS  # stopped, not finished

    python_m_jaxrl([*command, "--resume"], cache_dir)
    assert_same_run(logdir, straight[kind])


# A save that blocks once the first SIGTERM was noted (jaxrl restores the default
# handler then): the second SIGTERM arrives while the checkpoint is half written.
BLOCKING_SAVE = """
import signal, sys, time
import orbax.checkpoint as ocp

write_json = ocp.JsonCheckpointHandler.async_save

async def blocking(self, *args, **kwargs):
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        print("blocked in a save", file=sys.stderr, flush=True)
        time.sleep(600)
    return await write_json(self, *args, **kwargs)

ocp.JsonCheckpointHandler.async_save = blocking
"""


def test_a_second_sigterm_during_the_save_ends_the_process_at_once(straight, cache_dir, tmp_path):
    logdir = tmp_path / "run"
    command = [*TRAIN, "--logdir", str(logdir)]
    process = patched_jaxrl(THIRD_SAVE_AWAITS_SIGTERM + BLOCKING_SAVE, command, cache_dir, tmp_path)
    assert read_until(process, "at the third save")
    seen = checkpoint_steps(logdir)
    process.send_signal(signal.SIGTERM)
    assert read_until(process, "blocked in a save")  # the third save, cut short by the stop
    process.send_signal(signal.SIGTERM)
    status, err = finish(process, timeout=20)
    assert status == -signal.SIGTERM, err[-3000:]  # killed by the signal, not after the sleep
    leftovers = [name for name in os.listdir(logdir / "checkpoints") if "tmp" in name]
    assert leftovers and checkpoint_steps(logdir)[-1] >= max(seen)  # a save cut short, the earlier ones whole

    python_m_jaxrl([*command, "--resume"], cache_dir)
    assert_same_run(logdir, straight["train"])


# ----------------------------------------------------------------------------- in a notebook

CONFIG = ppo.Config(
    total_timesteps=1024, num_envs=4, num_steps=16, hidden_sizes=(16,), num_evals=4, num_reports=0, num_minibatches=2
)
CHUNK = 4  # 16 iterations in 4 chunks


def run_in_process(logdir, resume=False, loggers=("csv",), checkpoint_every=1, keep=10):
    options = RunOptions(
        logdir=logdir, loggers=loggers, checkpoint_every=checkpoint_every, resume=resume, keep_checkpoints=keep
    )
    return runner.run("ppo", CONFIG, seeds=2, chunk_iterations=CHUNK, options=options)


@pytest.fixture(scope="module")
def straight_in_process(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("straight") / "run"
    return logdir, run_in_process(logdir)


class CtrlC:
    """A logger that presses Ctrl-C (SIGINT to this process) as chunk ``at`` is logged."""

    def __init__(self, at: int):
        self.at, self.chunks = at, 0

    def write(self, step, rows):
        self.chunks += 1
        if self.chunks == self.at:
            os.kill(os.getpid(), signal.SIGINT)

    def truncate(self, *args):
        pass

    def close(self):
        pass


def test_ctrl_c_in_a_notebook_saves_then_raises_keyboard_interrupt(straight_in_process, tmp_path, capsys):
    straight_dir, straight_result = straight_in_process
    logdir = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt) as raised:
        run_in_process(logdir, loggers=("csv", CtrlC(at=2)))
    stopped = raised.value
    assert isinstance(stopped, stopping.Interrupted) and stopped.signal == signal.SIGINT
    assert stopped.iteration == stopped.checkpoint == 2 * CHUNK and stopped.exit_status == 75
    assert Checkpoints(logdir / "checkpoints").steps() == [CHUNK, 2 * CHUNK]
    assert "ppo stopped by SIGINT after iteration 8 of 16; checkpoint in" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back as it was

    resumed = run_in_process(logdir, resume=True)
    for a, b in zip(leaves(resumed.state), leaves(straight_result.state), strict=True):
        np.testing.assert_array_equal(a, b)
    assert (logdir / "metrics.csv").read_text() == (straight_dir / "metrics.csv").read_text()


def test_ctrl_c_in_the_last_chunk_still_stops_the_caller(straight_in_process, tmp_path, capsys):
    """The run finishes and saves as usual, and then raises all the same: a loop over
    runs in a script or a notebook must not go on to its next run."""
    with pytest.raises(stopping.Interrupted) as raised:
        run_in_process(tmp_path / "run", loggers=("csv", CtrlC(at=4)))
    assert raised.value.iteration == raised.value.checkpoint == 4 * CHUNK
    assert "after iteration 16 of 16; the run had finished" in capsys.readouterr().err
    assert Checkpoints(tmp_path / "run" / "checkpoints").latest_step() == 4 * CHUNK


def test_ctrl_c_without_checkpoints_says_nothing_was_kept(tmp_path, capsys):
    with pytest.raises(stopping.Interrupted) as raised:
        run_in_process(None, loggers=(CtrlC(at=1),), checkpoint_every=None)
    assert raised.value.checkpoint is None and raised.value.exit_status == 128 + signal.SIGINT
    assert "no checkpoint kept" in capsys.readouterr().err


# ----------------------------------------------------------------------------- damaged checkpoints


def stopped_copy(straight_dir, tmp_path, last: int):
    """The straight run's directory as a run stopped right after checkpoint ``last``."""
    logdir = tmp_path / "run"
    shutil.copytree(straight_dir, logdir)
    for step in Checkpoints(logdir / "checkpoints").steps():
        if step > last:
            shutil.rmtree(logdir / "checkpoints" / str(step))
    return logdir


def damage(step_dir, how: str) -> None:
    files = sorted((p for p in step_dir.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    if how == "truncated":
        for path in files:
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:  # one byte flipped in the largest file of the state (its arrays)
        (path,) = [p for p in files if "state" in p.parts][-1:]
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["truncated", "one byte flipped"])
def test_resume_skips_a_damaged_checkpoint_and_ends_equal(how, straight_in_process, tmp_path):
    straight_dir, straight_result = straight_in_process
    logdir = stopped_copy(straight_dir, tmp_path, last=3 * CHUNK)
    damage(logdir / "checkpoints" / str(3 * CHUNK), how)
    with pytest.warns(UserWarning, match=rf"skipping a damaged checkpoint, checkpoint .*/{3 * CHUNK}[:\s]"):
        resumed = run_in_process(logdir, resume=True)
    for a, b in zip(leaves(resumed.state), leaves(straight_result.state), strict=True):
        np.testing.assert_array_equal(a, b)
    assert (logdir / "metrics.csv").read_text() == (straight_dir / "metrics.csv").read_text()


def test_with_every_checkpoint_damaged_the_error_lists_each(straight_in_process, tmp_path):
    logdir = stopped_copy(straight_in_process[0], tmp_path, last=2 * CHUNK)
    for step in (CHUNK, 2 * CHUNK):
        damage(logdir / "checkpoints" / str(step), "one byte flipped")
    with pytest.warns(UserWarning), pytest.raises(DamagedCheckpoint) as raised:
        run_in_process(logdir, resume=True)
    message = str(raised.value)
    assert message.startswith(f"no checkpoint in {logdir / 'checkpoints'} reads whole: ")
    assert f"/{2 * CHUNK}: state/" in message and f"/{CHUNK}: state/" in message and "(checksum)" in message
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="reads whole"):
        saved.load(logdir)  # evaluate / record say the same


# A writer that fails part-way through the third save, as on a full disk: files may
# grow to 1,000 bytes, and the state's arrays take more.
FULL_DISK = """
import resource, signal
from jaxrl.workflow import rundir

save, saves = rundir.RunDir.save, []

def save_on_a_filling_disk(self, *args, **kwargs):
    saves.append(1)
    if len(saves) == 3:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, resource.RLIM_INFINITY))
    save(self, *args, **kwargs)

rundir.RunDir.save = save_on_a_filling_disk
"""


def test_a_save_that_fails_part_way_stops_with_one_error_and_keeps_the_earlier(straight, cache_dir, tmp_path):
    logdir = tmp_path / "run"
    command = [*TRAIN, "--logdir", str(logdir)]
    status, err = finish(patched_jaxrl(FULL_DISK, command, cache_dir, tmp_path))
    assert status == 1, err[-3000:]
    # One error line and no traceback through jaxrl. (orbax's writer threads go on after
    # its first failed write, and tensorstore prints tracebacks of its own about them.)
    errors = [line for line in err.splitlines() if line.startswith("jaxrl: error:")]
    shown = without_event_loop_reports(err)[-6000:]
    assert len(errors) == 1, shown
    (error,) = errors
    assert error.startswith("jaxrl: error: could not save checkpoint 12 in") and "File too large" in error
    assert "jaxrl/workflow" not in err and "_SignalingThread" not in err, shown  # orbax's logged errors held
    assert error.endswith("the checkpoints before it are intact (steps [4, 8])")
    assert sorted(os.listdir(logdir / "checkpoints")) == ["4", "8"]  # nothing half-written left

    python_m_jaxrl([*command, "--resume"], cache_dir)
    assert_same_run(logdir, straight["train"])


# ----------------------------------------------------------------------------- compilation caches


def test_shared_caches_are_safe_and_damaged_entries_are_recompiled(straight, tmp_path):
    """Two processes started a second apart on one empty cache directory both end as
    the solo run did. Then, with every entry of JAX's cache and of jaxrl's program cache
    cut to half its size, the next run recompiles and ends as the solo run did."""
    cache = tmp_path / "cache"
    runs = []
    for number in range(2):
        runs.append(jaxrl_process(["-m", "jaxrl", *TRAIN, "--logdir", str(tmp_path / f"job{number}")], cache))
        time.sleep(1)
    for number, process in enumerate(runs):
        status, err = finish(process)
        assert status == 0, err[-3000:]
        assert_same_run(tmp_path / f"job{number}", straight["train"])
    assert (cache / ".lockfile").exists()  # JAX locks the directory (the CLI bounds its size)

    entries = [p for p in cache.rglob("*") if p.name.endswith(("-cache", ".program"))]
    assert {p.suffix for p in entries} == {"", ".program"}  # both caches hold entries
    for path in entries:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    again = tmp_path / "again"
    err = python_m_jaxrl([*TRAIN, "--logdir", str(again)], cache)
    assert "Error reading persistent compilation cache entry" in err  # JAX's: read, refused, recompiled
    assert_same_run(again, straight["train"])


def test_entries_of_an_unbounded_cache_get_the_access_times_a_bounded_one_reads(tmp_path):
    """JAX's bounded cache reads ``<key>-atime`` beside every ``<key>-cache`` it holds
    when it writes; the command line bounds a cache an older jaxrl (or another process)
    filled unbounded, and gives its entries one."""
    from jaxrl.workflow import cli

    (tmp_path / "old-cache").write_bytes(b"entry")
    (tmp_path / "new-cache").write_bytes(b"entry")
    (tmp_path / "new-atime").write_bytes((7).to_bytes(8, "little"))
    cli._give_entries_access_times(str(tmp_path))
    assert int.from_bytes((tmp_path / "old-atime").read_bytes(), "little") > 0
    assert (tmp_path / "new-atime").read_bytes() == (7).to_bytes(8, "little")  # kept
