"""The core's promises to every program: no deadlock whatever the import order, no
batched LAPACK call in any training program, forward-mode autodiff through every
algorithm's learner, and an ``import jaxrl`` that changes nothing process-wide."""

import ast
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import algorithms, data
from jaxrl.algorithms import dqn
from jaxrl.buffers.sequence import Windows

JAXRL = pathlib.Path(__file__).parent.parent / "jaxrl"
TINY = dict(num_envs=2, total_timesteps=64, hidden_sizes=(8,), num_evals=1, eval_episodes=1, num_reports=0)
SMALL_NET = dict(hidden_sizes=(8,), num_evals=1, eval_episodes=2, num_reports=0)
OFF_POLICY = dict(TINY, num_steps=1, batch_size=4, buffer_size=32, learning_starts=8)


VARIANTS = [*algorithms.names(), "rainbow", "ppo-gru", "a2c-lstm", "pqn-gru"]


def variant(name: str):
    """``(module, config)`` of an algorithm, or of a variant: Rainbow DQN, or a recurrent
    ``ALGO-gru`` / ``ALGO-lstm``."""
    if name == "rainbow":
        return algorithms.get("dqn"), dqn.rainbow("CartPole-v1", **OFF_POLICY)
    algorithm, _, memory = name.partition("-")
    config = tiny_config(algorithm)
    if memory:  # PPO's minibatches are then whole sequences: one per env
        config = config.replace(
            memory=memory, memory_size=4, **({"num_minibatches": 2} if algorithm in ("ppo", "appo", "pqn") else {})
        )
    return algorithms.get(algorithm), config


def tiny_config(name: str):
    """A few iterations of ``name`` on a small network."""
    module = algorithms.get(name)
    if name in ("ppo", "appo", "a2c", "impala", "ippo", "mappo", "pqn"):
        return module.Config(num_steps=8, **TINY)
    if name == "reinforce":
        return module.Config(env_kwargs={"max_steps_in_episode": 16}, **TINY)
    if name in ("dqn", "apex", "iql", "vdn"):  # iql, vdn: MultiAgentClimbing-v0
        return module.Config(**OFF_POLICY)
    if name == "r2d2":  # windows that fit the tiny buffer and warm-up
        return module.Config(windows=Windows(4, 1, 1), memory_size=4, **OFF_POLICY)
    if name == "alphazero":
        return module.Config(
            num_games=2, num_steps=2, num_simulations=2, total_timesteps=8, batch_size=4, buffer_size=32, **SMALL_NET
        )
    if name == "es":
        return module.Config(
            population_size=4,
            hidden_sizes=(8,),
            env_kwargs={"max_steps_in_episode": 16},
            total_timesteps=128,
            num_evals=1,
            eval_episodes=1,
            num_reports=0,
        )
    if name == "ppo_es":
        return module.Config(
            ppo=algorithms.get("ppo").Config(num_steps=8, **TINY),
            population_size=2,
            ppo_iterations=1,
            fitness_episodes=1,
            env_kwargs={"max_steps_in_episode": 16},
            total_timesteps=80,
            num_evals=1,
            eval_episodes=1,
            num_reports=0,
        )
    if name in FROM_DATASETS:  # their own default envs: CartPole-v1 (bc, discrete_cql) or Pendulum-v1
        return module.Config(
            num_updates=4, batch_size=4, hidden_sizes=(8,), num_evals=1, eval_episodes=1, num_reports=0
        )
    return module.Config(env_id="Pendulum-v1", **OFF_POLICY)


# The algorithms that learn from a dataset (their programs' inputs), the rest from their env.
FROM_DATASETS = ("bc", "td3_bc", "cql", "discrete_cql", "implicit_q")


