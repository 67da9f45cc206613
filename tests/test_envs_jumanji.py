"""The ``jumanji:`` adapter (jaxrl.envs.jumanji): Knapsack-v1 (one discrete action, an
action mask) checked step by step against jumanji's own reset and step from the same
state and key; Minesweeper-v0's two-part action flattened into one; jumanji's own time
limit (Maze-v0) and a smaller ``max_steps_in_episode`` as truncation; vmap, spaces and
errors; and PPO learning a small knapsack without ever choosing a masked item."""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import envs, evaluation, rollout
from jaxrl.algorithms import ppo

jumanji = pytest.importorskip("jumanji")
from jumanji.environments.packing.knapsack.generator import RandomGenerator  # noqa: E402
from jumanji.environments.routing.maze.generator import RandomGenerator as MazeGenerator  # noqa: E402

KNAPSACK_FIELDS = ("weights", "values", "packed_items", "action_mask")


def _masked_uniform(key, mask):
    return jax.random.categorical(key, jnp.where(mask, 0.0, -jnp.inf)).astype(jnp.int32)


def _assert_matches(obs: dict, jumanji_obs, fields=KNAPSACK_FIELDS):
    assert sorted(obs) == sorted(fields)
    for field in fields:
        expected = np.asarray(getattr(jumanji_obs, field))
        assert obs[field].dtype == expected.dtype and obs[field].shape == expected.shape, field
        np.testing.assert_array_equal(obs[field], expected, err_msg=field)


@pytest.fixture(scope="module")
def knapsack():
    env, params = envs.make("jumanji:Knapsack-v1")
    reference = jumanji.make("Knapsack-v1")  # jumanji's own, built apart from the adapter
    return env, params, jax.jit(env.reset), jax.jit(env.step), jax.jit(reference.reset), jax.jit(reference.step)


@pytest.mark.slow
def test_knapsack_follows_jumanji_step_by_step(knapsack):
    """Random play (masked uniform, and one masked item chosen on purpose, which jumanji
    ends with reward 0): every observation, reward and end is jumanji's from the same
    state; LAST with discount 0 is ``terminated``; the final observation is jumanji's,
    and the automatic reset is jumanji's reset with the step's reset key."""
    env, params, reset, step, jumanji_reset, jumanji_step = knapsack
    assert params.max_steps_in_episode == 10_000 and env.time_limit is None  # Knapsack has no time limit
    key = jax.random.key(0)
    obs, state = reset(key, params)
    jumanji_state, timestep = jumanji_reset(key)
    _assert_matches(obs, timestep.observation)
    rng = np.random.default_rng(0)
    ends, steps, t, invalid_end = 0, 0, 0, False
    while ends < 3:
        key, action_key, step_key = jax.random.split(key, 3)
        mask = np.asarray(obs["action_mask"])
        if ends == 1 and t == 2:  # a masked item (one packed already): jumanji ends the episode
            action = jnp.int32(rng.choice(np.flatnonzero(~mask)))
        else:
            action = _masked_uniform(action_key, obs["action_mask"])
        obs, state, reward, terminated, truncated, info = step(step_key, state, action, params)
        jumanji_state, timestep = jumanji_step(jumanji_state, action)
        steps, t = steps + 1, t + 1
        assert reward.dtype == jnp.float32 and float(reward) == float(timestep.reward)
        assert not bool(truncated)
        assert bool(terminated) == (int(timestep.step_type) == 2) and float(timestep.discount) in (0.0, 1.0)
        _assert_matches(info["final_observation"], timestep.observation)
        if bool(terminated):
            assert float(timestep.discount) == 0.0
            if not mask[int(action)]:
                invalid_end = True
                assert float(reward) == 0.0 and np.any(np.asarray(info["final_observation"]["action_mask"]))
            ends, t = ends + 1, 0
            jumanji_state, timestep = jumanji_reset(jax.random.split(step_key)[1])
            _assert_matches(obs, timestep.observation)
            assert not np.any(obs["packed_items"])
        else:
            _assert_matches(obs, timestep.observation)
    assert invalid_end and steps > 40


