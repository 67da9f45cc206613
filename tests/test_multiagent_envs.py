"""The multi-agent env API, the built-in climbing game against a NumPy reference of its
rules, and the ``jaxmarl:`` adapter against JaxMARL's own API step by step."""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from jaxrl import envs
from jaxrl.envs import multiagent as ma

AGENTS = ("agent_0", "agent_1")


# ----------------------------------------------------------------------------- the built-in task


def climbing_reference(table: int, joint_actions: np.ndarray, rounds: int):
    """The climbing game's rules in NumPy for one episode played from its reset:
    per round the shared reward, each agent's observation after it, and the end flag."""
    payoff = np.array([[11, -30, 0], [-30, 7, 6], [0, 0, 5]], np.float32)
    if table == 1:  # actions relabelled: new action i is old action [2, 0, 1][i]
        payoff = payoff[np.ix_([2, 0, 1], [2, 0, 1])]
    out = []
    for t, (a0, a1) in enumerate(joint_actions, start=1):
        obs = []
        for own in (a0, a1):
            o = np.zeros(6, np.float32)
            o[table] = 1.0
            o[2 + own] = 1.0
            o[5] = t / rounds
            obs.append(o)
        out.append((payoff[a0, a1], obs, t >= rounds))
    return out


def test_climbing_matches_numpy_rules_across_auto_reset():
    env, params = envs.make("MultiAgentClimbing-v0", max_steps_in_episode=4)
    step = jax.jit(env.step)
    rng = np.random.default_rng(0)
    obs, state = env.reset(jax.random.key(0), params)
    np.testing.assert_array_equal(obs["agent_0"][2:], np.zeros(4))  # nothing played yet
    key = jax.random.key(1)
    for _ in range(3):  # three episodes, two auto-resets
        table = int(state.table)
        joint = rng.integers(0, 3, size=(4, 2))
        for (reward, ref_obs, end), (a0, a1) in zip(climbing_reference(table, joint, 4), joint, strict=True):
            key, sub = jax.random.split(key)
            obs, state, rewards, terminated, truncated, info = step(sub, state, {"agent_0": a0, "agent_1": a1}, params)
            for i, agent in enumerate(AGENTS):
                assert rewards[agent].dtype == jnp.float32 and rewards[agent].shape == ()
                assert float(rewards[agent]) == reward
                assert bool(terminated[agent]) == end and not bool(truncated[agent])
                np.testing.assert_allclose(info["final_observation"][agent], ref_obs[i])
            assert bool(info["episode_done"]) == end
            final_global = np.concatenate([ref_obs[0][:2], ref_obs[0][2:5], ref_obs[1][2:5], ref_obs[0][5:]])
            np.testing.assert_allclose(info["final_global_state"], final_global)
            np.testing.assert_allclose(info["global_state"], env.global_state(state, params))
            if end:  # the returned observation starts the next episode
                assert int(state.time) == 0
                np.testing.assert_array_equal(obs["agent_0"][2:], np.zeros(4))


@pytest.mark.slow
def test_climbing_optimum_and_random_returns():
    # NumPy: the optimum per table, and the exact and sampled returns of random play.
    rounds = 10
    tables = [climbing_reference(t, np.array([[a0, a1]]), 1) for t in (0, 1) for a0 in range(3) for a1 in range(3)]
    payoffs = np.array([r[0][0] for r in tables]).reshape(2, 3, 3)
    np.testing.assert_array_equal(payoffs, ma.CLIMBING_PAYOFF)
    assert payoffs[0].max() == payoffs[0, 0, 0] == 11 and payoffs[1].max() == payoffs[1, 1, 1] == 11
    assert rounds * payoffs.max() == 110
    assert rounds * payoffs.mean() == pytest.approx(-310 / 9)  # random play, in expectation
    env, params = envs.make("MultiAgentClimbing-v0")
    env = ma.EpisodeStatistics(env)

    # The env under jit, played at random for 4,000 episodes: each agent's return
    # averages the reference's -310/9 (standard error about 0.8).
    def random_play(key):
        def body(carry, key):
            obs, state = carry
            act_key, step_key = jax.random.split(key)
            actions = dict(zip(AGENTS, jax.random.randint(act_key, (2,), 0, 3), strict=True))
            obs, state, *_, info = env.step(step_key, state, actions, params)
            return (obs, state), info

        reset_key, key = jax.random.split(key)
        return jax.lax.scan(body, env.reset(reset_key, params), jax.random.split(key, rounds))[1]

    info = jax.jit(jax.vmap(random_play))(jax.random.split(jax.random.key(1), 4000))
    assert np.asarray(info["episode_done"])[:, -1].all()
    for agent in AGENTS:
        assert np.asarray(info["agent_episode_returns"][agent])[:, -1].mean() == pytest.approx(-310 / 9, abs=2.5)

    # The optimal policy earns 110 per agent, 220 for the team.
    best = jnp.array([0, 1])  # table 0: (0, 0); table 1: (1, 1)
    obs, state = env.reset(jax.random.key(0), params)
    np.testing.assert_array_equal(env.global_state(state, params)[:2], obs["agent_0"][:2])  # unwrapped

    def run(key):
        def body(carry, key):
            obs, state = carry
            # Each agent reads the table from its own observation: no communication needed.
            actions = {a: best[jnp.argmax(obs[a][:2])] for a in AGENTS}
            obs, state, *_, info = env.step(key, state, actions, params)
            return (obs, state), info

        _, info = jax.lax.scan(body, env.reset(key, params), jax.random.split(key, 20))
        return info

    info = jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(0), 4))
    done = np.asarray(info["episode_done"])
    assert done.sum() == 8 and done[:, 9].all() and done[:, 19].all()
    np.testing.assert_allclose(np.asarray(info["episode_return"])[done], 220.0)
    for agent in AGENTS:
        np.testing.assert_allclose(np.asarray(info["agent_episode_returns"][agent])[done], 110.0)
    np.testing.assert_array_equal(np.asarray(info["episode_length"])[done], 10)
    assert np.all(np.asarray(info["episode_return"])[~done] == 0.0)


