"""Actors and a learner apart (jaxrl.workflow.actor_learner): the queue and the parameter
store, V-trace on blocks collected with stale params, the reproducible test mode, central
inference answering each actor from its own observations and memory, actor faults and
restarts, shutdown, and IMPALA, Ape-X DQN and APPO (with central inference) learning
CartPole through Gymnasium with two actors."""

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
import types

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium.envs.classic_control import CartPoleEnv
from test_returns import oracle_vtrace

from jaxrl import networks
from jaxrl.algorithms import apex, appo, impala, onpolicy
from jaxrl.workflow import actor_learner, stopping
from jaxrl.workflow.actor_learner import ActorOptions, BlockQueue, InferenceServer, ParameterStore, Pipeline
from jaxrl.workflow.options import RunOptions


def actor_threads():
    """The pipeline's threads still running: actors and the inference server."""
    return [t for t in threading.enumerate() if t.name.startswith(("jaxrl-actor", "jaxrl-inference"))]


@pytest.fixture(autouse=True)
def no_actor_threads_left():
    yield
    assert actor_threads() == [], "a run left actor threads behind"


# ----------------------------------------------------------------------------- the queue and the store


class CountingActor:
    """An actor without envs whose blocks are its own counter, the actor's index and the
    params it was given: what a block holds says which of the actor's blocks it is."""

    def __init__(self, actor, device, key):
        self.actor, self.count = actor, 0

    def block(self, params, sequence):
        self.count += 1
        return {"count": jnp.int32(self.count - 1), "actor": jnp.int32(self.actor), "params": params}

    def close(self):
        pass


COUNTING = types.SimpleNamespace(actor_learner=types.SimpleNamespace(block_steps=lambda config: 1))


def test_queue_never_drops_or_duplicates_a_block_and_versions_only_increase():
    num_actors, num_blocks = 3, 3_000
    options = ActorOptions(actors=num_actors, queue_size=2)
    with Pipeline(COUNTING, None, jax.random.key(0), options, make_actor=CountingActor) as pipeline:
        pipeline.start(jnp.int32(0))
        seen = {actor: [] for actor in range(num_actors)}
        versions = {actor: [] for actor in range(num_actors)}
        for _ in range(num_blocks):
            block, occupancy = pipeline.get()
            assert 0 <= occupancy <= options.queue_size
            assert block.version <= pipeline.version
            assert int(block.data["actor"]) == block.actor
            # The params a block was collected with are those of its version.
            assert int(block.data["params"]) == block.version
            assert int(block.data["count"]) == block.sequence
            seen[block.actor].append(block.sequence)
            versions[block.actor].append(block.version)
            pipeline.publish(jnp.int32(pipeline.version + 1))
    for actor in range(num_actors):
        assert seen[actor] == list(range(len(seen[actor]))), "an actor's blocks arrived with a gap or twice"
        assert np.all(np.diff(versions[actor]) >= 0)
    assert sum(len(s) for s in seen.values()) == num_blocks
    assert all(len(s) > 100 for s in seen.values())  # every actor took part


def test_parameter_store_versions_only_increase_and_fixed_versions_wait():
    store = ParameterStore("v0", keep=3)
    stop = threading.Event()
    seen = []

    def reader():
        while not stop.is_set():
            seen.append(store.latest())

    thread = threading.Thread(target=reader)
    thread.start()
    for version in range(1, 2_001):
        assert store.publish(f"v{version}") == version
    stop.set()
    thread.join()
    numbers = [version for version, _ in seen]
    assert np.all(np.diff(numbers) >= 0) and all(params == f"v{v}" for v, params in seen)
    assert store.wait_for(1_999, stop) == (1_999, "v1999")
    with pytest.raises(RuntimeError, match="no longer kept"):
        store.wait_for(5, stop)
    stopped = threading.Event()
    stopped.set()
    assert store.wait_for(2_001, stopped) is None


def test_block_queue_put_gives_up_when_stopped():
    queue, stop = BlockQueue(1), threading.Event()
    assert queue.put("a", stop) is not None
    threading.Timer(0.2, stop.set).start()
    assert queue.put("b", stop) is None
    assert queue.get(0.01) == "a" and queue.get(0.01) is None


