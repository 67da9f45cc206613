"""The ``pgx:`` adapter (jaxrl.envs.pgx): a pgx game against a uniformly random
opponent, in the gymnax API, checked move by move against pgx's own ``step``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import envs, evaluation

pgx = pytest.importorskip("pgx")


@pytest.fixture(scope="module")
def tic_tac_toe():
    env, params = envs.make("pgx:tic_tac_toe")
    return env, params, jax.jit(env.reset), jax.jit(env.step)


def same_game(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


@pytest.mark.filterwarnings("ignore:.*player_id.*:DeprecationWarning")  # the test's own observe(state, seat)
def test_moves_follow_pgx_and_the_opponent_replies_legally(tic_tac_toe):
    """Random games: each step is pgx's step with the agent's move, then (while the game
    goes on) pgx's step with some legal opponent move; the reward sums the agent's pgx
    rewards; the observation is pgx's board from the agent's seat."""
    env, params, reset, step = tic_tac_toe
    game = env.game
    pgx_step, observe = jax.jit(game.step), jax.jit(game.observe)
    rng = np.random.default_rng(0)
    seats, games_over = set(), 0
    for episode in range(12):
        obs, state = reset(jax.random.key(episode), params)
        seat = int(state.seat)
        seats.add(seat)
        assert int(state.game.current_player) == seat  # the opponent's opening move is played already
        for t in range(9):
            before = state.game
            np.testing.assert_array_equal(obs["observation"], observe(before, seat).astype(np.float32))
            np.testing.assert_array_equal(obs["action_mask"], before.legal_action_mask)
            action = int(rng.choice(np.flatnonzero(np.asarray(before.legal_action_mask))))
            obs, state, reward, terminated, truncated, info = step(jax.random.key(100 * episode + t), state, action)
            moved = pgx_step(before, jnp.int32(action))
            expected_reward = float(moved.rewards[seat])
            if bool(moved.terminated):
                assert bool(terminated) and not bool(truncated) and reward == expected_reward
                np.testing.assert_array_equal(info["final_observation"]["observation"], observe(moved, seat))
                games_over += 1
                break
            replies = [pgx_step(moved, jnp.int32(a)) for a in np.flatnonzero(np.asarray(moved.legal_action_mask))]
            if bool(terminated):  # the opponent's reply ended the game: the state is a new game already
                final = np.asarray(info["final_observation"]["observation"])
                matching = [r for r in replies if r.terminated and np.array_equal(observe(r, seat), final)]
            else:
                matching = [reply for reply in replies if same_game(reply, state.game)]
            assert matching, "the opponent's reply is not a legal pgx move"
            assert {expected_reward + float(reply.rewards[seat]) for reply in matching} == {float(reward)}
            if bool(terminated):
                games_over += 1
                break
    assert seats == {0, 1} and games_over == 12


@pytest.mark.slow
def test_resets_draw_new_games_and_vmap_over_seeds(tic_tac_toe):
    env, params, *_ = tic_tac_toe

    @jax.jit
    def reset_then_step(keys):  # one program: the vmapped reset, then a vmapped legal move
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
        action = jnp.argmax(obs["action_mask"], axis=-1)
        return obs, jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, state, action, params)

    obs, out = reset_then_step(jax.random.split(jax.random.key(3), 8))
    assert obs["observation"].shape == (8, 3, 3, 2) and obs["observation"].dtype == jnp.float32
    assert obs["action_mask"].shape == (8, 9) and obs["action_mask"].dtype == jnp.bool_
    assert len({bytes(np.asarray(o)) for o in obs["observation"]}) > 1  # different openings
    assert out[2].shape == (8,) and out[3].dtype == jnp.bool_


def test_the_space_and_spec_describe_the_game(tic_tac_toe):
    env, params, *_ = tic_tac_toe
    assert env.action_space(params).n == 9 and env.num_actions == 9
    space = env.observation_space(params).spaces
    assert space["observation"].shape == (3, 3, 2) and space["action_mask"].shape == (9,)


@pytest.mark.slow
def test_a_random_policy_against_the_random_opponent_through_evaluate(tic_tac_toe):
    """A masked uniform policy never plays an illegal move (which pgx scores as a loss):
    the mean return is that of random against random, well above -1."""
    env, params, *_ = tic_tac_toe

    def act(params, obs, carry, key):
        logits = jnp.where(obs["action_mask"], 0.0, -jnp.inf)
        return jax.random.categorical(key, logits), carry

    result = jax.jit(lambda key: evaluation.evaluate(act, None, env, key, 200, params))(jax.random.key(0))
    assert np.all(np.isin(np.asarray(result.returns), [-1.0, 0.0, 1.0]))
    assert (
        -0.5 < float(jnp.mean(result.returns)) < 0.5 and int(jnp.min(result.lengths)) >= 2
    )  # a game lasts at least 2 moves of each side


def test_bad_ids_and_parameters():
    with pytest.raises(ValueError, match="unknown pgx game 'chekers'"):
        envs.make("pgx:chekers")
    with pytest.raises(ValueError, match="its only one is max_steps_in_episode"):
        envs.make("pgx:tic_tac_toe", board_size=4)
    with pytest.raises(ValueError, match="unknown env prefix 'nosuchsuite:'"):
        envs.check_env_id("nosuchsuite:Thing-v0")
