"""jaxrl.workflow.program_cache: the runner's programs saved on disk and loaded by a rerun.

A run whose programs come from the cache must equal a run that traces them, bit for bit;
the key must separate what changes the program; a damaged entry, or a program with host
callbacks, falls back to tracing. In-process tests point the cache at a temporary
directory; the runs among them turn JAX's own persistent cache on too, as the command
line does (one directory for the module: a program loaded again compiles to the
executable XLA made of it the first time); the rest keep it off. One test runs two
fresh processes, as a user's rerun does."""

from __future__ import annotations

import hashlib
import os
import pickle
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest
from test_runner import leaves, small_bc_run
from xla_cache import persistent_cache

from jaxrl import loop
from jaxrl.algorithms import bc, ppo
from jaxrl.workflow import logging as jaxrl_logging
from jaxrl.workflow import metrics, program_cache, runner
from jaxrl.workflow.options import RunOptions

pytestmark = pytest.mark.slow  # compiles or runs whole training programs: see pyproject.toml

SEEDS = 2
CHUNK = 4


def make_config(**overrides):
    """Tiny PPO whose state holds running observation statistics and PRNG keys."""
    return ppo.Config(
        **{
            **dict(
                total_timesteps=1024,
                num_envs=4,
                num_steps=16,
                hidden_sizes=(8,),
                num_evals=2,
                eval_episodes=2,
                num_reports=0,
                normalize_observations=True,
            ),
            **overrides,
        }
    )


def assert_same_run(ours, theirs):
    assert sorted(ours.metrics) == sorted(theirs.metrics)
    for name in ours.metrics:
        np.testing.assert_array_equal(ours.metrics[name], theirs.metrics[name], err_msg=name)
    for a, b in zip(leaves(ours.state), leaves(theirs.state), strict=True):
        np.testing.assert_array_equal(a, b)


class Counter:
    """Counts traces of the runner's chunk (each calls ``loop.iterate`` once)."""

    def __init__(self, monkeypatch):
        self.traces = 0
        original = loop.iterate

        def counting(*args, **kwargs):
            self.traces += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(loop, "iterate", counting)


def fresh_run(config):
    """A run that shares nothing compiled in this process with earlier runs."""
    runner._cached_programs.cache_clear()
    return runner.run("ppo", config, seeds=SEEDS, chunk_iterations=CHUNK)


@pytest.fixture(scope="module")
def traced_runs():
    """The reference: both configs traced as usual (the cache is off in the suite)."""
    assert program_cache.directory() is None
    return {lr: fresh_run(make_config(learning_rate=lr)) for lr in (1e-3, 3e-3)}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(program_cache, "directory", lambda: str(tmp_path))
    return tmp_path


@pytest.fixture(scope="module")
def xla_cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("xla-cache")


@pytest.fixture
def xla_cache(xla_cache_dir, cache):
    """JAX's persistent cache on, in this module's directory, for every program however
    quickly it compiles (jaxrl's program cache stays the ``cache`` fixture's); off again
    after the test."""
    with persistent_cache(xla_cache_dir, programs=True) as directory:
        yield directory


def test_a_rerun_loads_its_programs_and_equals_the_traced_run(traced_runs, cache, xla_cache, monkeypatch):
    counter = Counter(monkeypatch)
    first = fresh_run(make_config(learning_rate=1e-3))
    entries = {path: path.stat().st_mtime_ns for path in cache.iterdir()}
    assert len(entries) == 2 and counter.traces == 1  # init and chunk saved; the chunk traced once
    assert_same_run(first, traced_runs[1e-3])

    again = fresh_run(make_config(learning_rate=1e-3))
    assert counter.traces == 1  # loaded, not traced
    assert {path: path.stat().st_mtime_ns for path in cache.iterdir()} == entries
    assert_same_run(again, traced_runs[1e-3])

    runner._cached_programs.cache_clear()  # a loaded chunk still names its metrics
    with pytest.raises(ValueError, match="target metric 'no_such_metric' is not a metric of ppo"):
        runner.run(
            "ppo",
            make_config(learning_rate=1e-3),
            seeds=SEEDS,
            chunk_iterations=CHUNK,
            target=metrics.Target(0.0, metric="no_such_metric"),
        )

    # Same shapes, another learning rate: its own entries, its own result.
    other = fresh_run(make_config(learning_rate=3e-3))
    assert counter.traces == 2 and len(list(cache.iterdir())) == 4
    assert_same_run(other, traced_runs[3e-3])

    # Damaged entries are traced again and rewritten.
    for path in entries:
        path.write_bytes(path.read_bytes()[:100])
    assert_same_run(fresh_run(make_config(learning_rate=1e-3)), traced_runs[1e-3])
    assert counter.traces == 3
    assert_same_run(fresh_run(make_config(learning_rate=1e-3)), traced_runs[1e-3])
    assert counter.traces == 3


