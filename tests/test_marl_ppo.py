"""Multi-agent PPO (IPPO, MAPPO): the agent-batch view of a multi-agent env against the
env itself step by step, per-agent episode statistics against a NumPy loop, what each
critic reads, per-agent parameters, the contract (jit, vmap over seeds and
hyper-parameters, runner, command line), refusals, and MAPPO's learning on MPE
simple_spread (IPPO's: a row of benchmarks/learning_table.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from jaxrl import envs, evaluation, rollout, sweep_axes
from jaxrl.algorithms import a2c, get, ippo, mappo, onpolicy, ppo
from jaxrl.envs import multiagent as ma
from jaxrl.workflow import cli, runner
from jaxrl.workflow.options import RunOptions

pytestmark = pytest.mark.slow  # compiles or runs whole training programs: see pyproject.toml

SPREAD = "jaxmarl:MPE_simple_spread_v3"
SMALL = dict(num_envs=4, num_steps=10, total_timesteps=4 * 10 * 4, num_epochs=2, num_minibatches=2,
             hidden_sizes=(16,), num_evals=2, eval_episodes=4, num_reports=0)  # fmt: skip


def random_joint_actions(key, obs, num_agents: int, num_actions: int):
    """Uniform actions ``[A]`` over the allowed ones where the observation has a mask."""
    logits = jnp.zeros((num_agents, num_actions))
    if isinstance(obs, dict) and envs.ACTION_MASK in obs:
        logits = jnp.where(obs[envs.ACTION_MASK], 0.0, -jnp.inf)
    return jax.random.categorical(key, logits).astype(jnp.int32)


# ----------------------------------------------------------------------------- the agent-batch view


def test_agent_batch_steps_like_the_env_with_time_limits_and_statistics():
    """The view's stacked arrays equal the multi-agent env's per-agent dicts for the same
    keys and actions across two time limits, the time limit truncates every agent
    (not terminates), the final observation carries the global state before the reset,
    and each agent's reported return matches a NumPy sum of its rewards."""
    pytest.importorskip("jaxmarl")
    raw, params = envs.make(SPREAD, max_steps_in_episode=6)
    view = ma.AgentBatch(raw, agent_id=True, global_state=True, params=params)
    agents, num = raw.agents, raw.num_agents
    assert envs.spec(view, params).observation["global_state"].shape == raw.global_state_space(params).shape

    def run(key):
        reset_key, key = jax.random.split(key)
        raw_obs, raw_state = raw.reset(reset_key, params)
        obs, state = view.reset(reset_key, params)

        def body(carry, key):
            raw_obs, raw_state, obs, state = carry
            act_key, step_key = jax.random.split(key)
            action = jax.random.randint(act_key, (num,), 0, 5)
            raw_out = raw.step(step_key, raw_state, ma.unstack(action, agents), params)
            out = view.step(step_key, state, action, params)
            return (raw_out[0], raw_out[1], out[0], out[1]), (raw_out, out)

        first = (ma.stack(raw_obs, agents), obs)
        return first, jax.lax.scan(body, (raw_obs, raw_state, obs, state), jax.random.split(key, 15))[1]

    (raw_first, first), (raw_out, out) = jax.jit(run)(jax.random.key(0))
    np.testing.assert_array_equal(first["observation"], raw_first)
    np.testing.assert_array_equal(first["agent_id"], np.eye(num))
    raw_obs, _, raw_reward, raw_term, raw_trunc, raw_info = raw_out
    obs, _, reward, terminated, truncated, info = out
    stacked = lambda tree: np.stack([np.asarray(tree[a]) for a in agents], axis=1)  # noqa: E731  [T, A, ...]
    # Observations to rounding: the two steps are two computations XLA may round apart.
    same = lambda ours, theirs: np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)  # noqa: E731
    same(obs["observation"], stacked(raw_obs))
    same(info["final_observation"]["observation"], stacked(raw_info["final_observation"]))
    for name, ours, theirs in (("reward", reward, raw_reward), ("terminated", terminated, raw_term),
                               ("truncated", truncated, raw_trunc)):  # fmt: skip
        np.testing.assert_array_equal(ours, stacked(theirs), err_msg=name)
    assert reward.shape == (15, num) and reward.dtype == jnp.float32 and terminated.dtype == jnp.bool_
    ended = np.arange(1, 16) % 6 == 0
    np.testing.assert_array_equal(truncated, np.repeat(ended[:, None], num, 1))
    assert not np.asarray(terminated).any()
    same(obs["global_state"][:, 0], raw_info["global_state"])
    same(info["final_observation"]["global_state"][:, 1], raw_info["final_global_state"])
    assert "valid" not in info  # MPE's agents never leave
    # Each agent's episode return, summed in NumPy, is reported at its episode's end.
    running = np.zeros(num)
    for t in range(15):
        running += np.asarray(reward[t])
        expected = running if ended[t] else np.zeros(num)
        np.testing.assert_allclose(info["episode_return"][t], expected, rtol=1e-5)
        np.testing.assert_array_equal(info["episode_length"][t], np.full(num, 6 if ended[t] else 0))
        running = np.where(ended[t], 0.0, running)