def test_a_smaller_time_limit_truncates(knapsack):
    env, _, reset, step, *_ = knapsack
    params = envs.make("jumanji:Knapsack-v1", max_steps_in_episode=3)[1]
    obs, state = reset(jax.random.key(1), params)
    for t in range(1, 4):
        before = obs
        action = jnp.argmax(obs["action_mask"]).astype(jnp.int32)
        obs, state, reward, terminated, truncated, info = step(jax.random.key(10 + t), state, action, params)
        assert not bool(terminated) and bool(truncated) == (t == 3) and float(reward) > 0.0
        final = info["final_observation"]
        assert int(np.sum(final["packed_items"])) == t and bool(final["packed_items"][int(action)])
        np.testing.assert_array_equal(final["values"], before["values"])
    assert not np.any(obs["packed_items"]) and int(state.time) == 0  # a new episode
    assert not np.array_equal(obs["values"], final["values"])
    # An episode that ends both ways at once (a packed item chosen again at the limit) is terminated.
    params = params.replace(max_steps_in_episode=2)
    obs, state = reset(jax.random.key(2), params)
    action = jnp.argmax(obs["action_mask"]).astype(jnp.int32)
    out = step(jax.random.key(20), state, action, params)
    out = step(jax.random.key(21), out[1], action, params)
    assert bool(out[3]) and not bool(out[4]) and float(out[2]) == 0.0


@pytest.mark.slow
def test_resets_differ_and_vmap_over_seeds(knapsack):
    env, params, *_ = knapsack
    keys = jax.random.split(jax.random.key(2), 2)
    obs, state = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, params)
    assert obs["weights"].shape == (2, 50) and obs["weights"].dtype == jnp.float32
    assert obs["action_mask"].shape == (2, 50) and obs["action_mask"].dtype == jnp.bool_
    assert not np.array_equal(obs["weights"][0], obs["weights"][1])
    action = jnp.argmax(obs["action_mask"], axis=-1)
    out = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))(keys, state, action, params)
    assert out[2].shape == (2,) and out[2].dtype == jnp.float32
    assert out[3].shape == (2,) and out[3].dtype == jnp.bool_ and out[4].dtype == jnp.bool_
    assert np.all(np.asarray(out[0]["packed_items"]).sum(-1) == 1)


def test_the_spaces_and_spec_describe_the_observations(knapsack):
    env, params, *_ = knapsack
    spec = envs.spec(env, params)
    assert spec.discrete and spec.num_actions == 50 and spec.action_mask and spec.max_episode_steps == 10_000
    assert jax.tree.map(lambda leaf: (leaf.shape, leaf.dtype), spec.observation) == {
        "weights": ((50,), np.dtype(np.float32)),
        "values": ((50,), np.dtype(np.float32)),
        "packed_items": ((50,), np.dtype(bool)),
        "action_mask": ((50,), np.dtype(bool)),
    }
    space = env.observation_space(params).spaces
    assert float(np.max(space["weights"].high)) == 1.0 and float(np.min(space["values"].low)) == 0.0


@pytest.mark.slow
def test_minesweeper_actions_are_flattened_cells():
    """Minesweeper-v0's action is (row, col) with a joint [10, 10] mask: one Discrete(100),
    action ``10 * row + col``, the mask flattened the same way; each step is jumanji's
    with the unravelled action."""
    env, params = envs.make("jumanji:Minesweeper-v0")
    assert env.num_values == (10, 10) and env.action_space(params).n == 100
    assert env.observation_space(params).spaces["action_mask"].shape == (100,)
    reference = jumanji.make("Minesweeper-v0")
    reset, step, jumanji_step = jax.jit(env.reset), jax.jit(env.step), jax.jit(reference.step)
    fields = ("board", "action_mask", "num_mines", "step_count")
    key = jax.random.key(3)
    obs, state = reset(key, params)
    jumanji_state, timestep = jax.jit(reference.reset)(key)
    for t in range(4):
        np.testing.assert_array_equal(obs["action_mask"], np.asarray(timestep.observation.action_mask).reshape(-1))
        for field in ("board", "num_mines", "step_count"):
            np.testing.assert_array_equal(obs[field], getattr(timestep.observation, field))
        action = _masked_uniform(jax.random.key(30 + t), obs["action_mask"])
        obs, state, reward, terminated, truncated, info = step(jax.random.key(40 + t), state, action, params)
        jumanji_state, timestep = jumanji_step(jumanji_state, jnp.stack(jnp.divmod(action, 10)).astype(jnp.int32))
        assert float(reward) == float(timestep.reward)
        assert bool(terminated) == (int(timestep.step_type) == 2) and not bool(truncated)
        assert sorted(info["final_observation"]) == sorted(fields)
        if bool(terminated):  # hit a mine: the board is new, the flattened mask of jumanji's last one
            break
        assert not bool(obs["action_mask"][int(action)])  # the revealed cell is masked now