@pytest.mark.parametrize(
    "options, match",
    [
        (dict(actors=0), "actors must be an int >= 1"),
        (dict(queue_size=0), "queue_size"),
        (dict(actors=2, fixed_lag=1), "fixed_lag .* needs actors=1"),
        (dict(actors=1, fixed_lag=-1), "fixed_lag must be None or an int >= 0"),
        (dict(learner_devices=64), "learner_devices=64, but there are"),
        (dict(block_timeout=0), "block_timeout"),
        (dict(actors=1, fixed_lag=1, central_inference=True), "fixed_lag .* central_inference=False"),
        (dict(central_inference=True, inference_wait=0), "inference_wait"),
        (dict(actor_platform="nonsense"), "actor_platform='nonsense' has no devices here"),
    ],
)
def test_bad_actor_options_are_refused(options, match):
    with pytest.raises(ValueError, match=match):
        ActorOptions(**options)


def test_an_algorithm_without_actor_learner_parts_is_refused():
    with pytest.raises(ValueError, match="ppo has no form with actors apart.*impala.*apex"):
        actor_learner.run("ppo", None)


def test_central_inference_of_envs_stepped_in_compiled_code_is_refused():
    with pytest.raises(ValueError, match="central_inference answers actors that step their envs from Python"):
        actor_learner.run("impala", SMALL_IMPALA, actors=ActorOptions(actors=1, central_inference=True))


# ----------------------------------------------------------------------------- central inference