def test_agents_that_leave_are_invalid_and_report_their_episode_once():
    """SMAX: a dead unit's later steps are ``valid`` False; each agent reports one
    episode per env episode, at its own end, and episode_metrics counts only those."""
    pytest.importorskip("jaxmarl")
    view, params = ma.make_agent_batch("jaxmarl:HeuristicEnemySMAX", num_allies=3, num_enemies=5)
    spec = envs.spec(view, params)
    assert spec.padding_steps and spec.action_mask and view.padding_steps

    def run(key):
        obs, state = view.reset(key, params)

        def body(carry, key):
            obs, state = carry
            act_key, step_key = jax.random.split(key)
            action = random_joint_actions(act_key, obs, 3, spec.num_actions)
            next_obs, state, reward, terminated, truncated, info = view.step(step_key, state, action, params)
            return (next_obs, state), (reward, terminated, truncated, info)

        return jax.lax.scan(body, (obs, state), jax.random.split(key, 120))[1]

    reward, terminated, truncated, info = jax.tree.map(np.asarray, jax.jit(run)(jax.random.key(3)))
    valid, done = info["valid"], terminated | truncated
    episode_end = done.all(axis=1)
    assert episode_end.sum() >= 2
    left_early = False
    running, start = np.zeros(3), 0
    for t in range(len(reward)):
        running += np.where(valid[t], reward[t], 0.0)
        ends = done[t] & valid[t]
        np.testing.assert_allclose(info["episode_return"][t], np.where(ends, running, 0.0), rtol=1e-5, atol=1e-6)
        running = np.where(ends | episode_end[t], 0.0, running)
        left_early |= bool((ends & ~episode_end[t]).any())
        if episode_end[t]:
            # every agent's episode ended exactly once in this env episode
            np.testing.assert_array_equal((done[start : t + 1] & valid[start : t + 1]).sum(axis=0), np.ones(3))
            start = t + 1
    assert left_early and not valid.all()
    trajectory = jax.tree.map(
        lambda x: x[:, None],
        rollout.Trajectory(
            obs=(), action=(), reward=reward, terminated=terminated, truncated=truncated, next_obs=(),
            episode_return=info["episode_return"], episode_length=info["episode_length"], extras={}, valid=valid,
        ),
    )  # fmt: skip
    metrics = rollout.episode_metrics(trajectory)
    assert int(metrics["episodes"]) == int((done & valid).sum())
    np.testing.assert_allclose(metrics["episode_return"], info["episode_return"][done & valid].mean(), rtol=1e-5)


def test_the_view_refuses_single_agent_envs_and_single_agent_code_refuses_multi_agent_envs():
    with pytest.raises(ValueError, match="single-agent env.*multi-agent"):
        ippo.Config(env_id="CartPole-v1")
    with pytest.raises(ValueError, match="multi-agent env.*use ippo, mappo, iql or vdn"):
        ppo.Config(env_id="MultiAgentClimbing-v0")
    for name in ("a2c", "dqn", "sac", "ddpg", "es", "bc"):
        with pytest.raises(ValueError, match="multi-agent env"):
            get(name).Config(env_id="MultiAgentClimbing-v0")


@struct.dataclass
class MultiAgentA2C(onpolicy.CentralisedCritic, a2c.Config):
    """A2C on a multi-agent env's agents with a centralised critic: the mixin MAPPO's
    Config is built from, on A2C's Config."""


@pytest.mark.parametrize(
    "config, overrides, error, message",
    [
        (ppo.Config, dict(share_parameters=False), TypeError, "share_parameters"),  # one agent: not PPO's
        (ppo.Config, dict(centralised_critic=True), TypeError, "centralised_critic"),
        (ippo.Config, dict(centralised_critic=True), TypeError, "centralised_critic"),  # MAPPO's, not IPPO's
        (mappo.Config, dict(memory="gru", shared_memory=True), ValueError, "set shared_memory=False"),
        (ippo.Config, dict(scale_rewards=True), TypeError, "scale_rewards"),
        (MultiAgentA2C, dict(scale_rewards=True), ValueError, "scale_rewards"),
        (ippo.Config, dict(share_parameters="yes"), ValueError, "share_parameters"),
        (ippo.Config, dict(multi_agent=False), TypeError, "multi_agent"),
    ],
)
def test_bad_multi_agent_settings_are_clear_errors(config, overrides, error, message):
    with pytest.raises(error, match=message):
        config(**overrides)