@pytest.mark.slow
def test_jumanjis_own_time_limit_is_truncation():
    """Jumanji's Maze-v0 ends its time limit (num_rows * num_cols steps) as termination,
    discount 0; the adapter ends it ``truncated`` at the same step. Walking back and forth
    between two cells, the target is never reached."""
    small = {"generator": MazeGenerator(num_rows=5, num_cols=5)}
    env, params = envs.make("jumanji:Maze-v0", **small)
    assert params.max_steps_in_episode == 25 and env.time_limit == 25
    reference = jumanji.make("Maze-v0", **small)
    step, jumanji_step = jax.jit(env.step), jax.jit(reference.step)
    key = jax.random.key(4)
    obs, state = jax.jit(env.reset)(key, params)
    jumanji_state, timestep = jax.jit(reference.reset)(key)
    first = int(jnp.argmax(obs["action_mask"]))
    actions = [first, (first + 2) % 4]  # up/down or right/left: there and back
    for t in range(1, 26):
        action = jnp.int32(actions[(t - 1) % 2])
        obs, state, reward, terminated, truncated, info = step(jax.random.key(t), state, action, params)
        jumanji_state, timestep = jumanji_step(jumanji_state, action)
        assert float(reward) == float(timestep.reward) == 0.0
        np.testing.assert_array_equal(
            info["final_observation"]["agent_position.row"], timestep.observation.agent_position.row
        )
        assert not bool(terminated) and bool(truncated) == (t == 25)
        assert (int(timestep.step_type) == 2) == (t == 25)
    assert float(timestep.discount) == 0.0  # jumanji's own reading: termination
    assert int(info["final_observation"]["step_count"]) == 25 and int(obs["step_count"]) == 0


def test_unknown_ids_refused_envs_and_bad_parameters():
    with pytest.raises(ValueError, match="unknown jumanji env 'Knapsak-v1'.*jumanji ids: .*Knapsack-v1"):
        envs.make("jumanji:Knapsak-v1")
    with pytest.raises(ValueError, match="unknown jumanji env"):
        envs.check_env_id("jumanji:NoSuchGame-v0")
    with pytest.raises(ValueError, match="downloads its data"):
        envs.check_env_id("jumanji:Sokoban-v0")  # refused before jumanji would try the network
    for bad in (0, -3, 2.5, True, "10"):
        with pytest.raises(ValueError, match="max_steps_in_episode must be a positive int for jumanji:Knapsack-v1"):
            envs.make("jumanji:Knapsack-v1", max_steps_in_episode=bad)
    with pytest.raises(ValueError, match=r"unknown env parameter\(s\) \['num_items'\].*\['generator', 'reward_fn'"):
        envs.make("jumanji:Knapsack-v1", num_items=10)
    with pytest.raises(ValueError, match="set the time limit with max_steps_in_episode"):
        envs.make("jumanji:Snake-v1", time_limit=50)
    with pytest.raises(ValueError, match="Cleaner-v0's action is several discrete values.*only single discrete"):
        envs.make("jumanji:Cleaner-v0")
    with pytest.raises(ValueError, match="LevelBasedForaging-v0 gives a reward per agent"):
        envs.make("jumanji:LevelBasedForaging-v0")
    with pytest.raises(ValueError, match="MultiCVRP-v0's action spec is BoundedArray.*only single discrete"):
        envs.make("jumanji:MultiCVRP-v0")