def test_spec_vmap_jit_and_resets_differ():
    env, params = envs.make("MultiAgentClimbing-v0")
    s = ma.spec(env, params)
    assert s.agents == AGENTS and s.homogeneous and s.num_agents == 2 and s.max_episode_steps == 10
    assert s.agent.discrete and s.agent.num_actions == 3 and s.agent.obs_shape == (6,)
    assert s.global_state == jax.ShapeDtypeStruct((9,), jnp.float32)
    assert s.action_kinds == {a: "discrete" for a in AGENTS}
    keys = jax.random.split(jax.random.key(3), 2)
    obs, state = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, params)
    assert obs["agent_0"].shape == (2, 6)
    first = [int(env.reset(jax.random.key(i), params)[1].table) for i in range(8)]
    assert len(set(first)) == 2  # resets draw different tables
    actions = {a: jnp.zeros((2,), jnp.int32) for a in AGENTS}
    out = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))(keys, state, actions, params)
    assert out[2]["agent_1"].shape == (2,) and out[5]["global_state"].shape == (2, 9)


def test_stack_unstack_round_trip_and_heterogeneous_refusal():
    tree = {a: {"x": jnp.full((3, 4), i, jnp.float32), "m": jnp.array([True, i == 1])} for i, a in enumerate(AGENTS)}
    stacked = ma.stack(tree, AGENTS)
    assert stacked["x"].shape == (2, 3, 4) and stacked["m"].shape == (2, 2)
    back = ma.unstack(stacked, AGENTS)
    jax.tree.map(np.testing.assert_array_equal, back, tree)
    batched = ma.stack(tree, AGENTS, axis=1)  # [N, A, ...] for per-env leaves [N, ...]
    assert batched["x"].shape == (3, 2, 4)
    jax.tree.map(
        np.testing.assert_array_equal, ma.unstack(batched, AGENTS, axis=1)["agent_1"]["x"], tree["agent_1"]["x"]
    )
    with pytest.raises(ValueError, match="padding heterogeneous agents is not supported"):
        ma.stack({"agent_0": jnp.zeros(3), "agent_1": jnp.zeros(4)}, AGENTS)
    with pytest.raises(ValueError, match="padding heterogeneous agents is not supported"):
        ma.stack({"agent_0": jnp.zeros(3), "agent_1": jnp.zeros(3, jnp.int32)}, AGENTS)
    with pytest.raises(ValueError, match="2 agents"):
        ma.unstack(jnp.zeros((3, 5)), AGENTS)


class _Heterogeneous(ma.ClimbingGame):
    def observation_space(self, params, agent):
        return spaces.Box(0.0, 1.0, (6 if agent == "agent_0" else 7,), jnp.float32)


def test_heterogeneous_spec():
    env = _Heterogeneous()
    s = ma.spec(env, env.default_params)
    assert not s.homogeneous
    assert s.observations["agent_1"].shape == (7,)
    with pytest.raises(ValueError, match="cannot be stacked"):
        _ = s.agent