def test_central_inference_answers_each_actor_from_its_own_observations_and_memory():
    """Three actors ask one server, at times of their own, with their observations and
    episode ends; each answer is the recurrent policy's on that actor's observations
    alone: the memory that entered the step (reset where the actor's episode ended, and
    kept while other actors were answered), the value, and the log-probability of the
    action it returned."""
    config = impala.actor_learner_config(SMALL_IMPALA.replace(memory="gru", memory_size=8))
    num_actors, num_steps, num_envs = 3, 12, config.num_envs
    programs = actor_learner.ActorPrograms(impala.ACTOR_LEARNER, config, num_actors)
    params = impala.ACTOR_LEARNER.learner_init(jax.random.key(0), config).params
    stop = threading.Event()
    server = InferenceServer(programs, lambda: (7, params), jax.devices()[0], jax.random.key(1), stop, wait=0.02)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(num_actors, num_steps, num_envs, 4)).astype(np.float32)
    done = rng.random((num_actors, num_steps, num_envs)) < 0.25
    done[:, 0] = True  # an actor's first step: fresh episodes
    answers = np.empty((num_actors, num_steps), object)

    def actor(index):
        pause = np.random.default_rng(index).random(num_steps) * 0.01
        for t in range(num_steps):
            answers[index, t] = server.act(index, obs[index, t], done[index, t], 0)
            time.sleep(pause[t])  # the actors drift apart: batches of one, two or three

    server.start()
    threads = [threading.Thread(target=actor, args=(index,)) for index in range(num_actors)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stop.set()
    server.thread.join()
    assert num_steps <= server.calls < num_actors * num_steps and server.answers == num_actors * num_steps

    for index in range(num_actors):
        carry = onpolicy.initial_carry(config, num_envs)
        for t in range(num_steps):
            carry = networks.reset_carry(carry, done[index, t])
            action, extras, version = answers[index, t]
            assert version == 7 and action.shape == (num_envs,)
            np.testing.assert_allclose(extras["carry"], carry, rtol=1e-5, atol=1e-6)
            distribution, value, carry = onpolicy.policy_and_value(params, obs[index, t][None], config, carry)
            np.testing.assert_allclose(extras["value"], value[0], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(extras["log_prob"], distribution.log_prob(action[None])[0], rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- IMPALA: real lag

SMALL_IMPALA = impala.Config(env_id="CartPole-v1", num_envs=4, num_steps=8, total_timesteps=4 * 8 * 12, num_evals=1)


def test_vtrace_on_blocks_k_versions_old_is_the_lock_step_loss():
    """With one actor and fixed_lag=2, block i is collected with the params of version
    i - 2: its behaviour log-probabilities are that version's, and the learner's loss on
    it (the lock-step IMPALA loss) equals a NumPy loss on the NumPy V-trace oracle."""
    lag, config = 2, impala.actor_learner_config(SMALL_IMPALA)
    parts = impala.ACTOR_LEARNER
    state = parts.learner_init(jax.random.key(1), config)
    history = {0: state.params}
    learn = jax.jit(lambda state, block, key: parts.learn(state, block, key, config))
    options = ActorOptions(actors=1, queue_size=1, fixed_lag=lag)
    with Pipeline(impala.algorithm, config, jax.random.key(2), options) as pipeline:
        pipeline.start(state.params)
        for i in range(7):
            block, _ = pipeline.get()
            assert block.version == max(0, i - lag) and pipeline.version - block.version == min(i, lag)
            trajectory = block.data
            behaviour, _ = onpolicy.trajectory_policy_and_value(history[block.version], trajectory, config)
            np.testing.assert_allclose(
                behaviour.log_prob(trajectory.action), trajectory.extras["log_prob"], rtol=1e-5, atol=1e-6
            )

            value_next = onpolicy.bootstrap_value(state.params, trajectory, config)
            loss, metrics = impala.loss_fn(
                state.params["network"], state.params["obs_stats"], trajectory, value_next, config
            )
            distribution, value = onpolicy.trajectory_policy_and_value(state.params, trajectory, config)
            log_prob = np.asarray(distribution.log_prob(trajectory.action), np.float64)
            log_rho = log_prob - np.asarray(trajectory.extras["log_prob"], np.float64)
            if i >= 3:  # the learner has moved since those params acted
                assert np.max(np.abs(log_rho)) > 0
            vs, pg = np.zeros_like(log_rho), np.zeros_like(log_rho)
            for env in range(config.num_envs):
                vs[:, env], pg[:, env] = oracle_vtrace(
                    *(np.asarray(x, np.float64)[:, env] for x in (value, value_next, trajectory.reward)),
                    *(np.asarray(x)[:, env] for x in (trajectory.terminated, trajectory.truncated)),
                    log_rho[:, env],
                    config.gamma,
                    config.rho_bar,
                    config.c_bar,
                    config.rho_bar,
                    config.gae_lambda,
                )
            policy_loss = -np.mean(log_prob * pg)
            value_loss = 0.5 * np.mean((np.asarray(value, np.float64) - vs) ** 2)
            entropy = np.mean(np.asarray(distribution.entropy(), np.float64))
            expected = policy_loss + config.vf_coef * value_loss - config.ent_coef * entropy
            np.testing.assert_allclose(float(metrics["policy_loss"]), policy_loss, rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(float(metrics["value_loss"]), value_loss, rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(float(loss), expected, rtol=1e-4, atol=1e-5)

            state, _ = learn(state, trajectory, jax.random.key(i))
            history[pipeline.publish(state.params)] = state.params


def test_one_actor_with_a_fixed_lag_equals_itself():
    options = ActorOptions(actors=1, queue_size=1, fixed_lag=1)
    first, second = (actor_learner.run("impala", SMALL_IMPALA, actors=options, seed=3) for _ in range(2))
    assert first.completed == second.completed == 12
    np.testing.assert_array_equal(first.lags, [0] + [1] * 11)
    for a, b in zip(jax.tree.leaves(first.state.params), jax.tree.leaves(second.state.params)):
        np.testing.assert_array_equal(a, b)
    timing = set(actor_learner.PIPELINE_METRICS) - {"policy_lag", "actor_restarts"}
    for name in set(first.metrics) - timing:
        np.testing.assert_array_equal(first.metrics[name], second.metrics[name], err_msg=name)


def test_the_command_line_trains_with_actors_apart(capsys, tmp_path):
    from jaxrl.workflow import cli

    settings = ["--set", "num_envs=4", "--set", "num_steps=8", "--set", "num_evals=1", "--total-timesteps", "384"]
    command = ["train", "impala", "--env", "CartPole-v1", "--actors", "2", "--no-progress", *settings]
    assert cli.main([*command, "--json", str(tmp_path / "summary.json")]) == 0
    out = capsys.readouterr().out
    assert "2 actor(s) x 384 env steps" in out and "policy lag p50" in out and "actor restarts 0" in out
    assert cli.main([*command, "--seeds", "2"]) == cli.USAGE_ERROR
    assert "--actors trains one seed" in capsys.readouterr().err
    assert cli.main([*command, "--central-inference"]) == cli.USAGE_ERROR  # CartPole-v1 steps in compiled code
    assert "central_inference answers actors that step their envs from Python" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # PPO has no such option
        cli.main(["train", "ppo", "--actors", "2"])


def test_a_recurrent_impala_runs_with_its_memory_carried_across_blocks():
    config = SMALL_IMPALA.replace(memory="gru", memory_size=8, total_timesteps=4 * 8 * 6)
    result = actor_learner.run("impala", config, actors=2)
    assert result.completed == 6 and np.all(np.isfinite(result.metrics["value_loss"]))
    assert "core" in result.state.params["network"]["params"]  # the GRU the learner trained


SPLIT_DEVICES = """
import jax, numpy as np
from jaxrl.algorithms import impala
from jaxrl.workflow import actor_learner
from jaxrl.workflow.actor_learner import ActorOptions

config = impala.Config(env_id="CartPole-v1", num_envs=4, num_steps=8, total_timesteps=4 * 8 * 6, num_evals=1)
runs = {}
for learner_devices in (1, 2):
    options = ActorOptions(actors=1, queue_size=1, fixed_lag=1, learner_devices=learner_devices)
    pipeline = actor_learner.Pipeline(impala.algorithm, impala.actor_learner_config(config), jax.random.key(0), options)
    assert [d.id for d in pipeline.actor_devices] == [learner_devices], pipeline.actor_devices
    runs[learner_devices] = actor_learner.run("impala", config, actors=options, seed=3)
split = runs[2].state.params
assert {len(x.sharding.device_set) for x in jax.tree.leaves(split)} == {2}  # the learner spans two devices
for one, two in zip(jax.tree.leaves(runs[1].state.params), jax.tree.leaves(split)):
    np.testing.assert_allclose(np.asarray(one), np.asarray(two), rtol=1e-4, atol=1e-5)
# A central inference server on the learner's first device, acting with its params from two.
host = config.replace(env_id="gymnasium:CartPole-v1")
central = ActorOptions(actors=2, learner_devices=2, central_inference=True)
assert actor_learner.run("impala", host, actors=central).completed == 6
print("ok")
"""


@pytest.mark.slow
def test_a_learner_on_two_devices_learns_as_on_one_with_its_actor_on_a_third():
    """On 4 forced CPU devices: the learner on the first 1 or 2 (a block's env axis split
    over them, its state replicated) and its one actor on the next; in the reproducible
    mode the two runs end with the same params, to rounding. Central inference serves
    actors from a learner on two devices."""
    env = {**os.environ, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4"}
    result = subprocess.run([sys.executable, "-c", SPLIT_DEVICES], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


class InterruptAfterFirstChunk:
    """A logger that sends this process SIGINT when the first chunk's rows arrive: a
    Ctrl-C at a known point of the run."""

    def write(self, iteration, rows):
        if iteration[-1] == 10:
            os.kill(os.getpid(), signal.SIGINT)

    def truncate(self, *args):
        pass

    def close(self):
        pass


def test_a_stop_signal_checkpoints_joins_the_actors_and_the_run_resumes(tmp_path):
    config = SMALL_IMPALA.replace(total_timesteps=4 * 8 * 40)
    options = RunOptions(logdir=str(tmp_path / "run"), loggers=("csv", InterruptAfterFirstChunk()), checkpoint_every=1)
    with pytest.raises(stopping.Interrupted) as stopped:
        actor_learner.run("impala", config, actors=2, chunk_iterations=10, options=options)
    assert stopped.value.iteration == 10 and stopped.value.checkpoint == 10
    assert actor_threads() == []
    resumed = actor_learner.run(
        "impala", config, actors=2, chunk_iterations=10, options=dataclasses.replace(options, resume=True)
    )
    assert resumed.completed == 40
    np.testing.assert_array_equal(resumed.iterations, np.arange(1, 41))  # the first chunk's rows kept
    assert resumed.metrics["timesteps"][0, -1] == 40 * 4 * 8  # the learner's count went on from the checkpoint
    idle = resumed.metrics["actor_idle_fraction"]  # over each chunk and the saving after the one before
    assert np.all((idle >= 0) & (idle <= 1 + 1e-9)) and np.all(resumed.metrics["actor_steps_per_second"] > 0)


# ----------------------------------------------------------------------------- faults


class FlakyCartPole(CartPoleEnv):
    """CartPole that raises at an instance's ``at_step``-th step while the class has
    ``crashes`` left (one used per raise, over all instances of the process)."""

    crashes = 0

    def __init__(self, at_step: int = 40, **kwargs):
        super().__init__(**kwargs)
        self.at_step, self.steps = at_step, 0

    def step(self, action):
        self.steps += 1
        if self.steps == self.at_step and FlakyCartPole.crashes > 0:
            FlakyCartPole.crashes -= 1
            raise RuntimeError("simulated crash of the simulator")
        return super().step(action)


gymnasium.register("jaxrl_test/FlakyCartPole-v0", entry_point=FlakyCartPole, max_episode_steps=500)


@pytest.mark.slow
def test_an_actor_whose_env_raises_is_restarted_and_the_run_finishes(capfd):
    FlakyCartPole.crashes = 1
    config = impala.Config(
        env_id="gymnasium:jaxrl_test/FlakyCartPole-v0", num_envs=4, num_steps=8, total_timesteps=4 * 8 * 40, num_evals=1
    )
    result = actor_learner.run("impala", config, actors=2)
    assert result.completed == 40 and result.restarts == 1
    assert "simulated crash of the simulator" in result.failures[0]
    assert "restarting it on fresh episodes (restart 1 of at most 3)" in capfd.readouterr().err
    assert result.metrics["actor_restarts"][0, -1] == 1


@pytest.mark.slow
def test_actors_that_keep_failing_stop_the_run_with_a_clear_error():
    FlakyCartPole.crashes = 10**6
    config = impala.Config(
        env_id="gymnasium:jaxrl_test/FlakyCartPole-v0",
        env_kwargs={"at_step": 3},
        num_envs=2,
        num_steps=8,
        total_timesteps=2 * 8 * 40,
        num_evals=1,
    )
    with pytest.raises(actor_learner.ActorFailed, match="(?s)simulated crash.*more than max_restarts=2"):
        actor_learner.run("impala", config, actors=ActorOptions(actors=2, max_restarts=2))
    assert actor_threads() == []


# ----------------------------------------------------------------------------- learning through Gymnasium


def runs_that_learn(algorithm, config, threshold: float, needed=3, runs=4, central_inference=False) -> list:
    """The best evaluation of each run (seeds 0, 1, ...) with two actors, each stopping at
    ``threshold``; runs stop once ``needed`` of ``runs`` have reached it or can no longer."""
    best = []
    options = ActorOptions(actors=2, central_inference=central_inference)
    for seed in range(runs):
        result = actor_learner.run(algorithm, config, actors=options, seed=seed, target=threshold)
        best.append(float(np.nanmax(result.metrics["eval_return"])))
        assert result.lags.max() >= 1  # the actors really ran ahead of the learner
        reached = sum(b >= threshold for b in best)
        if reached >= needed or reached + runs - len(best) < needed:
            break
    return best


@pytest.mark.learns
@pytest.mark.optimised
def test_impala_learns_cartpole_through_gymnasium_with_two_actors():
    """IMPALA's defaults, two actors of 16 envs, 100k steps: an evaluation of >= 200 in
    3 of 4 runs (measured: benchmarks/RESULTS.md, "Actors apart from the learner")."""
    best = runs_that_learn("impala", impala.Config(env_id="gymnasium:CartPole-v1", total_timesteps=100_000), 200.0)
    assert sum(b >= 200.0 for b in best) >= 3, best


@pytest.mark.learns
@pytest.mark.optimised
def test_apex_learns_cartpole_through_gymnasium_with_two_actors():
    """Ape-X DQN's defaults, two actors of 4 envs, 100k steps: an evaluation of >= 200 in
    3 of 4 runs (measured: benchmarks/RESULTS.md, "Actors apart from the learner")."""
    best = runs_that_learn("apex", apex.Config(env_id="gymnasium:CartPole-v1", total_timesteps=100_000), 200.0)
    assert sum(b >= 200.0 for b in best) >= 3, best


@pytest.mark.learns
@pytest.mark.optimised
def test_appo_learns_cartpole_through_gymnasium_with_central_inference():
    """APPO's defaults (PPO's: 4 envs x 128 steps a block, 4 epochs of 4 minibatches), two
    actors that only step their envs and one batched policy call answering both, 100k
    steps: an evaluation of >= 450 in 3 of 4 runs (measured: benchmarks/RESULTS.md,
    "Actors apart from the learner")."""
    config = appo.Config(env_id="gymnasium:CartPole-v1", total_timesteps=100_000)
    best = runs_that_learn("appo", config, 450.0, central_inference=True)
    assert sum(b >= 450.0 for b in best) >= 3, best
