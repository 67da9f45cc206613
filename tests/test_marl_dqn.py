"""IQL and VDN (:mod:`jaxrl.algorithms.value_decomposition`: agents as a batch axis and
as replay lanes, with the ``Independent`` or the ``Sum`` mixer). VDN's team value and
target against a NumPy loop (terminated, truncated and invalid agents), the agent lanes
of the buffer and VDN's batches of whole env steps, the team's TD error written to every
agent's lane, acting with per-env epsilons and action masks, the contract (jit, vmap over seeds and hyper-parameters in
one compile, the runner with checkpoints), clear errors and learning tests.

Compiles dominate on a 2-core CPU: the API tests share one small VDN config whose
program compiles once per transformation (module-scoped fixtures).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import envs, sweep_axes, value_heads
from jaxrl.algorithms import dqn, iql, value_decomposition, vdn
from jaxrl.buffers import Index, replay, sumtree
from jaxrl.workflow import runner
from jaxrl.workflow.options import RunOptions

pytestmark = pytest.mark.slow  # compiles or runs whole training programs: see pyproject.toml

A = 2  # MultiAgentClimbing-v0's agents

SMALL = vdn.Config(
    num_envs=4,
    num_steps=2,
    num_updates=2,
    batch_size=16,
    buffer_size=256,
    learning_starts=16,
    total_timesteps=8 * 16,
    hidden_sizes=(16,),
    target_update_period=3,
    num_evals=2,
    eval_episodes=2,
    num_reports=0,
)


def jit(fn):
    """``fn`` compiled with its ``config`` argument static."""
    return jax.jit(fn, static_argnames="config")


@pytest.fixture(scope="module")
def train_small():
    return jax.jit(vdn.train)


KEY = jax.random.split(jax.random.key(0), 1)[0]  # the runner's seed 0


@pytest.fixture(scope="module")
def small_run(train_small):
    return train_small(KEY, SMALL)


@pytest.fixture(scope="module")
def filled():
    """SMALL's state after two warm-up iterations (16 env steps, 32 agent-transitions)."""
    state = jit(vdn.init)(jax.random.key(0), SMALL)
    warmup_step = jit(dqn.warmup_step)
    for k in (1, 2):
        state, _ = warmup_step(state, jax.random.key(k), SMALL)
    return state


# ----------------------------------------------------------------------------- numerics


def huber(x):
    return np.where(np.abs(x) <= 1.0, 0.5 * x**2, np.abs(x) - 0.5)


def random_team_batch(rng, batch_size: int, gamma: float) -> dict:
    """A VDN batch ``[B, A, ...]`` with terminated, truncated and invalid agents."""
    shape = (batch_size, A)
    obs = lambda: {  # noqa: E731
        "agent_id": np.broadcast_to(np.eye(A, dtype=np.float32), shape + (A,)).copy(),
        "observation": rng.uniform(0, 1, shape + (6,)).astype(np.float32),
    }
    valid = rng.uniform(size=shape) < 0.8
    batch = {
        "obs": obs(),
        "action": rng.integers(0, 3, shape).astype(np.int32),
        "reward": rng.normal(size=shape).astype(np.float32),
        "discount": (gamma ** rng.integers(1, 4, shape)).astype(np.float32),  # n-step windows of 1 to 3 steps
        "terminated": rng.uniform(size=shape) < 0.3,
        "truncated": rng.uniform(size=shape) < 0.3,
        "next_obs": obs(),
        "valid": valid,
        "weight": (rng.uniform(0.2, 1.0, batch_size) * valid.any(axis=1)).astype(np.float32),
    }
    assert batch["terminated"].any() and (batch["truncated"] & ~batch["terminated"]).any() and not valid.all()
    return jax.tree.map(jnp.asarray, batch)