# ----------------------------------------------------------------------------- what the networks read


def init_params(module, config):
    """``module.init``'s parameters for ``config``, from one compiled program (op by op
    compiles each operation of the init on its own, which takes longer)."""
    return jax.jit(lambda key: module.init(key, config).params)(jax.random.key(0))


def test_mappo_critic_reads_the_global_state_and_ippo_critic_does_not():
    """MAPPO's value depends on the global state and not on the agent's own
    observation, its policy on the observation and not on the global state; IPPO's
    observation has no global state and its value reads the agent's observation."""
    config = mappo.Config(**SMALL)
    params = init_params(mappo, config)
    obs = envs.config_spec(config).zeros((5, 2))
    assert set(obs) == {"observation", "agent_id", "global_state"}
    rng = np.random.default_rng(0)
    obs = jax.tree.map(lambda x: jnp.asarray(rng.uniform(size=x.shape), x.dtype), obs)

    @jax.jit
    def outputs(o):
        distribution, value, _ = onpolicy.policy_and_value(params, o, config)
        return distribution.logits, value

    logits, value = outputs(obs)
    other_state = {**obs, "global_state": obs["global_state"] + 1.0}
    other_obs = {**obs, "observation": obs["observation"] + 1.0}
    assert not np.allclose(outputs(other_state)[1], value)
    np.testing.assert_array_equal(outputs(other_state)[0], logits)
    assert not np.allclose(outputs(other_obs)[0], logits)
    np.testing.assert_array_equal(outputs(other_obs)[1], value)

    config = ippo.Config(**SMALL)
    assert set(envs.config_spec(config).observation) == {"observation", "agent_id"}
    params = init_params(ippo, config)
    value = jax.jit(lambda o: onpolicy.policy_and_value(params, o, config)[1])
    obs = {k: v for k, v in obs.items() if k != "global_state"}
    assert not np.allclose(value({**obs, "observation": obs["observation"] + 1.0}), value(obs))