def test_a_missing_jumanji_says_how_to_install_it(monkeypatch):
    from jaxrl.envs import jumanji as adapter

    monkeypatch.setitem(sys.modules, "jumanji", None)
    with pytest.raises(ImportError, match=r'pip install "jaxrl\[jumanji\]"'):
        adapter.require_jumanji()


# ----------------------------------------------------------------------------- learning, masks respected

# PPO on a small Knapsack (20 items of uniform [0, 1] weight and value, budget 5; dense
# reward: each packed item's value): 4 seeds x 200,000 steps (16 envs x 32 steps x 390
# iterations), about 25 s on 2 CPU cores including the compile. A uniformly random choice
# among the allowed items packs 5.64 on average (the test measures it, 1024 episodes), the
# greedy value/weight rule 7.87; the final evaluation (64 episodes) must reach the random
# policy's mean + 1.0 (6.64) in 3 of 4 seeds (seen: 7.15, 7.41, 7.26, 6.96).
SEEDS = 4
MARGIN = 1.0
SMALL_KNAPSACK = {"generator": RandomGenerator(num_items=20, total_budget=5.0)}
CONFIG = dict(
    env_id="jumanji:Knapsack-v1",
    env_kwargs=SMALL_KNAPSACK,
    num_envs=16,
    num_steps=32,
    total_timesteps=200_000,
    hidden_sizes=(64, 64),
    learning_rate=3e-3,
    gamma=1.0,
    ent_coef=0.0,
    num_evals=4,
    eval_episodes=64,
    num_reports=0,
)


@pytest.fixture(scope="module")
def trained():
    config = ppo.Config(**CONFIG)
    out = jax.jit(jax.vmap(ppo.train, in_axes=(0, None)))(jax.random.split(jax.random.key(0), SEEDS), config)
    return config, out


@pytest.mark.learns
@pytest.mark.optimised
def test_ppo_packs_a_small_knapsack_better_than_random(trained):
    config, out = trained
    env, params = envs.make("jumanji:Knapsack-v1", **SMALL_KNAPSACK)

    def uniform(_, obs, carry, key):
        return jax.vmap(_masked_uniform)(jax.random.split(key, obs["action_mask"].shape[0]), obs["action_mask"]), carry

    random = jax.jit(lambda key: evaluation.evaluate(uniform, None, env, key, 1024, params, max_steps=21))
    random_return = float(jnp.mean(random(jax.random.key(5)).returns))
    assert 5.3 < random_return < 5.9, random_return
    evals = np.asarray(out.metrics["eval_return"])
    final = np.array([seed[np.isfinite(seed)][-1] for seed in evals])
    assert np.sum(final >= random_return + MARGIN) >= 3, (final, random_return)


@pytest.mark.slow
def test_the_trained_policy_never_chooses_a_masked_item(trained):
    """Sampled actions of each seed's trained policy, 16 envs x 64 steps: every action is
    allowed by its observation's mask, and every episode ends the valid way (jumanji ends
    an episode early, with items still fitting, after a masked choice)."""
    config, out = trained
    env, params = envs.make("jumanji:Knapsack-v1", **SMALL_KNAPSACK)
    env = envs.EpisodeStatistics(env)

    def play(policy_params, key):
        obs, env_state = rollout.reset(env, params, key, 16)
        policy = lambda obs, carry, key: (*ppo.act(policy_params, obs, carry, key, config), {})  # noqa: E731
        trajectory, *_ = rollout.collect(env, params, policy, env_state, obs, key, 64)
        return trajectory

    trajectory = jax.jit(jax.vmap(play))(out.state.params, jax.random.split(jax.random.key(6), SEEDS))
    mask, action = np.asarray(trajectory.obs["action_mask"]), np.asarray(trajectory.action)
    assert np.all(np.take_along_axis(mask, action[..., None], axis=-1))
    terminated = np.asarray(trajectory.terminated)
    assert terminated.sum() > SEEDS * 16 * 3  # several episodes each
    assert not np.any(np.asarray(trajectory.next_obs["action_mask"])[terminated])  # nothing fits at each end
