"""The work of tests/test_distributed.py, run in subprocesses so that the test process
keeps its one device: ``devices OUT`` trains on this process's (forced) host devices
and gives them bad input, ``process PORT ID OUT`` joins a two-process run on
localhost. Each writes what the tests check to ``OUT.npz`` (arrays) and ``OUT.json``
(facts)."""

from __future__ import annotations

import json
import os
import signal
import sys

from jaxrl.workflow import distributed

if sys.argv[1] == "process":  # must precede any JAX computation
    distributed.initialize(f"localhost:{sys.argv[2]}", num_processes=2, process_id=int(sys.argv[3]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import struct  # noqa: E402

from jaxrl import loop  # noqa: E402
from jaxrl.algorithms import ppo  # noqa: E402
from jaxrl.types import TrainOutput  # noqa: E402
from jaxrl.workflow import runner, stopping  # noqa: E402
from jaxrl.workflow.options import RunOptions  # noqa: E402

# 16 iterations of 8 envs x 16 steps; one evaluation, at the end.
CONFIG = ppo.Config(
    total_timesteps=2048, num_envs=8, num_steps=16, hidden_sizes=(16, 16), num_evals=1, eval_episodes=2, num_reports=0
)


class Lanes:
    """A stand-in algorithm that compiles in milliseconds, to check how lanes are
    flattened, padded, split and put back: lane (c, s) depends on both its key and its
    setting."""

    @struct.dataclass
    class Config:
        scale: float = 1.0

    @staticmethod
    def train(key, config):
        draw = jax.random.uniform(key, (3,))
        return TrainOutput(state={"draw": draw}, metrics={"value": draw * config.scale})


def lanes(num_settings: int, num_seeds: int) -> dict:
    """The sharded lanes and, computed lane by lane without a mesh, what they must be."""
    keys = jax.random.split(jax.random.key(7), num_seeds)
    configs = Lanes.Config(scale=jnp.arange(1.0, num_settings + 1.0))
    output = distributed.train_lanes(Lanes, keys, configs).output
    expected = [
        [Lanes.train(keys[s], Lanes.Config(scale=float(c + 1))).metrics["value"] for s in range(num_seeds)]
        for c in range(num_settings)
    ]
    return {"lanes": distributed.to_host(output.metrics["value"]), "lanes_expected": np.asarray(expected)}


def flat(prefix: str, tree) -> dict:
    return {
        f"{prefix}/{jax.tree_util.keystr(path)}": np.asarray(leaf)
        for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
    }


def shards(array) -> dict:
    return {
        "spec": str(array.sharding.spec),
        "replicated": array.sharding.is_fully_replicated,
        "devices": len({shard.device for shard in array.addressable_shards}),
        "shapes": sorted({tuple(shard.data.shape) for shard in array.addressable_shards}),
    }


def on_devices() -> tuple[dict, dict]:
    """Seeds and one run's env batch over 4 devices, against unsharded runs."""
    keys = jax.random.split(jax.random.key(0), 4)
    single = jax.jit(ppo.train)
    arrays = {}
    for s in range(4):
        out = single(keys[s], CONFIG)
        arrays.update({**flat(f"single{s}/params", out.state.params), **flat(f"single{s}/metrics", out.metrics)})
    seeds = distributed.train_seeds("ppo", CONFIG, keys)
    arrays.update({**flat("seeds/params", seeds.state.params), **flat("seeds/metrics", seeds.metrics)})
    # the same 4 seeds in the runner's chunk loop, one per device
    chunked = runner.run("ppo", CONFIG, seeds=4, chunk_iterations=8, options=RunOptions(mesh=distributed.make_mesh()))
    arrays.update(flat("chunked/params", chunked.state.params))
    data_parallel = distributed.train_data_parallel("ppo", CONFIG, keys[0])
    arrays.update({**flat("dp/params", data_parallel.state.params), **flat("dp/metrics", data_parallel.metrics)})
    arrays.update(lanes(num_settings=3, num_seeds=2))  # 6 lanes padded to 8

    facts = {
        "devices": jax.device_count(),
        "seeds_params": shards(jax.tree.leaves(seeds.state.params)[0]),
        "seeds_metrics": shards(seeds.metrics["episode_return"]),
        "chunked_params": shards(jax.tree.leaves(chunked.state.params)[0]),
        "dp_params": shards(jax.tree.leaves(data_parallel.state.params)[0]),
        "dp_obs": shards(data_parallel.state.obs),
        "dp_env_state": shards(jax.tree.leaves(data_parallel.state.env_state)[0]),
        "errors": bad_input(keys),
    }
    return arrays, facts


# A program whose state has no env batch (as behaviour cloning's, which learns from a
# dataset): data parallelism has nothing to split.
PROGRAM_WITHOUT_ENVS = loop.Program(
    init=lambda key, inputs: {"params": jax.random.normal(key, (2,))},
    iteration=None,
    evaluate=None,
    num_iterations=1,
    num_evals=0,
    num_reports=0,
)


def bad_input(keys) -> dict:
    """Each bad call's ValueError message (all raised before anything compiles)."""

    def error(call) -> str:
        try:
            call()
        except ValueError as e:
            return str(e)
        return "no error"

    return {
        "num_envs": error(lambda: distributed.train_data_parallel("ppo", CONFIG.replace(num_envs=6), keys[0])),
        "env_batch_traced": error(
            lambda: jax.eval_shape(distributed.data_parallel(ppo.program(CONFIG.replace(num_envs=6))).init, keys[0], ())
        ),
        "no_env_batch": error(
            lambda: jax.eval_shape(distributed.data_parallel(PROGRAM_WITHOUT_ENVS).init, keys[0], ())
        ),
        "keys": error(lambda: distributed.train_seeds("ppo", CONFIG, jax.random.key(0))),
        "swept_config": error(lambda: distributed.train_seeds("ppo", CONFIG.replace(gamma=jnp.ones(2)), keys)),
        "mesh": error(lambda: distributed.train_seeds("ppo", CONFIG, keys, mesh=jax.devices())),
    }


class SigtermOnTheFirstProcess:
    """A logger that sends process 0 (only) SIGTERM as the first chunk is logged."""

    def write(self, step, rows):
        if jax.process_index() == 0 and not hasattr(self, "sent"):
            self.sent = True
            os.kill(os.getpid(), signal.SIGTERM)

    def truncate(self, *args):
        pass

    def close(self):
        pass


def stopped_together() -> int:
    """The iteration a run over both processes' devices stops at when only process 0
    gets a SIGTERM (-1 if it does not stop); the other would hang alone in the next chunk."""
    options = RunOptions(mesh=distributed.make_mesh(), loggers=(SigtermOnTheFirstProcess(),))
    try:
        runner.run("ppo", CONFIG, seeds=2, chunk_iterations=4, options=options)
    except stopping.Terminated as stopped:
        return stopped.iteration
    return -1


def in_process() -> tuple[dict, dict]:
    """One run data parallel over the two processes' devices, and lanes split over them.
    (That data parallelism gives the unsharded run's results is checked on 4 devices in
    one process: a reference run here would cost one more compilation.)"""
    key = jax.random.key(0)
    data_parallel = distributed.train_data_parallel("ppo", CONFIG, key)
    arrays = {
        **flat("dp/params", distributed.to_host(data_parallel.state.params)),
        **flat("dp/metrics", distributed.to_host(data_parallel.metrics)),
        **lanes(num_settings=3, num_seeds=3),
    }  # 9 lanes padded to 10
    facts = {
        "process_count": jax.process_count(),
        "devices": jax.device_count(),
        "local_devices": jax.local_device_count(),
        "dp_obs": shards(data_parallel.state.obs),
        "stopped_at": stopped_together(),
    }
    return arrays, facts


if __name__ == "__main__":
    arrays, facts = on_devices() if sys.argv[1] == "devices" else in_process()
    out = sys.argv[-1]
    np.savez(out + ".npz", **arrays)
    with open(out + ".json", "w") as f:
        json.dump(facts, f)