def tiny_dataset(env_id: str) -> data.Dataset:
    """16 random transitions shaped for ``env_id`` (CartPole-v1's or Pendulum-v1's)."""
    rng = np.random.default_rng(0)
    discrete = env_id == "CartPole-v1"
    obs_dim = 4 if discrete else 3
    return data.Dataset(
        obs=rng.normal(size=(16, obs_dim)).astype(np.float32),
        action=rng.integers(0, 2, 16).astype(np.int32) if discrete else rng.uniform(-2, 2, (16, 1)).astype(np.float32),
        reward=np.ones(16, np.float32),
        terminated=np.zeros(16, bool),
        truncated=np.zeros(16, bool),
        next_obs=rng.normal(size=(16, obs_dim)).astype(np.float32),
        episode_return=np.zeros(16, np.float32),
        episode_length=np.zeros(16, np.int32),
        env_id=env_id,
    )


def inputs(name: str) -> tuple:
    return (tiny_dataset(tiny_config(name).env_id),) if name in FROM_DATASETS else ()


@pytest.mark.slow
@pytest.mark.parametrize("name", VARIANTS)
def test_no_training_program_calls_lapack(name):
    """XLA:CPU runs a batched LAPACK call (orthogonal initialisation's QR, under vmap) by
    fanning it out into the thread pool it runs on, which deadlocks once two run at
    once (benchmarks/investigations/xla_cpu_qr_deadlock). No program may contain one."""
    module, config = variant(name)
    keys = jax.random.split(jax.random.key(0), 2)
    train = jax.vmap(module.train, in_axes=(0, None) + (None,) * len(inputs(name)))
    text = jax.jit(train).lower(keys, config, *inputs(name)).as_text()
    assert "lapack" not in text.lower()


@pytest.mark.slow
@pytest.mark.parametrize("name", VARIANTS)
def test_forward_mode_differentiates_every_learner(name):
    """``jax.jvp`` of one iteration's metrics with respect to the parameters: every
    network, loss and optimiser step on the way supports forward mode."""
    module, config = variant(name)
    # The state's shapes suffice: tracing the step is the check, and nothing compiles.
    state = jax.eval_shape(lambda key, *data: module.init(key, config, *data), jax.random.key(0), *inputs(name))

    def metrics(state, params):
        return module.step(state.replace(params=params), jax.random.key(1), config)[1]

    def ones(x):  # the tangent of a float leaf; integer leaves take float0 zeros
        return jnp.ones_like(x) if jnp.issubdtype(x.dtype, jnp.floating) else np.zeros(x.shape, jax.dtypes.float0)

    def tangents(state):
        tangent = jax.tree.map(ones, state.params)
        return jax.jvp(lambda params: metrics(state, params), (state.params,), (tangent,))[1]

    assert jax.eval_shape(tangents, state)  # traced: forward mode is defined for every operation of the step


HANG_CHECK = """
import os, threading, time
import gymnax                      # JAX's backend starts before jaxrl is imported ...
import jax, jax.numpy as jnp
jnp.ones(3).sum().block_until_ready()   # ... and runs a computation: no XLA flag can apply now
from jaxrl.algorithms import ppo

config = ppo.Config(total_timesteps=2_048, num_evals=2, num_reports=0)  # 4 iterations
train = jax.jit(jax.vmap(ppo.train, in_axes=(0, None)))
for call in range(10):
    finished = threading.Event()
    def watchdog(call=call):
        if not finished.wait({timeout}):
            print(f"HANG in call {{call}}", flush=True)
            os._exit(3)
    threading.Thread(target=watchdog, daemon=True).start()
    jax.block_until_ready(train(jax.random.split(jax.random.key(call), 4), config))
    finished.set()
print("finished 10 calls", flush=True)
"""


@pytest.mark.slow
def test_vmapped_training_after_jax_started_finishes_every_time():
    """The new user's notebook: gymnax and a JAX computation first, then PPO over 4
    vmapped seeds ten times, each call watched by a timeout, under JAX's default XLA
    settings. Before the fix the second or third call deadlocked (of 100k env steps,
    as the investigation ran it). The deadlock struck as a call began, in the batched QR
    of the networks' initialisation (benchmarks/investigations/xla_cpu_qr_deadlock), so
    the ten calls are what count, not their length: each trains 2k env steps."""
    result = subprocess.run(
        [sys.executable, "-c", HANG_CHECK.format(timeout=240)], capture_output=True, text=True, timeout=1200
    )
    assert result.returncode == 0 and "finished 10 calls" in result.stdout, result.stdout + result.stderr[-2000:]


