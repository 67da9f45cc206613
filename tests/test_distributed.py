"""jaxrl.workflow.distributed: lanes and one run's env batch split over devices, and over two
processes, give the results of the unsharded programs.

The training happens in subprocesses (tests/distributed_worker.py), so that this
process keeps its single device: one with 4 forced host devices, and a pair joined by
``jax.distributed`` on localhost.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from jaxrl.workflow import distributed

pytestmark = pytest.mark.slow  # compiles or runs whole training programs: see pyproject.toml

WORKER = os.path.join(os.path.dirname(__file__), "distributed_worker.py")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker_env(extra_xla_flags: str = "") -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {extra_xla_flags}".strip()
    env["PYTHONPATH"] = os.pathsep.join([ROOT, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def run_worker(mode: str, out, extra_xla_flags: str = "") -> tuple[dict, dict]:
    result = subprocess.run(
        [sys.executable, WORKER, mode, str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=worker_env(extra_xla_flags),
    )
    assert result.returncode == 0, result.stderr[-5000:]
    return load(out)


def load(out) -> tuple[dict, dict]:
    with np.load(f"{out}.npz") as arrays, open(f"{out}.json") as f:
        return dict(arrays), json.load(f)


def group(arrays: dict, prefix: str) -> dict:
    return {name[len(prefix) :]: value for name, value in arrays.items() if name.startswith(prefix)}


def assert_close(actual: dict, expected: dict, lane=None) -> None:
    """Same leaves, equal to float tolerance (NaN where no episode ended or no
    evaluation ran)."""
    assert actual.keys() == expected.keys() and actual
    for name in expected:
        value = actual[name] if lane is None else actual[name][lane]
        np.testing.assert_allclose(value, expected[name], rtol=1e-4, atol=1e-5, err_msg=name)


FOUR_DEVICES = "--xla_force_host_platform_device_count=4"


def test_on_4_devices_seeds_and_env_batch_equal_the_unsharded_runs_and_bad_input_is_refused(tmp_path):
    arrays, facts = run_worker("devices", tmp_path / "out", FOUR_DEVICES)
    assert facts["devices"] == 4

    # 4 seeds, one per device (final state and metrics alike), each equal to its own run
    for s in range(4):
        assert_close(group(arrays, "seeds/"), group(arrays, f"single{s}/"), lane=s)
    # the runner's chunk loop splits its lanes over the mesh alike, to the same results
    assert_close(group(arrays, "chunked/params"), group(arrays, "seeds/params"))
    for name in ("seeds_params", "seeds_metrics", "chunked_params"):
        assert facts[name]["spec"] == "P('devices',)" and facts[name]["devices"] == 4
        assert len(facts[name]["shapes"]) == 1 and facts[name]["shapes"][0][0] == 1
    kernel = next(value for name, value in group(arrays, "seeds/params").items() if "kernel" in name)
    assert not np.allclose(kernel[0], kernel[1])  # the seeds differ: not copies of one run

    # one run, its 8 envs 2 per device and its params on all 4, equal to the run on one
    assert_close(group(arrays, "dp/"), group(arrays, "single0/"))
    assert facts["dp_obs"] == {"spec": "P('devices',)", "replicated": False, "devices": 4, "shapes": [[2, 4]]}
    assert facts["dp_env_state"]["devices"] == 4 and facts["dp_env_state"]["shapes"][0][0] == 2
    assert facts["dp_params"]["replicated"] and facts["dp_params"]["devices"] == 4

    # 3 settings x 2 seeds: 6 lanes padded to 8, each back in its place
    assert arrays["lanes"].shape == (3, 2, 3)
    np.testing.assert_allclose(arrays["lanes"], arrays["lanes_expected"], rtol=1e-6)

    # bad input: a clear ValueError naming what is wrong and what is allowed
    expected = {
        "num_envs": r"num_envs=6 must be a multiple of the mesh's 4 devices",
        "env_batch_traced": r"num_envs=6 must be a multiple of the mesh's 4 devices",
        "no_env_batch": r"data parallelism shards the env batch, but dict has no env_state / obs",
        "keys": r"keys must be a 1-D array of typed keys",
        "swept_config": r"config has array leaves \(a sweep\): use jaxrl.workflow.sweep.run",
        "mesh": r"mesh must be a jax.sharding.Mesh, got list",
    }
    for case, message in expected.items():
        assert re.search(message, facts["errors"][case]), (case, facts["errors"][case])


def test_bad_input_on_one_device():
    with pytest.raises(ValueError, match="key must be one typed key"):
        distributed.train_data_parallel("ppo", None, jax.random.split(jax.random.key(0), 2))
    with pytest.raises(ValueError, match="devices must name at least one device"):
        distributed.make_mesh([])
    distributed.initialize(num_processes=1)  # one process: JAX left alone
    assert jax.process_count() == 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_pair(outs) -> None:
    """Both processes of one run, to the end."""
    port = free_port()
    processes = [
        subprocess.Popen(
            [sys.executable, WORKER, "process", str(port), str(i), str(outs[i])],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=worker_env(),
        )
        for i in range(2)
    ]
    try:
        logs = [process.communicate(timeout=600)[0] for process in processes]
    finally:  # one that failed or hung leaves the other waiting for it
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert [p.returncode for p in processes] == [0, 0], "\n".join(log[-3000:] for log in logs)


def test_two_processes_train_data_parallel_and_agree(tmp_path):
    outs = [tmp_path / f"process{i}" for i in range(2)]
    run_pair(outs)
    (first, first_facts), (second, second_facts) = load(outs[0]), load(outs[1])
    for facts in (first_facts, second_facts):
        assert (facts["process_count"], facts["devices"], facts["local_devices"]) == (2, 2, 1)
        assert facts["stopped_at"] == 4  # a SIGTERM to one process stops both after the chunk in flight
        # each process steps 4 of the 8 envs
        assert facts["dp_obs"]["spec"] == "P('devices',)" and facts["dp_obs"]["shapes"] == [[4, 4]]
    # both processes hold the same params and metrics (bit for bit)
    dp_first, dp_second = group(first, "dp/"), group(second, "dp/")
    assert dp_first.keys() == dp_second.keys() and dp_first
    for name in dp_first:
        np.testing.assert_array_equal(dp_first[name], dp_second[name], err_msg=name)
    # 9 lanes split (padded to 10) over the processes' devices, gathered on each
    for arrays in (first, second):
        assert arrays["lanes"].shape == (3, 3, 3)
        np.testing.assert_allclose(arrays["lanes"], arrays["lanes_expected"], rtol=1e-6)
