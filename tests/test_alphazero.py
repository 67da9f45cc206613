"""AlphaZero with Gumbel MuZero search on pgx games: the search against a direct mctx
call, legal-action masks, learning tic-tac-toe, one compile for vmapped seeds, exact
resume, the command line and errors. Compiled programs are shared through
module-scoped fixtures."""

import functools
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

mctx = pytest.importorskip("mctx")
pytest.importorskip("pgx")

from jaxrl import cli, runner  # noqa: E402
from jaxrl.algorithms import alphazero as az  # noqa: E402

SMALL = az.Config(
    num_games=4,
    num_steps=3,
    num_simulations=8,
    total_timesteps=4 * 3 * 4,
    hidden_sizes=(16,),
    batch_size=16,
    buffer_size=64,
    num_updates=2,
    num_evals=2,
    eval_episodes=4,
    num_reports=0,
)

# tests/test_alphazero.py's learning budget: 150 iterations of 64 games x 9 moves
# (86,400 moves), about 20 s to compile and train on 2 CPU cores.
TIC_TAC_TOE = az.Config(
    num_games=64,
    num_steps=9,
    num_simulations=16,
    total_timesteps=64 * 9 * 150,
    hidden_sizes=(64, 64),
    batch_size=256,
    num_updates=8,
    buffer_size=10_000,
    num_evals=5,
    eval_episodes=100,
    num_reports=0,
    learning_rate=3e-3,
    random_move_prob=0.25,
)
AGENT_SIMULATIONS = 64  # the trained agent searches this much in the matches
MCTS_SIMULATIONS = 64  # the pure-MCTS opponent (uniform prior, random rollouts)


def random_positions(config, key, num_games: int, max_moves: int):
    """pgx states after 0 .. max_moves - 1 uniformly random moves (games that ended
    are started again)."""
    env = az.make_env(config.env_id)
    init_key, key = jax.random.split(key)
    state = jax.vmap(env.init)(jax.random.split(init_key, num_games))
    moves = jnp.arange(num_games) % max_moves
    select = lambda where, a, b: jax.tree.map(  # noqa: E731
        lambda x, y: jnp.where(where.reshape(where.shape + (1,) * (x.ndim - 1)), x, y), a, b
    )

    def move(state, inputs):
        t, key = inputs
        action_key, reset_key = jax.random.split(key)
        stepped = jax.vmap(env.step)(state, az.random_policy(state, action_key, config))
        fresh = jax.vmap(env.init)(jax.random.split(reset_key, num_games))
        stepped = select(stepped.terminated | stepped.truncated, fresh, stepped)
        return select(t < moves, stepped, state), None

    steps = jnp.arange(max_moves - 1)
    state, _ = jax.lax.scan(move, state, (steps, jax.random.split(key, max_moves - 1)))
    return state


@pytest.fixture(scope="module")
def params():
    return jax.jit(az.init, static_argnums=1)(jax.random.key(0), SMALL).params


