"""Resuming runs on Gymnasium-bridge envs: host envs pickled with each checkpoint and
rebuilt on resume (the run continues exactly), or restarted with fresh episodes where
they cannot be pickled (an async vector env), which the run says."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

pytest.importorskip("gymnasium")

from interrupt import kill_after_checkpoints  # noqa: E402

from jaxrl.algorithms import ppo  # noqa: E402
from jaxrl.envs import gymnasium as gymnasium_bridge  # noqa: E402
from jaxrl.workflow import runner  # noqa: E402
from jaxrl.workflow.checkpoint import Checkpoints  # noqa: E402
from jaxrl.workflow.options import RunOptions  # noqa: E402

# 8 iterations of 32 env steps, 4 chunks of 2.
CONFIG = ppo.Config(
    env_id="gymnasium:CartPole-v1",
    total_timesteps=256,
    num_envs=2,
    num_steps=16,
    hidden_sizes=(16,),
    num_evals=0,
    num_reports=0,
    num_minibatches=2,
    num_epochs=1,
)
# One sub-env process per seed (8 iterations of 32 steps too): each spawned process
# imports and starts Python anew.
ASYNC = CONFIG.replace(env_kwargs={"vectorization_mode": "async"}, num_envs=1, num_steps=32)


def run(logdir, config=CONFIG, resume=False):
    return runner.run(
        "ppo",
        config,
        seeds=2,
        chunk_iterations=2,
        options=RunOptions(logdir, ("csv",), checkpoint_every=1, resume=resume),
    )


def leaves(tree):
    return [
        np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x)
        for x in jax.tree.leaves(tree)
    ]


def without_handles(tree):
    bridged = lambda node: isinstance(node, gymnasium_bridge.GymnasiumState)  # noqa: E731
    return jax.tree.map(lambda n: n.replace(handle=np.zeros((), np.int32)) if bridged(n) else n, tree, is_leaf=bridged)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("gym") / "run"
    return logdir, run(logdir)


@pytest.mark.slow
def test_a_killed_gymnasium_run_resumes_its_pickled_envs_exactly(straight, tmp_path):
    straight_dir, expected = straight
    logdir = tmp_path / "run"
    kill_after_checkpoints("test_gymnasium_resume", f"t.run({str(logdir)!r})", tmp_path)
    with Checkpoints(logdir / "checkpoints") as checkpoints:
        assert checkpoints.host_envs(checkpoints.latest_step()) is not None
    resumed = run(logdir, resume=True)
    for name, values in expected.metrics.items():
        np.testing.assert_array_equal(resumed.metrics[name], values, err_msg=name)
    # Everything (parameters, optimiser, observations, the env states' step counts) but
    # the handles, which number each process's host envs.
    for x, y in zip(leaves(without_handles(resumed.state)), leaves(without_handles(expected.state)), strict=True):
        np.testing.assert_array_equal(x, y)
    assert (logdir / "metrics.csv").read_text() == (straight_dir / "metrics.csv").read_text()
    meta = json.loads((logdir / "run.json").read_text())
    assert meta["host_envs"].startswith("pickled with each checkpoint")


@pytest.mark.slow
def test_an_async_gymnasium_run_resumes_with_fresh_episodes_and_says_so(tmp_path):
    logdir = tmp_path / "run"
    # The killed script imports this module in its main block only: the spawned sub-env
    # processes import the script's top level, and a light module there (interrupt itself)
    # spares each of them importing JAX and jaxrl's algorithms.
    call = f"import test_gymnasium_resume as r; r.run({str(logdir)!r}, r.ASYNC)"
    kill_after_checkpoints("interrupt", call, tmp_path)
    with Checkpoints(logdir / "checkpoints") as checkpoints:
        assert checkpoints.host_envs(checkpoints.latest_step()) is None  # sub-envs in other processes
    with pytest.warns(UserWarning, match="continues with fresh episodes"):
        resumed = run(logdir, config=ASYNC, resume=True)
    assert resumed.completed == 8
    assert np.all(resumed.metrics["timesteps"][:, -1] == 256)