def test_separate_parameters_give_each_agent_its_own_network():
    """With ``share_parameters=False`` every parameter has a leading agent axis, no
    agent id is observed, and agent ``i``'s outputs are its own network's on its own
    observations (the network applied to the agent's parameter slice alone)."""
    config = mappo.Config(share_parameters=False, memory="gru", memory_size=8, **SMALL)
    params = init_params(mappo, config)
    assert all(leaf.shape[0] == 2 for leaf in jax.tree.leaves(params["network"]))
    assert "agent_id" not in envs.config_spec(config).observation
    rng = np.random.default_rng(1)
    obs = jax.tree.map(
        lambda x: jnp.asarray(rng.normal(size=x.shape), x.dtype), envs.config_spec(config).zeros((3, 5, 2))
    )
    carry = jax.tree.map(lambda c: jnp.asarray(rng.normal(size=c.shape), c.dtype), mappo.initial_carry(config, 5))
    reset = jnp.asarray(rng.uniform(size=(3, 5, 2)) < 0.3)
    distribution, value, next_carry = jax.jit(onpolicy.policy_and_value, static_argnums=2)(
        params, obs, config, carry, reset
    )
    apply = jax.jit(onpolicy.make_network(config).apply)
    for i in range(2):
        own = jax.tree.map(lambda x: x[i], params["network"])
        actor_obs = {"observation": obs["observation"][:, :, i]}
        critic_obs = {"global_state": obs["global_state"][:, :, i]}
        logits, own_value, own_carry = apply(
            own, actor_obs, jax.tree.map(lambda c: c[:, i], carry), reset[:, :, i], critic_obs
        )
        np.testing.assert_allclose(distribution.logits[:, :, i], logits, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(value[:, :, i], own_value, rtol=1e-5, atol=1e-6)
        for ours, theirs in zip(jax.tree.leaves(next_carry), jax.tree.leaves(own_carry)):
            np.testing.assert_allclose(ours[:, i], theirs, rtol=1e-5, atol=1e-6)


def test_mappo_with_memory_on_smax_respects_masks_and_leaves_out_units_that_left():
    """Recurrent MAPPO on SMAX: no masked action is ever sampled, and the learner's update
    is the same when the rewards and observations of units that have left the episode
    (``valid`` False) are replaced by garbage, and differs when a valid step's reward does."""
    pytest.importorskip("jaxmarl")
    config = mappo.Config(
        env_id="jaxmarl:HeuristicEnemySMAX", env_kwargs={"num_allies": 3, "num_enemies": 5}, memory="gru",
        memory_size=8, num_envs=4, num_steps=64, total_timesteps=4 * 64 * 2, hidden_sizes=(16,), num_minibatches=2,
        num_evals=1, eval_episodes=2, num_reports=0,
    )  # fmt: skip
    state = jax.jit(mappo.init, static_argnums=1)(jax.random.key(0), config)  # one program, not op by op
    state, trajectory = jax.jit(onpolicy.collect, static_argnums=3)(state, state.params, jax.random.key(1), config)
    mask, valid = trajectory.obs["action_mask"], trajectory.valid
    assert valid.shape == (64, 4, 3) and not bool(valid.all()) and bool(valid.any())
    assert bool(jnp.take_along_axis(mask, trajectory.action[..., None], -1).all())
    update = jax.jit(mappo.update, static_argnums=3)
    _, metrics = update(state, trajectory, jax.random.key(2), config)
    rng = np.random.default_rng(0)
    garbage = trajectory.replace(
        reward=jnp.where(valid, trajectory.reward, 1e3 * rng.normal(size=valid.shape)),
        obs={**trajectory.obs, "observation": jnp.where(
            valid[..., None], trajectory.obs["observation"], rng.normal(size=trajectory.obs["observation"].shape)
        )},
    )  # fmt: skip
    _, garbage_metrics = update(state, garbage, jax.random.key(2), config)
    for name in ("policy_loss", "value_loss", "entropy", "approx_kl"):
        np.testing.assert_allclose(garbage_metrics[name], metrics[name], rtol=1e-5, atol=1e-6, err_msg=name)
    changed = trajectory.replace(reward=trajectory.reward + 5.0 * valid)
    assert not np.isclose(update(state, changed, jax.random.key(2), config)[1]["value_loss"], metrics["value_loss"])


def test_the_other_on_policy_algorithms_take_the_same_mixin():
    """A2C (and so REINFORCE and IMPALA) trains a multi-agent env with the mixin MAPPO's
    Config is built from."""
    config = MultiAgentA2C(env_id="MultiAgentClimbing-v0", **SMALL_A2C)
    out = jax.jit(get("a2c").train)(jax.random.key(0), config)
    assert np.isfinite(out.metrics["policy_loss"]).all() and np.isfinite(out.metrics["eval_return"][-1])


SMALL_A2C = dict(num_envs=4, num_steps=10, total_timesteps=4 * 10 * 4, hidden_sizes=(16,), num_evals=1, num_reports=0)


# ----------------------------------------------------------------------------- the contract


@pytest.fixture(scope="module")
def train_ippo():
    return jax.jit(ippo.train)


def test_jit_vmap_over_seeds_and_hyperparameters(train_ippo):
    """Seeds and a learning-rate sweep batch into one program, each lane equal to the
    separate run with its key and learning rate; other learning rates compile nothing
    new, and the learning rate reaches the program (two lanes of one key differ)."""
    config = ippo.Config(**SMALL)
    keys = jax.random.split(jax.random.key(1), 2)
    lane_keys, learning_rates = keys[jnp.array([0, 0, 1, 1])], [1e-4, 1e-2, 1e-4, 1e-2]  # seeds x settings
    configs = config.replace(learning_rate=jnp.array(learning_rates))
    sweep = jax.jit(jax.vmap(ippo.train, in_axes=(0, sweep_axes(configs))))
    out = sweep(lane_keys, configs)
    sweep(lane_keys, configs.replace(learning_rate=jnp.array([3e-4, 3e-3, 3e-4, 3e-3])))
    assert sweep._cache_size() == 1
    for i, learning_rate in enumerate(learning_rates):
        single = train_ippo(lane_keys[i], config.replace(learning_rate=learning_rate))
        assert np.isfinite(single.metrics["eval_return"][-1])
        assert single.state.obs["observation"].shape == (4, 2, 6)
        for ours, theirs in zip(jax.tree.leaves(jax.tree.map(lambda x: x[i], out.metrics)),
                                jax.tree.leaves(single.metrics)):  # fmt: skip
            np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)
    assert not np.allclose(out.metrics["policy_loss"][0], out.metrics["policy_loss"][1])
    programs = train_ippo._cache_size()
    train_ippo(keys[0], config.replace(learning_rate=1e-3))
    assert train_ippo._cache_size() == programs