def test_search_policy_is_gumbel_muzero_with_the_simulator_as_model(params):
    env = az.make_env(SMALL.env_id)
    network = az.make_network(SMALL)
    positions = random_positions(SMALL, jax.random.key(1), 16, 7)

    def masked(logits, mask):
        return jnp.where(mask, logits, jnp.finfo(jnp.float32).min)

    def model(params, key, action, state):  # written out here, independently of the module
        mover = state.current_player
        state = jax.vmap(env.step)(state, action)
        logits, value = network.apply(params["network"], state.observation)
        over = state.terminated | state.truncated
        return mctx.RecurrentFnOutput(
            reward=state.rewards[jnp.arange(action.shape[0]), mover],
            discount=jnp.where(over, 0.0, -1.0),
            prior_logits=masked(logits, state.legal_action_mask),
            value=jnp.where(over, 0.0, value),
        ), state

    def direct(params, state, key):
        logits, value = network.apply(params["network"], state.observation)
        root = mctx.RootFnOutput(prior_logits=masked(logits, state.legal_action_mask), value=value, embedding=state)
        return mctx.gumbel_muzero_policy(
            params,
            key,
            root,
            model,
            SMALL.num_simulations,
            invalid_actions=~state.legal_action_mask,
            max_num_considered_actions=SMALL.max_num_considered_actions,
        )

    key = jax.random.key(2)
    ours = jax.jit(az.search_policy, static_argnums=3)(params, positions, key, SMALL)
    theirs = jax.jit(direct)(params, positions, key)
    np.testing.assert_array_equal(ours.action, theirs.action)
    np.testing.assert_allclose(ours.action_weights, theirs.action_weights, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(ours.search_tree.node_visits, theirs.search_tree.node_visits)


@pytest.mark.parametrize("env_id, max_moves", [("pgx:tic_tac_toe", 9), ("pgx:connect_four", 36)])
def test_illegal_actions_are_never_chosen(env_id, max_moves):
    config = SMALL.replace(env_id=env_id)
    params = jax.jit(az.init, static_argnums=1)(jax.random.key(0), config).params
    positions = jax.jit(random_positions, static_argnums=(0, 2, 3))(config, jax.random.key(3), 256, max_moves)
    mask = np.asarray(positions.legal_action_mask)
    assert (~mask).any()
    # A network that strongly prefers the action most often illegal: only the masks
    # keep its choices legal.
    favourite = int(np.argmax((~mask).sum(0)))
    head = params["network"]["params"]["Dense_0"]
    params = {
        "network": {
            "params": {**params["network"]["params"], "Dense_0": {**head, "bias": head["bias"].at[favourite].set(50.0)}}
        }
    }

    @jax.jit
    def choices(params, positions, key):
        keys = jax.random.split(key, 3)
        obs = az.observation(positions)
        sampled, _ = az.act(params, obs, (), keys[0], config)
        greedy, _ = az.act(params, obs, (), keys[1], config, deterministic=True)
        searched = az.search_policy(params, positions, keys[2], config)
        return sampled, greedy, searched.action, searched.action_weights

    for seed in range(3):
        sampled, greedy, searched, weights = choices(params, positions, jax.random.key(seed))
        for action in (sampled, greedy, searched):
            assert mask[np.arange(256), np.asarray(action)].all()
        assert np.all(np.asarray(weights)[~mask] == 0.0)
    # The pure-MCTS and random opponents too.
    mcts = jax.jit(functools.partial(az.mcts_policy, config=config, num_simulations=8))(positions, jax.random.key(4))
    rand = jax.jit(functools.partial(az.random_policy, config=config))(positions, jax.random.key(5))
    assert mask[np.arange(256), np.asarray(mcts)].all() and mask[np.arange(256), np.asarray(rand)].all()


def test_value_targets_are_the_movers_outcomes():
    """After a run, every ready position's value target is the outcome of its game for
    the player who moved there: the same game seen from the two sides has opposite
    targets, and positions of finished games are all ready."""
    out = jax.jit(az.train, static_argnums=1)(jax.random.key(0), SMALL)
    data = jax.tree.map(np.asarray, out.state.buffer.data)
    ready = data["ready"]
    assert ready.any()
    assert set(np.unique(data["value"][ready])) <= {-1.0, 0.0, 1.0}
    assert np.all(data["value"][~ready] == 0.0)
    np.testing.assert_allclose(data["policy"].sum(-1)[ready], 1.0, rtol=1e-5)
    assert np.isfinite(out.metrics["loss"]).all()
    assert int(out.metrics["timesteps"][-1]) == SMALL.total_timesteps


@pytest.fixture(scope="module")
def trained():
    return jax.jit(az.train, static_argnums=1)(jax.random.key(0), TIC_TAC_TOE)


@pytest.mark.slow
def test_learns_tic_tac_toe(trained):
    """150 iterations (86,400 self-play moves): with 64-simulation search the agent
    never loses to a uniformly random player in 100 games, half of them moving second,
    nor to pure MCTS with 64 simulations and random rollouts in 20 games."""
    config, params = TIC_TAC_TOE, trained.state.params
    agent = az.agent_policy(params, config, AGENT_SIMULATIONS)
    against_random = jax.jit(
        lambda key: az.play(agent, functools.partial(az.random_policy, config=config), key, 100, config)
    )
    outcomes = np.asarray(against_random(jax.random.key(10)).returns)
    assert (outcomes >= 0).all(), f"{(outcomes < 0).sum()} losses in 100 games"
    assert (outcomes > 0).mean() > 0.8
    mcts = functools.partial(az.mcts_policy, config=config, num_simulations=MCTS_SIMULATIONS)
    against_mcts = jax.jit(lambda key: az.play(agent, mcts, key, 20, config))
    outcomes = np.asarray(against_mcts(jax.random.key(11)).returns)
    assert (outcomes >= 0).all(), f"{(outcomes < 0).sum()} losses in 20 games against MCTS"
    # training's own evaluation (the network alone, no search) improved too
    evals = np.asarray(trained.metrics["eval_return"])
    assert evals[np.isfinite(evals)][-1] > 0.8


# The defaults: 200 iterations of 64 games x 8 moves (102,400 moves), 16 simulations,
# about 15 s on 2 CPU cores.
CONNECT_FOUR = az.Config(env_id="pgx:connect_four", num_evals=2, num_reports=0)


@pytest.mark.slow
def test_beats_a_random_player_at_connect_four():
    """102,400 self-play moves: with 16-simulation search the agent wins at least 95 of
    100 games against a uniformly random player, half of them moving second."""
    config = CONNECT_FOUR
    params = jax.jit(az.train, static_argnums=1)(jax.random.key(0), config).state.params
    agent = az.agent_policy(params, config, 16)
    play = jax.jit(lambda key: az.play(agent, functools.partial(az.random_policy, config=config), key, 100, config))
    outcomes = np.asarray(play(jax.random.key(12)).returns)
    assert (outcomes > 0).mean() >= 0.95, f"won {(outcomes > 0).sum()} of 100"


def test_vmapped_seeds_compile_once_and_match_single_runs():
    train = jax.jit(jax.vmap(az.train, in_axes=(0, None)))  # the config's static fields are static
    keys = jax.random.split(jax.random.key(0), 2)
    out = train(keys, SMALL)
    train(jax.random.split(jax.random.key(1), 2), SMALL)
    swept = SMALL.replace(learning_rate=2e-3, weight_decay=1e-3, value_coef=0.5)
    train(keys, swept)  # traced hyper-parameters: the same program
    assert train._cache_size() == 1
    single = jax.jit(az.train, static_argnums=1)(keys[1], SMALL)
    for ours, theirs in zip(jax.tree.leaves(out.metrics), jax.tree.leaves(single.metrics)):
        np.testing.assert_allclose(np.asarray(ours)[1], theirs, rtol=1e-4, atol=1e-5)


def leaves(tree):
    return [
        jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x
        for x in jax.tree.leaves(tree)
    ]


def test_resumed_run_equals_the_straight_run(tmp_path):
    config = SMALL.replace(total_timesteps=4 * 3 * 6, num_evals=3)
    kwargs = dict(seeds=2, chunk_iterations=2, checkpoint_every=1)
    straight = runner.run("alphazero", config, logdir=str(tmp_path / "straight"), **kwargs)
    import shutil

    shutil.copytree(tmp_path / "straight", tmp_path / "resumed")
    shutil.rmtree(tmp_path / "resumed" / "checkpoints" / "6")
    resumed = runner.run("alphazero", config, logdir=str(tmp_path / "resumed"), resume=True, **kwargs)
    for name, values in straight.metrics.items():
        np.testing.assert_array_equal(resumed.metrics[name], values, err_msg=name)
    for ours, theirs in zip(leaves(resumed.state), leaves(straight.state)):
        np.testing.assert_array_equal(ours, theirs)


def test_command_line_trains_on_a_pgx_game(tmp_path, capsys):
    code = cli.main(
        [
            "train",
            "alphazero",
            "--env",
            "pgx:tic_tac_toe",
            "--total-timesteps",
            "48",
            "--set",
            "num_games=4",
            "--set",
            "num_steps=3",
            "--set",
            "num_simulations=4",
            "--set",
            "hidden_sizes=16",
            "--set",
            "buffer_size=64",
            "--set",
            "batch_size=16",
            "--set",
            "eval_episodes=4",
            "--no-progress",
            "--json",
            str(tmp_path / "summary.json"),
        ]
    )
    assert code == 0
    assert "alphazero on pgx:tic_tac_toe" in capsys.readouterr().out
    assert (tmp_path / "summary.json").exists()


def test_bad_input_errors(monkeypatch, capsys):
    with pytest.raises(ValueError, match=r"env_id must be one of pgx:tic_tac_toe, pgx:connect_four.*'CartPole-v1'"):
        az.Config(env_id="CartPole-v1")
    with pytest.raises(ValueError, match="env_id must be one of"):
        az.Config(env_id="pgx:2048")  # a one-player game
    with pytest.raises(ValueError, match="env_kwargs"):
        az.Config(env_kwargs={"size": 5})
    for field, value in (("num_simulations", 0), ("num_games", 1.5), ("buffer_size", 0), ("eval_simulations", -1)):
        with pytest.raises(ValueError, match=field):
            az.Config(**{field: value})
    with pytest.raises(ValueError, match="hidden_sizes"):
        az.Config(hidden_sizes=())
    with pytest.raises(ValueError, match="total_timesteps"):
        az.Config(num_games=8, num_steps=8, total_timesteps=10)
    for field, value in (("learning_rate", 0.0), ("weight_decay", -1.0), ("random_move_prob", 1.5)):
        with pytest.raises(ValueError, match=field):
            az.init(jax.random.key(0), SMALL.replace(**{field: value}))
    assert cli.main(["train", "alphazero", "--env", "pgx:nope", "--total-timesteps", "48"]) != 0
    assert "env_id must be one of pgx:tic_tac_toe" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "mctx", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r'pip install "jaxrl\[search\]"'):
        az.require_search_libraries()