def test_single_agent_code_refuses_multi_agent_env():
    from jaxrl.algorithms import ppo

    env, params = envs.make("MultiAgentClimbing-v0")
    with pytest.raises(ValueError, match="multi-agent env"):
        envs.spec(env, params)
    with pytest.raises(ValueError, match="multi-agent env"):
        envs.spec(ma.EpisodeStatistics(env), params)
    with pytest.raises(ValueError, match="multi-agent env"):
        ppo.Config(env_id="MultiAgentClimbing-v0")
    with pytest.raises(ValueError, match="single-agent env"):
        ma.spec(*envs.make("CartPole-v1"))


def test_unknown_ids_and_parameters():
    with pytest.raises(ValueError, match="MPE_simple_spread_v3"):
        envs.check_env_id("jaxmarl:MPE_simple_sprad_v3")
    with pytest.raises(ValueError, match="unsupported jaxmarl env 'nope'"):
        envs.make("jaxmarl:nope")
    with pytest.raises(ValueError, match="unknown env parameter"):
        envs.make("MultiAgentClimbing-v0", rounds=3)


def test_missing_extra_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "jaxmarl", None)  # import jaxmarl now raises ImportError
    with pytest.raises(ImportError, match=r'pip install "jaxrl\[marl\]"'):
        envs.make("jaxmarl:MPE_simple_spread_v3")


# ----------------------------------------------------------------------------- jaxmarl


def _assert_tree_equal(a, b):
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), a, b)


@pytest.mark.slow
def test_mpe_against_jaxmarl_step_by_step_and_time_limit():
    jaxmarl = pytest.importorskip("jaxmarl")
    env, params = envs.make("jaxmarl:MPE_simple_spread_v3", max_steps_in_episode=4)
    assert env.agents == ("agent_0", "agent_1", "agent_2") and params.max_steps_in_episode == 4
    assert envs.make("jaxmarl:MPE_simple_spread_v3")[1].max_steps_in_episode == 25  # JaxMARL's max_steps
    # JaxMARL's own time limit: max_steps=3 ends its episodes after 4 steps, as one done flag.
    ref = jaxmarl.make("MPE_simple_spread_v3", max_steps=3)
    step = jax.jit(env.step)
    key = jax.random.key(7)
    obs, state = env.reset(key, params)
    ref_obs, ref_state = ref.reset(key)
    _assert_tree_equal(obs, ref_obs)
    assert obs["agent_0"].dtype == jnp.float32 and obs["agent_0"].shape == (18,)
    rng = np.random.default_rng(0)
    for t in range(1, 7):
        actions = {a: jnp.asarray(rng.integers(0, 5), jnp.int32) for a in env.agents}
        key, sub = jax.random.split(key)
        obs, state, rewards, terminated, truncated, info = step(sub, state, actions, params)
        before = ref_state
        ref_obs, ref_state, ref_rewards, ref_dones, _ = ref.step(sub, ref_state, actions)
        _assert_tree_equal(obs, ref_obs)  # after the reset too: the same reset key
        _assert_tree_equal(rewards, {a: ref_rewards[a] for a in env.agents})
        end = t == 4
        assert bool(ref_dones["__all__"]) == end
        for a in env.agents:
            assert rewards[a].dtype == jnp.float32 and terminated[a].dtype == jnp.bool_
            assert not bool(terminated[a]) and bool(truncated[a]) == end  # a time limit truncates
        assert bool(info["episode_done"]) == end
        np.testing.assert_array_equal(
            info["global_state"], np.concatenate([np.asarray(ref_obs[a]) for a in env.agents])
        )
        if end:
            # The true last observation: JaxMARL's step without its reset.
            last, *_ = ref.step_env(jax.random.split(sub)[0], before, actions)
            _assert_tree_equal(info["final_observation"], last)
            np.testing.assert_array_equal(
                info["final_global_state"], np.concatenate([np.asarray(last[a]) for a in env.agents])
            )
            assert int(state.time) == 0
        else:
            _assert_tree_equal(info["final_observation"], obs)