def vdn_reference(q, q_next_online, q_next_target, batch, double: bool):
    """``(q_tot [B], target [B])`` as loops over samples and agents."""
    batch = jax.tree.map(np.asarray, batch)
    num, agents = batch["action"].shape
    q_tot, target = np.zeros(num), np.zeros(num)
    for b in range(num):
        for a in range(agents):
            q_tot[b] += float(batch["valid"][b, a]) * q[b, a, batch["action"][b, a]]
            chooser = q_next_online if double else q_next_target
            best = int(np.argmax(chooser[b, a]))
            bootstrap = batch["discount"][b, a] * (1.0 - float(batch["terminated"][b, a]))
            target[b] += batch["reward"][b, a] / agents + bootstrap * q_next_target[b, a, best]
    return q_tot, target


@pytest.mark.parametrize("double", [True, False])
def test_vdn_team_value_and_target_match_numpy_loop(double):
    config = SMALL.replace(double=double)
    state = jit(vdn.init)(jax.random.key(1), SMALL)  # the parameters do not depend on double: SMALL's program
    online = state.params["network"]
    target = jax.tree.map(lambda x: x + 0.5 * jax.random.normal(jax.random.key(2), x.shape), online)
    batch = random_team_batch(np.random.default_rng(3), 64, config.gamma)
    q = lambda p, x: np.asarray(dqn.q_values({"network": p}, x, config))  # noqa: E731
    q_next_online, q_next_target = q(online, batch["next_obs"]), q(target, batch["next_obs"])
    assert np.any(q_next_online.argmax(-1) != q_next_target.argmax(-1))  # double Q-learning matters here
    q_tot, y = vdn_reference(q(online, batch["obs"]), q_next_online, q_next_target, batch, double)

    loss, (metrics, td) = jit(value_decomposition.loss_fn)(online, target, batch, jax.random.key(4), config)
    np.testing.assert_allclose(np.asarray(td), y - q_tot, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(float(loss), np.mean(np.asarray(batch["weight"]) * huber(y - q_tot)), rtol=1e-5)
    np.testing.assert_allclose(float(metrics["q_mean"]), q_tot.mean(), rtol=1e-5, atol=1e-5)
    # The bootstrap stops only at termination: a truncated agent's window still bootstraps.
    truncated_only = np.asarray(batch["truncated"] & ~batch["terminated"])
    assert np.all(np.asarray(batch["discount"])[truncated_only] > 0)


def test_replay_lanes_are_agents_and_vdn_batches_are_env_steps(filled):
    buffer = filled.buffer.replay
    lanes = SMALL.num_envs * A
    assert buffer.num_envs == lanes and buffer.capacity == SMALL.buffer_size
    data = jax.tree.map(np.asarray, buffer.data)
    rows = int(buffer.size)
    # Lane n * A + a holds env n's agent a: its one-hot id, and the env's table and reward.
    agent_id = data["obs"]["agent_id"][:rows]
    np.testing.assert_array_equal(agent_id, np.broadcast_to(np.tile(np.eye(A), (SMALL.num_envs, 1)), agent_id.shape))
    by_env = lambda x: x[:rows].reshape((rows, SMALL.num_envs, A) + x.shape[2:])  # noqa: E731
    table, reward = by_env(data["obs"]["observation"])[..., :2], by_env(data["reward"])
    np.testing.assert_array_equal(table[:, :, 0], table[:, :, 1])
    np.testing.assert_array_equal(reward[:, :, 0], reward[:, :, 1])  # the shared reward

    batch = jit(value_decomposition.sample)(filled, jax.random.key(5), SMALL)
    index = jax.tree.map(np.asarray, batch["index"])
    assert index.row.shape == index.lane.shape == (SMALL.batch_size, A) and batch["weight"].shape == (SMALL.batch_size,)
    np.testing.assert_array_equal(index.row, index.row[:, :1] * np.ones(A, int))  # one env step ...
    np.testing.assert_array_equal(index.lane, index.lane[:, :1] // A * A + np.arange(A))  # ... every agent's lane
    agent_id = np.asarray(batch["obs"]["agent_id"])
    np.testing.assert_array_equal(agent_id, np.broadcast_to(np.eye(A), agent_id.shape))
    # n_step on the [B, A] index is n_step on each lane: the same as on the flattened index.
    flat = Index(jnp.asarray(index.row.ravel()), jnp.asarray(index.lane.ravel()))
    per_lane = jax.jit(replay.n_step, static_argnums=2)(buffer, flat, SMALL.n_step, SMALL.gamma)
    for name in ("reward", "discount", "terminated", "action", "n_steps"):
        np.testing.assert_array_equal(np.asarray(batch[name]), np.asarray(per_lane[name]).reshape(SMALL.batch_size, A))


def test_vdn_writes_the_team_td_error_to_every_agent_lane(filled):
    config = SMALL.replace(head=value_heads.Scalar(loss="mse"))
    batch = jit(value_decomposition.sample)(filled, jax.random.key(6), config)
    params, target = filled.params["network"], filled.target_params
    loss, (_, td) = jit(value_decomposition.loss_fn)(params, target, batch, jax.random.key(7), config)
    assert td.shape == (config.batch_size,)
    np.testing.assert_allclose(float(loss), np.mean(np.asarray(batch["weight"]) * 0.5 * np.asarray(td) ** 2), rtol=1e-5)
    new_state, _ = jit(vdn.update)(filled, batch, jax.random.key(7), config)
    leaves = np.asarray(sumtree.leaves(new_state.buffer.tree))
    slots = np.asarray(batch["index"].row) * SMALL.num_envs * A + np.asarray(batch["index"].lane)  # [B, A]
    priority = (np.abs(np.asarray(td)) + config.prioritized.eps) ** config.prioritized.alpha  # the team's, [B]
    expected = np.broadcast_to(priority[:, None], slots.shape)
    # Where one env step was drawn twice, one of its writes is kept: check the others.
    values, counts = np.unique(slots, return_counts=True)
    once = np.isin(slots, values[counts == 1])
    assert once.sum() > config.batch_size  # most of the batch
    np.testing.assert_allclose(leaves[slots[once]], expected[once], rtol=1e-5)


def test_iql_samples_agent_lanes_and_runs_every_flag():
    """IQL's loss is DQN's on agent-transitions, so Rainbow's parts (C51, noisy nets,
    prioritized n-step replay) apply unchanged."""
    small = {k: getattr(SMALL, k) for k in ("num_envs", "num_steps", "num_updates", "batch_size", "buffer_size")}
    config = iql.Config(**small, learning_starts=16, total_timesteps=8 * 16, hidden_sizes=(16,), **dqn.RAINBOW)
    state = jit(iql.init)(jax.random.key(0), config)
    for k in (1, 2):
        state, _ = jit(dqn.warmup_step)(state, jax.random.key(k), config)
    batch = jax.eval_shape(lambda s, k: value_decomposition.sample(s, k, config), state, jax.random.key(3))
    assert batch["index"].lane.shape == batch["action"].shape == (config.batch_size,)  # agent-transitions
    state, metrics = jit(iql.step)(state, jax.random.key(4), config)
    assert all(np.isfinite(float(metrics[name])) for name in dqn.LEARNER_METRICS)


# ----------------------------------------------------------------------------- acting


def test_act_on_every_agent_with_per_env_epsilon(small_run):
    params, obs = small_run.state.params, small_run.state.obs
    assert jax.tree.leaves(obs)[0].shape[:2] == (SMALL.num_envs, A)
    greedy, carry = vdn.act(params, obs, (), jax.random.key(0), SMALL, deterministic=True)
    assert greedy.shape == (SMALL.num_envs, A) and greedy.dtype == jnp.int32 and carry == ()
    np.testing.assert_array_equal(np.asarray(greedy), np.asarray(dqn.q_values(params, obs, SMALL)).argmax(-1))
    epsilon = jnp.array([1.0, 1.0, 0.0, 0.0])  # one per env, shared by its agents
    keys = jax.random.split(jax.random.key(1), 64)
    actions = np.asarray(jax.jit(jax.vmap(lambda k: vdn.act(params, obs, (), k, SMALL, epsilon=epsilon)[0]))(keys))
    np.testing.assert_array_equal(actions[:, 2:], np.broadcast_to(np.asarray(greedy)[2:], actions[:, 2:].shape))
    assert set(np.unique(actions[:, :2])) == {0, 1, 2}


def test_smax_trains_with_action_masks_and_agents_that_leave():
    """HeuristicEnemySMAX (2 allies): masked actions never taken, not even at random,
    and replay stores ``valid`` per agent lane."""
    config = vdn.Config(
        env_id="jaxmarl:HeuristicEnemySMAX",
        env_kwargs={"num_allies": 2, "num_enemies": 2, "max_steps_in_episode": 20},
        num_envs=2,
        num_steps=4,
        num_updates=1,
        batch_size=8,
        buffer_size=256,
        learning_starts=16,
        total_timesteps=8 * 8,
        hidden_sizes=(16,),
        num_evals=0,  # what is checked is the training's replay: no evaluation loop to compile
        num_reports=0,
    )
    out = jax.jit(vdn.train)(jax.random.key(0), config)
    buffer = out.state.buffer.replay
    lanes = config.num_envs * 2  # envs x agents
    assert buffer.data["valid"].shape == buffer.data["action"].shape == (config.buffer_size // lanes, lanes)
    data = jax.tree.map(lambda x: np.asarray(x)[: int(buffer.size)], buffer.data)
    assert (~data["valid"]).any()  # some units died: their later steps are no transitions
    taken = np.take_along_axis(data["obs"]["action_mask"], data["action"][..., None], axis=-1)[..., 0]
    assert taken.all()
    assert np.isfinite(np.asarray(out.metrics["loss"])[config.warmup_iterations :]).all()


# ----------------------------------------------------------------------------- contract


def test_metrics_and_evaluation_per_agent(small_run):
    metrics = small_run.metrics
    for name in ("timesteps", "episode_return", "loss", "q_mean", "td_abs", "epsilon", "eval_return"):
        assert metrics[name].shape == (SMALL.num_iterations,), name
    # timesteps count env steps; each is A agent-transitions in replay.
    np.testing.assert_array_equal(metrics["timesteps"], SMALL.iteration_steps * np.arange(1, SMALL.num_iterations + 1))
    assert int(small_run.state.buffer.replay.size) * SMALL.num_envs * A == SMALL.total_timesteps * A
    result = vdn.evaluate(small_run.state.params, jax.random.key(1), SMALL)
    assert result.returns.shape == (SMALL.eval_episodes,) and np.all(np.asarray(result.lengths) == 10)


def test_vmap_over_seeds_and_hyperparameters_compiles_once(train_small):
    values = dict(learning_rate=[1e-4, 1e-3], gamma=[0.9, 0.99])
    configs = SMALL.replace(**{k: jnp.array(v) for k, v in values.items()})
    keys = jax.random.split(jax.random.key(4), 2)
    sweep = jax.jit(jax.vmap(vdn.train, in_axes=(0, sweep_axes(configs))))
    out = sweep(keys, configs)
    sweep(keys, configs.replace(learning_rate=jnp.array([2e-4, 2e-3])))
    assert sweep._cache_size() == 1
    single = train_small(keys[1], SMALL.replace(**{k: v[1] for k, v in values.items()}))
    for name, value in single.metrics.items():
        np.testing.assert_allclose(out.metrics[name][1], value, rtol=1e-4, atol=1e-4, err_msg=name)


def test_runner_trains_and_resumes_vdn(tmp_path, small_run):
    kwargs = dict(seeds=1, chunk_iterations=4)
    straight = runner.run(vdn, SMALL, **kwargs, options=RunOptions(tmp_path / "straight", checkpoint_every=1))
    for name, value in small_run.metrics.items():  # seed 0 trains from KEY, as train did
        np.testing.assert_allclose(straight.metrics[name][0], value, rtol=1e-5, atol=1e-5, err_msg=name)
    import shutil

    shutil.copytree(tmp_path / "straight", tmp_path / "resumed")
    shutil.rmtree(tmp_path / "resumed" / "checkpoints" / str(SMALL.num_iterations))
    resumed = runner.run(
        vdn, SMALL, **kwargs, options=RunOptions(tmp_path / "resumed", checkpoint_every=1, resume=True)
    )
    for name, values in straight.metrics.items():
        np.testing.assert_array_equal(resumed.metrics[name], values, err_msg=name)


@pytest.mark.parametrize(
    "make, overrides, message",
    [
        (iql.Config, dict(env_id="CartPole-v1"), "single-agent env"),
        (vdn.Config, dict(env_id="CartPole-v1"), "single-agent env"),
        (dqn.Config, dict(env_id="MultiAgentClimbing-v0"), "multi-agent env"),
        (vdn.Config, dict(head=value_heads.Categorical()), "distributional"),
        (vdn.Config, dict(head=value_heads.Rescaled()), "rescaled"),
        (iql.Config, dict(buffer_size=40, num_envs=4, num_steps=8), "buffer_size"),
    ],
)
def test_bad_config_is_a_clear_error(make, overrides, message):
    with pytest.raises(ValueError, match=message):
        make(**overrides)


@pytest.mark.parametrize(
    "make, field", [(dqn.Config, "mixer"), (iql.Config, "mixer"), (vdn.Config, "mixer"), (iql.Config, "memory")]
)
def test_settings_of_other_algorithms_are_no_fields(make, field):
    """DQN has no mixer, IQL's and VDN's mixer is the algorithm (a class constant, so
    ``iql.Config`` cannot train VDN), and multi-agent Q-learning has no memory: such a
    setting is no field."""
    with pytest.raises(TypeError, match=field):
        make(**{field: "vdn" if field == "mixer" else "gru"})


def test_registry_and_presets():
    from jaxrl.algorithms import get

    assert get("iql") is iql.algorithm and get("vdn") is vdn.algorithm
    assert iql.preset("MultiAgentClimbing-v0", n_step=1).n_step == 1
    config = vdn.Config()
    assert config.multi_agent and isinstance(config.mixer, value_decomposition.Sum)
    assert config.agent_view == (True, False)
    assert isinstance(iql.Config().mixer, value_decomposition.Independent) and not hasattr(dqn.Config(), "agent_view")
    assert envs.config_num_agents(config) == A and envs.config_num_agents(dqn.Config()) == 1


# ----------------------------------------------------------------------------- learning


@pytest.mark.learns
@pytest.mark.optimised
@pytest.mark.parametrize("algo, threshold", [(iql, 75.0), (vdn, 55.0)], ids=["iql", "vdn"])
def test_learns_the_climbing_game(algo, threshold):
    """MultiAgentClimbing-v0 with each module's defaults (100k env steps, 8 envs): the
    final greedy evaluation return per agent (mean of 10 episodes) reaches the threshold
    in at least 3 of 4 seeds: IQL >= 75, VDN >= 55. Uniformly random play scores about
    -34 and the optimum is 110; both first settle on the safe equilibrium (50, both agents
    on the 5 of each table) and climb from it. With this key IQL ends at 86, 98, 82, 98
    and VDN at 63, 67, 61, 67: here IQL climbs further than VDN, whose sum of agents'
    values, like IQL's independent values, cannot represent the climbing table."""
    config = algo.Config(num_reports=0)
    keys = jax.random.split(jax.random.key(42), 4)
    out = jax.jit(jax.vmap(algo.train, in_axes=(0, None)))(keys, config)
    evals = np.asarray(out.metrics["eval_return"])
    final = evals[:, ~np.isnan(evals[0])][:, -1]
    assert (final >= threshold).sum() >= 3, final