def test_act_evaluates_every_agent_from_params_alone(train_ippo):
    config = ippo.Config(**SMALL)
    params = train_ippo(jax.random.key(2), config).state.params
    obs, _ = jax.vmap(ma.make_agent_batch("MultiAgentClimbing-v0", agent_id=True)[0].reset)(
        jax.random.split(jax.random.key(0), 3)
    )
    action, carry = ippo.act(params, obs, ippo.initial_carry(config, 3), jax.random.key(1), config, deterministic=True)
    assert action.shape == (3, 2) and action.dtype == jnp.int32 and carry == ()
    result = ippo.evaluate(params, jax.random.key(3), config)
    assert result.returns.shape == (4,) and np.all(result.lengths == 10)


def runner_config():
    """Recurrent MAPPO on simple_spread, 6 iterations in chunks of 2 (a function: the env
    needs jaxmarl). The runner's test and the command line's build this same config, so
    the command line reuses the runner's compiled programs."""
    return mappo.Config(env_id=SPREAD, **{**SMALL, "total_timesteps": 4 * 10 * 6, "memory": "gru", "memory_size": 8})


COMMAND = ["train", "mappo", "--env", SPREAD, "--total-timesteps", "240", "--seeds", "2", "--chunks", "3"]
for setting in ("num_envs=4", "num_steps=10", "num_epochs=2", "num_minibatches=2", "hidden_sizes=16", "num_evals=2",
                "eval_episodes=4", "num_reports=0", "memory=gru", "memory_size=8"):  # fmt: skip
    COMMAND += ["--set", setting]


def test_runner_checkpoints_and_resumes_exactly(tmp_path):
    pytest.importorskip("jaxmarl")
    kwargs = dict(seeds=2, chunk_iterations=2)
    config = runner_config()
    straight = runner.run("mappo", config, **kwargs, options=RunOptions(tmp_path / "straight", checkpoint_every=1))
    import shutil

    shutil.copytree(tmp_path / "straight", tmp_path / "resumed")
    last = max((tmp_path / "resumed" / "checkpoints").iterdir(), key=lambda p: int(p.name))
    shutil.rmtree(last)
    resumed = runner.run(
        "mappo", config, **kwargs, options=RunOptions(tmp_path / "resumed", checkpoint_every=1, resume=True)
    )
    for name, values in straight.metrics.items():
        np.testing.assert_array_equal(resumed.metrics[name], values, err_msg=name)
    for ours, theirs in zip(jax.tree.leaves(resumed.state), jax.tree.leaves(straight.state)):
        if not jax.dtypes.issubdtype(ours.dtype, jax.dtypes.prng_key):
            np.testing.assert_array_equal(ours, theirs)


def test_command_line_trains_mappo_on_mpe(tmp_path, capsys):
    from jaxrl.envs import jaxmarl as adapter

    with adapter._quiet_stdout():  # jaxmarl's first import swaps sys.stdout (capsys's) for the real one
        pytest.importorskip("jaxmarl")
    assert cli.make_config(get("mappo"), cli.build_parser().parse_args(COMMAND)) == runner_config()
    assert cli.main([*COMMAND, "--no-progress", "--no-cache", "--json", str(tmp_path / "summary.json")]) == 0
    assert f"mappo on {SPREAD}" in capsys.readouterr().out
    assert (tmp_path / "summary.json").exists()


# ----------------------------------------------------------------------------- learning


def random_return(env_id: str, episodes: int = 2000) -> float:
    """The mean agent's return of uniformly random play (the evaluation's measure)."""
    view, params = ma.make_agent_batch(env_id)
    spec = envs.spec(view, params)

    def act(_, obs, carry, key):
        keys = jax.random.split(key, episodes)
        return jax.vmap(lambda k, o: random_joint_actions(k, o, view.num_agents, spec.num_actions))(keys, obs), carry

    return float(jnp.mean(evaluation.evaluate(act, None, view, jax.random.key(0), episodes, params).returns))


@pytest.mark.slow
def test_random_play_on_simple_spread_scores_the_learning_tables_baseline():
    """MPE simple_spread (3 agents, 25 steps, per-agent reward): uniform random play returns
    about -26.3 per agent, the baseline under benchmarks/learning_table.py's reference
    for IPPO's and MAPPO's rows (random + 3; MAPPO's learning test became that row for
    the suite's time budget)."""
    pytest.importorskip("jaxmarl")
    assert -27.5 < random_return(SPREAD) < -25.0