@pytest.mark.slow
def test_mpe_registry_vmap_and_refusals():
    pytest.importorskip("jaxmarl")
    from jaxrl.algorithms import ppo

    env, params = envs.make("jaxmarl:MPE_simple_spread_v3")
    s = ma.spec(env, params)
    assert s.homogeneous and s.agent.num_actions == 5 and s.global_state.shape == (54,)
    keys = jax.random.split(jax.random.key(0), 2)
    obs, state = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, params)
    assert obs["agent_0"].shape == (2, 18)
    assert not np.array_equal(obs["agent_0"][0], obs["agent_0"][1])  # two resets differ
    stacked = ma.stack(obs, env.agents, axis=1)
    assert stacked.shape == (2, 3, 18)
    actions = ma.unstack(jnp.zeros((2, 3), jnp.int32), env.agents, axis=1)
    out = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))(keys, state, actions, params)
    assert out[2]["agent_2"].shape == (2,) and out[5]["global_state"].shape == (2, 54)
    with pytest.raises(ValueError, match="multi-agent env"):
        envs.spec(env, params)
    with pytest.raises(ValueError, match="multi-agent env"):
        ppo.Config(env_id="jaxmarl:MPE_simple_spread_v3")
    with pytest.raises(ValueError, match="max_steps_in_episode"):
        envs.make("jaxmarl:MPE_simple_spread_v3", max_steps=5)


@pytest.mark.slow
def test_smax_action_masks_and_world_state():
    jaxmarl = pytest.importorskip("jaxmarl")
    kwargs = dict(num_allies=3, num_enemies=5)
    env, params = envs.make("jaxmarl:HeuristicEnemySMAX", **kwargs)
    assert env.agents == ("ally_0", "ally_1", "ally_2") and params.max_steps_in_episode == 100
    s = ma.spec(env, params)
    assert s.homogeneous and s.agent.action_mask and s.agent.num_actions == 5 + 5  # moves, then one attack per enemy
    ref = jaxmarl.make("HeuristicEnemySMAX", **kwargs)
    key = jax.random.key(1)
    obs, state = env.reset(key, params)
    ref_obs, ref_state = ref.reset(key)
    mask = ref.get_avail_actions(ref_state)
    for a in env.agents:
        np.testing.assert_array_equal(obs[a]["observation"], ref_obs[a])
        assert obs[a]["action_mask"].dtype == jnp.bool_
        np.testing.assert_array_equal(obs[a]["action_mask"], np.asarray(mask[a], bool))
    np.testing.assert_array_equal(env.global_state(state, params), ref_obs["world_state"])
    assert s.global_state.shape == ref_obs["world_state"].shape
    actions = {a: jnp.asarray(1, jnp.int32) for a in env.agents}
    obs, state, rewards, terminated, truncated, info = jax.jit(env.step)(key, state, actions, params)
    ref_obs, ref_state, ref_rewards, ref_dones, _ = ref.step(key, ref_state, actions)
    for a in env.agents:
        np.testing.assert_array_equal(obs[a]["observation"], ref_obs[a])
        assert float(rewards[a]) == float(ref_rewards[a])
        assert bool(terminated[a]) == bool(ref_dones[a]) and not bool(truncated[a])
        assert bool(info["active"][a])
    np.testing.assert_array_equal(info["global_state"], ref_obs["world_state"])


@pytest.mark.slow
def test_smax_agents_that_leave_early_stay_terminated_and_inactive():
    pytest.importorskip("jaxmarl")
    env, params = envs.make("jaxmarl:HeuristicEnemySMAX", num_allies=3, num_enemies=5)
    agents = env.agents

    def run(key):
        def body(carry, key):
            obs, state = carry
            keys = jax.random.split(key, len(agents) + 1)
            # Uniform over the legal actions: dead units may only take the no-op.
            actions = {
                a: jax.random.categorical(k, jnp.where(obs[a]["action_mask"], 0.0, -jnp.inf)).astype(jnp.int32)
                for a, k in zip(agents, keys[1:], strict=True)
            }
            obs, state, _, terminated, truncated, info = env.step(keys[0], state, actions, params)
            return (obs, state), (terminated, truncated, info["active"], info["episode_done"])

        return jax.lax.scan(body, env.reset(key, params), jax.random.split(key, 60))[1]

    terminated, truncated, active, done = jax.jit(run)(jax.random.key(3))
    terminated, truncated, active = (
        np.stack([np.asarray(x[a]) for a in agents], 1) for x in (terminated, truncated, active)
    )
    done = np.asarray(done)
    assert done.any() and not truncated.any()
    np.testing.assert_array_equal(done, terminated.all(axis=1))  # the episode ends when every agent has
    left_early = False
    start = 0
    for end in np.nonzero(done)[0]:
        episode = terminated[start : end + 1]
        for i in range(len(agents)):
            first = int(np.argmax(episode[:, i]))
            assert episode[first:, i].all()  # once terminated, terminated until the reset
            np.testing.assert_array_equal(active[start : end + 1, i], np.arange(end + 1 - start) <= first)
            left_early |= first < end - start
        start = end + 1
    assert left_early  # some unit died before its episode ended