def test_a_progress_bar_run_is_cached_too(cache, xla_cache, monkeypatch, capsys):
    """The runner shows progress between chunks and leaves the config's in-program
    reports (host callbacks, which neither cache can keep) out of its chunks."""
    config = make_config(learning_rate=1e-3, num_reports=5, num_evals=0)
    counter = Counter(monkeypatch)
    reports = []
    with jaxrl_logging.sink(reports.append):
        for _ in range(2):
            runner._cached_programs.cache_clear()
            result = runner.run("ppo", config, seeds=SEEDS, chunk_iterations=CHUNK, options=RunOptions(progress=True))
    assert counter.traces == 1 and reports == []
    assert result.completed == config.num_iterations
    assert "1.02k/1.02k" in capsys.readouterr().err  # the bar reached the run's env steps


# ----------------------------------------------------------------------------- prepare itself


def double(x, scale):
    return {"y": x["a"] * scale, "count": x["count"] + 1}


ARGS = ({"a": np.arange(3, dtype=np.float32), "count": np.int32(0)},)


def prepared(identity="double", args=ARGS, static=(2,), fn=double):
    out_info, compile_fn = program_cache.prepare(jax.jit(fn, static_argnums=1), args, static, identity=identity)
    return out_info, compile_fn()(*args)


def test_prepare_keys_on_jax_settings_and_identity(cache):
    for _ in range(2):  # traced and saved, then loaded
        result = prepared()[1]
        np.testing.assert_array_equal(result["y"], [0.0, 2.0, 4.0])
        assert int(result["count"]) == 1
    assert len(list(cache.iterdir())) == 1
    with jax.numpy_rank_promotion("warn"):  # a setting changed in this process: another key
        prepared()
    prepared(identity="double, another")
    prepared(static=(3,))
    assert len(list(cache.iterdir())) == 4


def test_the_directory_keeps_to_jax_compilation_cache_max_size(cache):
    """At 0 nothing is kept; above 0 the least recently used entries are deleted once the
    entries take more (a load counts as a use), and an entry larger than the limit goes."""
    previous = jax.config.jax_compilation_cache_max_size
    try:
        jax.config.update("jax_compilation_cache_max_size", 0)
        np.testing.assert_array_equal(prepared(identity="a")[1]["y"], [0.0, 2.0, 4.0])
        assert not list(cache.iterdir())
        jax.config.update("jax_compilation_cache_max_size", -1)

        def new_entry(identity):
            before = set(cache.iterdir())
            prepared(identity=identity)
            (path,) = set(cache.iterdir()) - before
            return path

        a = new_entry("a")
        jax.config.update("jax_compilation_cache_max_size", int(2.5 * a.stat().st_size))  # room for two
        b = new_entry("b")
        os.utime(a, ns=(0, 0))  # as if a were older than b
        prepared(identity="a")  # a load: now a is the more recently used
        assert a.stat().st_mtime_ns > b.stat().st_mtime_ns
        c = new_entry("c")
        assert set(cache.iterdir()) == {a, c}  # b, the least recently used, went
        jax.config.update("jax_compilation_cache_max_size", a.stat().st_size // 2)
        np.testing.assert_array_equal(prepared(identity="d")[1]["y"], [0.0, 2.0, 4.0])
        assert not list(cache.iterdir())  # d, larger than the limit, is not kept; a and c make room
    finally:
        jax.config.update("jax_compilation_cache_max_size", previous)


def test_loaded_outputs_keep_weak_types(cache):
    args = ({"a": np.arange(3, dtype=np.float32), "count": jax.numpy.asarray(0)},)  # count: weak int32
    traced_info = jax.jit(double, static_argnums=1).trace(*args, 2).out_info
    assert traced_info["count"].weak_type
    for _ in range(2):  # saved, then loaded
        info, result = prepared(args=args)
        assert jax.tree.map(lambda i: (i.shape, i.dtype, i.weak_type), info) == jax.tree.map(
            lambda i: (i.shape, i.dtype, i.weak_type), traced_info
        )
        assert int(result["count"]) == 1


def read_entry(path) -> dict:
    """An entry file: the SHA-256 of its pickle, then the pickle."""
    data = path.read_bytes()
    assert hashlib.sha256(data[32:]).digest() == data[:32]
    return pickle.loads(data[32:])


@pytest.mark.parametrize("damage", ["truncate", "flip a byte"])
def test_an_entry_cut_short_or_changed_is_never_unpickled(damage, cache, monkeypatch):
    prepared()
    (path,) = cache.iterdir()
    data = path.read_bytes()
    middle = len(data) // 2
    damaged = data[:middle] if damage == "truncate" else data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1 :]
    path.write_bytes(damaged)
    unpickled, loads = [], pickle.loads
    monkeypatch.setattr(pickle, "loads", lambda data: unpickled.append(1) or loads(data))
    np.testing.assert_array_equal(prepared()[1]["y"], [0.0, 2.0, 4.0])
    assert unpickled == []  # traced again, not read
    assert read_entry(path)["exported"]  # and written anew, whole