def test_jaxrl_imports_nothing_private_from_jax_and_leaves_sys_modules_alone():
    for path in sorted(JAXRL.rglob("*.py")):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                assert not name.startswith("jax._src"), f"{path.relative_to(JAXRL.parent)} imports {name}"
        assert "jax._src" not in source and "sys.modules" not in source, path


IMPORT_CHECK = """
import importlib, os, pkgutil, sys
import jax
flags, settings = os.environ.get("XLA_FLAGS"), dict(jax.config.values)
import jaxrl
for module in pkgutil.walk_packages(jaxrl.__path__, "jaxrl."):
    if not module.name.endswith("__main__"):
        importlib.import_module(module.name)
assert os.environ.get("XLA_FLAGS") == flags, os.environ.get("XLA_FLAGS")
changed = sorted(k for k, v in jax.config.values.items() if settings.get(k, object()) != v)
assert not changed, changed
placeholders = [name for name, module in sys.modules.items() if type(module).__module__.startswith("jaxrl")]
assert not placeholders, placeholders
print("ok")
"""


@pytest.mark.slow
def test_importing_every_jaxrl_module_changes_nothing_process_wide():
    """No XLA flag, JAX setting or module object of jaxrl's making in ``sys.modules``
    comes from importing every jaxrl module."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    result = subprocess.run([sys.executable, "-c", IMPORT_CHECK], capture_output=True, text=True, timeout=300, env=env)
    assert result.stdout.strip().endswith("ok"), result.stderr[-3000:]


RBG_RUN = """
import shutil, sys
import jax
jax.config.update("jax_default_prng_impl", "unsafe_rbg")
import numpy as np
from jaxrl.workflow import runner
from jaxrl.workflow.options import RunOptions
from jaxrl.algorithms import dqn

def plain(leaf):
    return jax.random.key_data(leaf) if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key) else leaf

config = dqn.Config(num_envs=2, num_steps=4, total_timesteps=256, hidden_sizes=(8,), batch_size=8,
                    buffer_size=64, learning_starts=32, num_evals=2, eval_episodes=1, num_reports=0)
kwargs = dict(seeds=2, chunk_iterations=16)  # 32 iterations: 2 chunks, the second resumed
options = RunOptions(sys.argv[1] + "/straight", checkpoint_every=1)
straight = runner.run("dqn", config, **kwargs, options=options)
assert jax.random.key_data(jax.random.key(0)).shape == (4,)
shutil.copytree(sys.argv[1] + "/straight", sys.argv[1] + "/resumed")
shutil.rmtree(sys.argv[1] + "/resumed/checkpoints/32")
options = RunOptions(sys.argv[1] + "/resumed", checkpoint_every=1, resume=True)
resumed = runner.run("dqn", config, **kwargs, options=options)
for ours, theirs in zip(jax.tree.leaves(resumed.state), jax.tree.leaves(straight.state)):
    np.testing.assert_array_equal(plain(ours), plain(theirs))
for name, values in straight.metrics.items():
    np.testing.assert_array_equal(resumed.metrics[name], values, err_msg=name)
print("ok")
"""


@pytest.mark.slow
def test_the_readme_rbg_opt_in_trains_and_resumes_exactly(tmp_path):
    """README's performance note: ``jax_default_prng_impl="unsafe_rbg"`` (keys of four
    words, not two) trains, checkpoints and resumes a replay-buffer run exactly."""
    result = subprocess.run([sys.executable, "-c", RBG_RUN, str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert result.stdout.strip().endswith("ok"), result.stderr[-3000:]