def test_what_cannot_be_kept_is_traced_every_time(cache):
    @jax.tree_util.register_static
    class Local:  # defined in a function: its tree does not pickle
        def __init__(self, value):
            self.value = value

        def __eq__(self, other):
            return isinstance(other, Local) and other.value == self.value

        def __hash__(self):
            return hash(self.value)

    def with_local(x, scale):
        return {"y": x["a"] * scale, "tag": Local(1)}

    calls = []

    def with_callback(x, scale):
        jax.debug.callback(lambda: calls.append(1))
        return x["a"] * scale

    for _ in range(2):
        assert prepared(fn=with_local, identity="local")[1]["tag"] == Local(1)
        np.testing.assert_array_equal(prepared(fn=with_callback, identity="callback")[1], [0.0, 2.0, 4.0])
    assert len(calls) == 2
    entries = [read_entry(path) for path in cache.iterdir()]
    assert entries == [{"exported": None}] * 2  # markers, and no temporary files left
    committed = ({"a": jax.device_put(np.arange(3, dtype=np.float32), jax.devices()[0]), "count": np.int32(0)},)
    prepared(args=committed, identity="committed")
    assert len(list(cache.iterdir())) == 2  # an input committed to a device: not cached


def test_identity_leaves_out_what_it_cannot_describe():
    from flax import struct

    from jaxrl.algorithms import dqn

    assert runner._program_identity(ppo, make_config()).startswith(
        "jaxrl.algorithms.ppo jaxrl.algorithms.ppo.Config[('env_id', 'CartPole-v1')"
    )
    assert runner._program_identity(dqn, dqn.Config(learning_rate=np.float32(1e-3))) is None  # not plain data

    @struct.dataclass
    class MyConfig(ppo.Config):  # the user's subclass: its code is not in jaxrl's source hash
        pass

    assert runner._program_identity(ppo, MyConfig()) is None
    assert runner._program_identity(bc, bc.Config()) is not None
    # runner.run reads bc's dataset_path on the host and passes the data as an argument.
    assert runner._program_identity(bc, bc.Config(dataset_path="expert.npz")) is not None


def test_a_bc_run_from_a_dataset_or_its_file_is_loaded_and_equal(cache, xla_cache, monkeypatch, tmp_path):
    from jaxrl import data

    dataset, config = small_bc_run()
    path = tmp_path / "expert.npz"
    data.save_dataset(path, dataset)
    from_file = config.replace(dataset_path=str(path))
    counter = Counter(monkeypatch)
    runs = []
    for run_config, run_dataset in [(config, dataset), (config, dataset), (from_file, None), (from_file, None)]:
        runner._cached_programs.cache_clear()
        runs.append(
            runner.run(
                "bc",
                run_config,
                seeds=SEEDS,
                dataset=run_dataset,
                chunk_iterations=10,
                options=RunOptions(progress=True),
            )
        )
    assert counter.traces == 2 and len(list(cache.glob("*.program"))) == 4  # one trace, two entries per config
    for run in runs[1:]:
        assert_same_run(run, runs[0])
    assert runs[0].metrics["updates"][:, -1].tolist() == [20] * SEEDS


RERUN = """
import sys
import jax
jax.config.update("jax_compilation_cache_dir", {cache!r})
sys.path.insert(0, {tests!r})
import numpy as np
from jaxrl import loop
from jaxrl.workflow import runner
from test_program_cache import CHUNK, SEEDS, leaves, make_config

traces = []
original = loop.iterate
loop.iterate = lambda *args, **kwargs: traces.append(1) or original(*args, **kwargs)
result = runner.run("ppo", make_config(learning_rate=1e-3), seeds=SEEDS, chunk_iterations=CHUNK)
np.savez({out!r}, traces=len(traces), **{{f"metric_{{k}}": v for k, v in result.metrics.items()}},
         **{{f"leaf_{{i}}": leaf for i, leaf in enumerate(leaves(result.state))}})
"""


def test_a_second_process_loads_what_the_first_saved(traced_runs, tmp_path):
    """Two fresh processes sharing a persistent cache directory: the second traces
    nothing, and both equal the run traced in this process."""
    reference = traced_runs[1e-3]
    for number, expected_traces in ((1, 1), (2, 0)):
        out = tmp_path / f"run{number}.npz"
        script = tmp_path / "rerun.py"
        script.write_text(
            textwrap.dedent(RERUN.format(cache=str(tmp_path / "cache"), out=str(out), tests=os.path.dirname(__file__)))
        )
        process = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
        assert process.returncode == 0, process.stderr[-3000:]
        saved = np.load(out)
        assert int(saved["traces"]) == expected_traces
        for name, values in reference.metrics.items():
            np.testing.assert_array_equal(saved[f"metric_{name}"], values, err_msg=name)
        for i, leaf in enumerate(leaves(reference.state)):
            np.testing.assert_array_equal(saved[f"leaf_{i}"], leaf)
