"""AlphaZero (Silver et al., 2018) with Gumbel MuZero's policy improvement (Danihelka
et al., 2022) on two-player board games from pgx, with the true simulator as the model.

Each iteration plays ``num_steps`` moves in each of ``num_games`` self-play games. Every
move is chosen by ``mctx.gumbel_muzero_policy`` searching ``num_simulations`` times
from the game's state, with the policy-value network's prior and value at each node and
pgx's ``step`` as the dynamics; a finished game restarts at once. Every position is
stored in a fixed-size replay (:mod:`jaxrl.buffers.replay`) with the legal-action mask
and the search's improved policy; when its game ends, each of the game's positions gets
its value target: the final outcome from the point of view of the player who moved
there (a game cut off by pgx's move limit counts as its rewards so far: a draw). With
probability ``random_move_prob`` a self-play move is uniformly random instead, for
exploration (the position still stores the search policy). Then ``num_updates``
gradient steps on batches of finished positions minimise the cross-entropy from the
search policy to the network's masked policy plus ``value_coef`` times the value's
squared error, with AdamW's decoupled ``weight_decay``. ::

    config = alphazero.Config(env_id="pgx:tic_tac_toe")
    out = jax.jit(alphazero.train)(jax.random.key(0), config)
    out.metrics["eval_return"]  # mean outcome against a uniformly random player

Observations are dicts ``{"observation": board [B, ...], "legal_action_mask": [B, A]}``
(:func:`observation` of a batch of pgx states), so :func:`act` (the raw network's
masked policy, no search) needs nothing but them. Search needs the game itself: use
:func:`search_policy` with the pgx state. Needs ``pip install "jaxrl[search]"`` (mctx
and pgx).
"""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import evaluation, loop, networks, optim
from jaxrl.buffers import replay
from jaxrl.config import require_choice, require_int, require_range, static
from jaxrl.types import TrainOutput

PREFIX = "pgx:"
# pgx's deterministic two-player zero-sum games with perfect information.
GAMES = (
    "tic_tac_toe",
    "connect_four",
    "othello",
    "hex",
    "go_9x9",
    "go_19x19",
    "animal_shogi",
    "gardner_chess",
    "chess",
    "shogi",
)
LEARNER_METRICS = ("loss", "policy_loss", "value_loss", "policy_entropy")


def require_search_libraries():
    """``(mctx, pgx)``, or an ImportError saying how to install them."""
    try:
        import mctx
        import pgx
    except ImportError as error:
        raise ImportError(
            f'AlphaZero needs mctx and pgx ({error}); install them with pip install "jaxrl[search]"'
        ) from error
    return mctx, pgx


def game_id(env_id: str) -> str:
    """The pgx game of ``env_id`` (``"pgx:<game>"``); ValueError for any other id."""
    if not isinstance(env_id, str) or not env_id.startswith(PREFIX) or env_id[len(PREFIX) :] not in GAMES:
        allowed = ", ".join(PREFIX + game for game in GAMES)
        raise ValueError(f"alphazero plays two-player pgx games: env_id must be one of {allowed}; got {env_id!r}")
    return env_id[len(PREFIX) :]


@functools.cache
def make_env(env_id: str):
    """The pgx env of ``env_id`` (cached: one object per game)."""
    _, pgx = require_search_libraries()
    # pgx's game modules build arrays when first imported: concrete ones, even inside a trace.
    with jax.ensure_compile_time_eval():
        return pgx.make(game_id(env_id))


@struct.dataclass
class Config:
    """AlphaZero settings. Static fields fix the program; ``learning_rate``,
    ``weight_decay``, ``value_coef`` and ``random_move_prob`` can be traced and vmapped.

    The defaults are the connect-four settings tests/test_alphazero.py trains and checks
    against a uniformly random player.
    ``random_move_prob`` explores: without it self-play settles into a few games and
    the agent never meets the positions a weaker opponent reaches.

    ``buffer_size`` positions are kept (rounded up to a multiple of ``num_games``); it
    should hold several games of every lane, as positions of a game still running are
    stored but not trained on until the game ends, and a game longer than
    ``buffer_size / num_games`` moves loses its first positions before it ends (go:
    give each lane a few hundred). ``eval_simulations=0`` evaluates
    the raw network's greedy policy; above 0, search with that many simulations.
    """

    # --- static: the game and program structure
    env_id: str = static("pgx:tic_tac_toe")
    env_kwargs: Any = static(())  # pgx games take none; kept for the common CLI
    num_games: int = static(64)  # self-play games played at once
    num_steps: int = static(8)  # moves per game per iteration
    num_simulations: int = static(16)  # search simulations per move
    max_num_considered_actions: int = static(16)  # Gumbel MuZero's sampled root actions
    num_updates: int = static(8)  # gradient steps per iteration
    batch_size: int = static(256)
    buffer_size: int = static(20_000)  # positions
    total_timesteps: int = static(102_400)  # moves over all games
    hidden_sizes: tuple = static((128, 128))
    activation: str = static("relu")
    num_evals: int = static(10)
    eval_episodes: int = static(64)  # games against a uniformly random player, half as first mover
    eval_simulations: int = static(0)  # 0: the network alone; else search
    num_reports: int = static(50)
    # --- traced hyper-parameters
    learning_rate: float = 3e-3
    weight_decay: float = 1e-4
    value_coef: float = 1.0
    random_move_prob: float = 0.1  # self-play plays a uniformly random legal move this often

    def __post_init__(self):
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        make_env(self.env_id)  # a clear error for an unknown game or missing libraries
        if self.env_kwargs not in ((), None, {}):
            raise ValueError(f"env_kwargs: pgx games take no parameters, got {self.env_kwargs!r}")
        object.__setattr__(self, "env_kwargs", ())
        for field in ("num_games", "num_steps", "num_simulations", "max_num_considered_actions"):
            require_int(self, field, 1)
        for field in ("num_updates", "batch_size", "buffer_size", "eval_episodes"):
            require_int(self, field, 1)
        for field in ("num_evals", "num_reports", "eval_simulations"):
            require_int(self, field, 0)
        require_int(self, "total_timesteps", self.num_games * self.num_steps)
        sizes = self.hidden_sizes
        if not sizes or not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in sizes):
            raise ValueError(f"hidden_sizes must be a non-empty tuple of positive ints, got {sizes!r}")
        require_choice(self, "activation", networks.ACTIVATIONS)

    @property
    def num_iterations(self) -> int:
        return self.total_timesteps // (self.num_games * self.num_steps)


@struct.dataclass
class State:
    params: dict  # {"network": flax params}: all ``act`` needs
    opt_state: Any
    buffer: replay.ReplayState  # positions, leaves [R, num_games, ...]
    env_state: Any  # pgx states of the self-play games [num_games]
    game_start: jax.Array  # int32 [num_games]: the absolute replay row of each game's first move
    first_player: jax.Array  # int32 [num_games]: who moved first in each game
    rows_written: jax.Array  # int32: rows added to the replay so far
    timesteps: jax.Array  # int32 moves played so far
    updates: jax.Array  # int32 gradient steps so far


# ----------------------------------------------------------------------------- network


class PolicyValueNetwork(nn.Module):
    """An MLP torso over the flattened board, a policy head (logits ``[..., A]``) and a
    value head (``tanh``: ``[...]`` in [-1, 1], the outcome for the player to move)."""

    num_actions: int
    hidden_sizes: tuple = (128, 128)
    activation: str = "relu"
    obs_ndim: int = 1

    @nn.compact
    def __call__(self, board):
        features = networks.MLP(self.hidden_sizes, self.activation, self.obs_ndim)(board)
        logits = nn.Dense(self.num_actions, kernel_init=networks.orthogonal(0.01))(features)
        value = nn.Dense(1, kernel_init=networks.orthogonal(1.0))(features)[..., 0]
        return logits, jnp.tanh(value)


def make_network(config: Config) -> PolicyValueNetwork:
    env = make_env(config.env_id)
    return PolicyValueNetwork(
        num_actions=env.num_actions,
        hidden_sizes=config.hidden_sizes,
        activation=config.activation,
        obs_ndim=len(env.observation_shape),
    )


def observation(env_state) -> dict:
    """What :func:`act` sees of a batch of pgx states: the board from the point of view
    of the player to move and the legal-action mask."""
    return {"observation": env_state.observation, "legal_action_mask": env_state.legal_action_mask}


def mask_logits(logits: jax.Array, mask: jax.Array) -> jax.Array:
    """``logits`` with illegal actions at the lowest float: probability exactly 0."""
    return jnp.where(mask, logits, jnp.finfo(logits.dtype).min)


def policy_value(params: dict, obs: dict, config: Config):
    """``(masked logits [B, A], value [B])`` of the network on :func:`observation` s."""
    logits, value = make_network(config).apply(params["network"], obs["observation"])
    return mask_logits(logits, obs["legal_action_mask"]), value


def make_optimizer(config: Config) -> optax.GradientTransformation:
    return optax.inject_hyperparams(optax.adamw)(learning_rate=config.learning_rate, weight_decay=config.weight_decay)


def _check_traced(config: Config) -> None:
    require_range(config, "learning_rate", 0.0, float("inf"), low_open=True)
    require_range(config, "weight_decay", 0.0, float("inf"))
    require_range(config, "value_coef", 0.0, float("inf"))
    require_range(config, "random_move_prob", 0.0, 1.0)


def _reset(env, key: jax.Array, num_games: int):
    return jax.vmap(env.init)(jax.random.split(key, num_games))


def init(key: jax.Array, config: Config) -> State:
    """The network, optimiser, an empty replay and ``num_games`` new games."""
    _check_traced(config)
    env = make_env(config.env_id)
    params_key, env_key = jax.random.split(key)
    env_state = _reset(env, env_key, config.num_games)
    network_params = make_network(config).init(params_key, env_state.observation[:1])
    example = {
        "observation": env_state.observation[0],
        "legal_action_mask": env_state.legal_action_mask[0],
        "policy": jnp.zeros(env.num_actions, jnp.float32),
        "player": jnp.zeros((), jnp.int32),
        "value": jnp.zeros((), jnp.float32),
        "ready": jnp.zeros((), bool),
    }
    return State(
        params={"network": network_params},
        opt_state=make_optimizer(config).init(network_params),
        buffer=replay.init(example, config.buffer_size, config.num_games),
        env_state=env_state,
        game_start=jnp.zeros(config.num_games, jnp.int32),
        first_player=env_state.current_player.astype(jnp.int32),
        rows_written=jnp.zeros((), jnp.int32),
        timesteps=jnp.zeros((), jnp.int32),
        updates=jnp.zeros((), jnp.int32),
    )


# ----------------------------------------------------------------------------- acting


def initial_carry(config: Config, batch_size: int):
    """A feed-forward policy has no memory: ``()``."""
    return ()


def act(params: dict, obs: dict, carry, key: jax.Array, config: Config, deterministic: bool = False):
    """``(action [B], carry)`` from the raw network's policy, masked to legal actions
    (sampled, or its most likely action when ``deterministic``); no search, which needs
    the game's state: see :func:`search_policy`. ``obs`` is :func:`observation` of the
    games; ``carry`` is ``()`` and passed through."""
    logits, _ = policy_value(params, obs, config)
    if deterministic:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32), carry
    return jax.random.categorical(key, logits).astype(jnp.int32), carry


def recurrent_fn(params: dict, key: jax.Array, action: jax.Array, env_state, config: Config):
    """mctx's model step: pgx's ``step`` from ``env_state`` (the node's embedding) with
    ``action``, the mover's reward, discount -1 (the other player moves next; 0 once the
    game is over) and the network's masked prior and value at the new state."""
    del key
    mctx, _ = require_search_libraries()
    env = make_env(config.env_id)
    mover = env_state.current_player
    next_state = jax.vmap(env.step)(env_state, action)
    logits, value = policy_value(params, observation(next_state), config)
    reward = jnp.take_along_axis(next_state.rewards, mover[:, None], axis=-1)[:, 0]
    over = next_state.terminated | next_state.truncated
    output = mctx.RecurrentFnOutput(
        reward=reward, discount=jnp.where(over, 0.0, -1.0), prior_logits=logits, value=jnp.where(over, 0.0, value)
    )
    return output, next_state


def search_policy(params: dict, env_state, key: jax.Array, config: Config, num_simulations: int | None = None):
    """``mctx.gumbel_muzero_policy`` from a batch of pgx states ``[B]``: the network's
    prior and value at the root and :func:`recurrent_fn` below it, illegal root actions
    excluded. Returns mctx's ``PolicyOutput`` (``action [B]``, ``action_weights [B, A]``:
    the improved policy). ``num_simulations`` defaults to the config's."""
    mctx, _ = require_search_libraries()
    logits, value = policy_value(params, observation(env_state), config)
    root = mctx.RootFnOutput(prior_logits=logits, value=value, embedding=env_state)
    return mctx.gumbel_muzero_policy(
        params=params,
        rng_key=key,
        root=root,
        recurrent_fn=functools.partial(recurrent_fn, config=config),
        num_simulations=config.num_simulations if num_simulations is None else num_simulations,
        invalid_actions=~env_state.legal_action_mask,
        max_num_considered_actions=config.max_num_considered_actions,
    )


def random_policy(env_state, key: jax.Array, config: Config) -> jax.Array:
    """A uniformly random legal action ``[B]`` in each game."""
    zeros = jnp.zeros(env_state.legal_action_mask.shape)
    return jax.random.categorical(key, mask_logits(zeros, env_state.legal_action_mask)).astype(jnp.int32)


def rollout_value(env_state, key: jax.Array, config: Config) -> jax.Array:
    """The outcome ``[B]`` for the player to move in each game when both players play
    uniformly random moves to the end (0 for a game already over)."""
    env = make_env(config.env_id)
    mover = env_state.current_player

    def running(carry):
        state, _, _ = carry
        return jnp.any(~(state.terminated | state.truncated))

    def move(carry):
        state, key, total = carry
        key, action_key = jax.random.split(key)
        state = jax.vmap(env.step)(state, random_policy(state, action_key, config))
        return state, key, total + jnp.take_along_axis(state.rewards, mover[:, None], axis=-1)[:, 0]

    total = jnp.zeros(mover.shape, jnp.float32)
    return jax.lax.while_loop(running, move, (env_state, key, total))[2]


def mcts_policy(env_state, key: jax.Array, config: Config, num_simulations: int) -> jax.Array:
    """Pure Monte-Carlo tree search: ``mctx.muzero_policy`` with a uniform prior and
    random-rollout values (:func:`rollout_value`), no network; the most visited legal
    action ``[B]``."""
    mctx, _ = require_search_libraries()
    env = make_env(config.env_id)
    uniform = lambda state: mask_logits(jnp.zeros(state.legal_action_mask.shape), state.legal_action_mask)  # noqa: E731

    def model(params, key, action, state):
        mover = state.current_player
        state = jax.vmap(env.step)(state, action)
        over = state.terminated | state.truncated
        output = mctx.RecurrentFnOutput(
            reward=jnp.take_along_axis(state.rewards, mover[:, None], axis=-1)[:, 0],
            discount=jnp.where(over, 0.0, -1.0),
            prior_logits=uniform(state),
            value=rollout_value(state, key, config),
        )
        return output, state

    root_key, search_key = jax.random.split(key)
    root = mctx.RootFnOutput(
        prior_logits=uniform(env_state), value=rollout_value(env_state, root_key, config), embedding=env_state
    )
    out = mctx.muzero_policy(
        (),
        search_key,
        root,
        model,
        num_simulations,
        invalid_actions=~env_state.legal_action_mask,
        dirichlet_fraction=0.0,
    )
    return jnp.argmax(mask_logits(out.action_weights, env_state.legal_action_mask), axis=-1).astype(jnp.int32)


def agent_policy(params: dict, config: Config, num_simulations: int = 0):
    """The trained agent as a ``policy(env_state, key) -> action`` for :func:`play`:
    the network's greedy policy, or with ``num_simulations`` Gumbel search (its chosen
    action, without Gumbel noise)."""

    def policy(env_state, key):
        if num_simulations == 0:
            return act(params, observation(env_state), (), key, config, deterministic=True)[0]
        mctx, _ = require_search_libraries()
        logits, value = policy_value(params, observation(env_state), config)
        return mctx.gumbel_muzero_policy(
            params=params,
            rng_key=key,
            root=mctx.RootFnOutput(prior_logits=logits, value=value, embedding=env_state),
            recurrent_fn=functools.partial(recurrent_fn, config=config),
            num_simulations=num_simulations,
            invalid_actions=~env_state.legal_action_mask,
            max_num_considered_actions=config.max_num_considered_actions,
            gumbel_scale=0.0,
        ).action

    return policy


def play(policy, opponent, key: jax.Array, num_games: int, config: Config) -> evaluation.EvalResult:
    """``num_games`` games of ``policy`` against ``opponent`` (each ``fn(env_state [B],
    key) -> action [B]``), ``policy`` moving first in the first ``ceil(num_games / 2)``
    and second in the rest. Returns each game's outcome for ``policy`` (1 win, 0 draw,
    -1 loss) and its length in moves."""
    env = make_env(config.env_id)
    reset_key, key = jax.random.split(key)
    state = _reset(env, reset_key, num_games)
    first = jnp.arange(num_games) < (num_games + 1) // 2
    seat = jnp.where(first, state.current_player, 1 - state.current_player)

    def running(carry):
        return jnp.any(~(carry[0].terminated | carry[0].truncated))

    def move(carry):
        state, key, outcome, length = carry
        key, own_key, other_key = jax.random.split(key, 3)
        ours = state.current_player == seat
        action = jnp.where(ours, policy(state, own_key), opponent(state, other_key))
        length = length + ~(state.terminated | state.truncated)
        state = jax.vmap(env.step)(state, action)
        outcome = outcome + jnp.take_along_axis(state.rewards, seat[:, None], axis=-1)[:, 0]
        return state, key, outcome, length

    carry = (state, key, jnp.zeros(num_games, jnp.float32), jnp.zeros(num_games, jnp.int32))
    _, _, outcome, length = jax.lax.while_loop(running, move, carry)
    return evaluation.EvalResult(outcome, length)


# ----------------------------------------------------------------------------- self-play


def finish_games(buffer: replay.ReplayState, over: jax.Array, rewards: jax.Array, game_start, rows_written):
    """Value targets for the games that just ended (``over [N]``, final ``rewards [N,
    2]``): every stored position of such a game, from its first row ``game_start`` to the
    newest one, gets its mover's outcome and becomes ready to train on."""
    rows = jnp.arange(buffer.num_rows)
    absolute = rows_written - 1 - (rows_written - 1 - rows) % buffer.num_rows  # the newest write to each row
    in_game = (absolute[:, None] >= game_start[None, :]) & (absolute[:, None] >= 0) & over[None, :]
    data = buffer.data
    outcome = jnp.where(data["player"] == 0, rewards[None, :, 0], rewards[None, :, 1])
    data = {**data, "value": jnp.where(in_game, outcome, data["value"]), "ready": data["ready"] | in_game}
    return buffer.replace(data=data)


def self_play_move(state: State, key: jax.Array, config: Config):
    """One searched move in every game (a uniformly random one instead with probability
    ``random_move_prob``, the search policy stored either way): store the position and
    search policy, finish the games that ended, restart them. Returns ``(state, (finished [N], first mover's
    outcome [N], length [N]))``."""
    env = make_env(config.env_id)
    search_key, explore_key, random_key, reset_key = jax.random.split(key, 4)
    env_state = state.env_state
    out = search_policy(state.params, env_state, search_key, config)
    explore = jax.random.uniform(explore_key, (config.num_games,)) < config.random_move_prob
    action = jnp.where(explore, random_policy(env_state, random_key, config), out.action)
    position = {
        **observation(env_state),
        "policy": out.action_weights.astype(jnp.float32),
        "player": env_state.current_player.astype(jnp.int32),
        "value": jnp.zeros(config.num_games, jnp.float32),
        "ready": jnp.zeros(config.num_games, bool),
    }
    buffer = replay.add(state.buffer, position)
    rows_written = state.rows_written + 1
    next_state = jax.vmap(env.step)(env_state, action)
    over = next_state.terminated | next_state.truncated
    buffer = finish_games(buffer, over, next_state.rewards, state.game_start, rows_written)
    first_outcome = jnp.take_along_axis(next_state.rewards, state.first_player[:, None], axis=-1)[:, 0]
    length = rows_written - state.game_start
    fresh = _reset(env, reset_key, config.num_games)
    env_state = jax.tree.map(
        lambda a, b: jnp.where(over.reshape(over.shape + (1,) * (a.ndim - 1)), a, b), fresh, next_state
    )
    state = state.replace(
        buffer=buffer,
        env_state=env_state,
        game_start=jnp.where(over, rows_written, state.game_start),
        first_player=jnp.where(over, fresh.current_player, state.first_player).astype(jnp.int32),
        rows_written=rows_written,
        timesteps=state.timesteps + config.num_games,
    )
    return state, (over, first_outcome, length)


def self_play(state: State, key: jax.Array, config: Config):
    """``num_steps`` :func:`self_play_move` s. Metrics over the games that ended:
    ``episode_return`` (the first mover's mean outcome), ``episode_length``,
    ``draw_rate`` and ``games`` (how many); NaN where none ended."""

    def one_move(state, key):
        return self_play_move(state, key, config)

    state, (over, outcome, length) = jax.lax.scan(one_move, state, jax.random.split(key, config.num_steps))
    count = jnp.sum(over)
    mean = lambda x: jnp.where(count > 0, jnp.sum(jnp.where(over, x, 0.0)) / jnp.maximum(count, 1), jnp.nan)  # noqa: E731
    metrics = {
        "timesteps": state.timesteps,
        "episode_return": mean(outcome),
        "episode_length": mean(length.astype(jnp.float32)),
        "draw_rate": mean((outcome == 0).astype(jnp.float32)),
        "games": count.astype(jnp.int32),
    }
    return state, metrics


# ----------------------------------------------------------------------------- learning


def sample(state: State, key: jax.Array, config: Config) -> dict:
    """``batch_size`` positions drawn uniformly from the replay; ``ready`` marks those
    whose game has ended (the others weigh nothing in the loss)."""
    return replay.sample(state.buffer, key, config.batch_size)[0]


def loss_fn(network_params, batch: dict, config: Config):
    """Cross-entropy from the search policy to the network's masked policy plus
    ``value_coef`` times the squared error to the outcome, over the ready positions."""
    logits, value = make_network(config).apply(network_params, batch["observation"])
    mask = batch["legal_action_mask"]
    log_probs = jax.nn.log_softmax(mask_logits(logits, mask))
    cross_entropy = -jnp.sum(jnp.where(mask, batch["policy"] * log_probs, 0.0), axis=-1)
    entropy = -jnp.sum(jnp.where(mask, jnp.exp(log_probs) * log_probs, 0.0), axis=-1)
    weight = batch["ready"].astype(jnp.float32)
    mean = lambda x: jnp.sum(weight * x) / jnp.maximum(jnp.sum(weight), 1.0)  # noqa: E731
    policy_loss = mean(cross_entropy)
    value_loss = mean(jnp.square(value - batch["value"]))
    loss = policy_loss + config.value_coef * value_loss
    metrics = {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss, "policy_entropy": mean(entropy)}
    return loss, metrics


def update(state: State, batch: dict, key: jax.Array, config: Config):
    """One AdamW step on ``batch`` (from :func:`sample`). ``key`` is unused (the loss is
    deterministic). Returns ``(state, metrics)``."""
    del key
    network_params, opt_state, _, metrics = optim.step(
        make_optimizer(config), loss_fn, state.params["network"], state.opt_state, batch, config
    )
    state = state.replace(params={"network": network_params}, opt_state=opt_state, updates=state.updates + 1)
    return state, metrics


def step(state: State, key: jax.Array, config: Config):
    """One iteration: :func:`self_play`, then ``num_updates`` sampled updates (their
    metrics averaged)."""
    play_key, update_key = jax.random.split(key)
    state, metrics = self_play(state, play_key, config)

    def one_update(state, key):
        sample_key, loss_key = jax.random.split(key)
        return update(state, sample(state, sample_key, config), loss_key, config)

    state, learner = jax.lax.scan(one_update, state, jax.random.split(update_key, config.num_updates))
    metrics.update(jax.tree.map(jnp.mean, learner))
    return state, metrics


# ----------------------------------------------------------------------------- training


def evaluate(params: dict, key: jax.Array, config: Config) -> evaluation.EvalResult:
    """``eval_episodes`` games against a uniformly random player, half of them moving
    first: each game's outcome for the agent (1 win, 0 draw, -1 loss) and length. The
    agent is the greedy network, or Gumbel search with ``eval_simulations``."""
    policy = agent_policy(params, config, config.eval_simulations)
    opponent = functools.partial(random_policy, config=config)
    return play(policy, opponent, key, config.eval_episodes, config)


def program(config: Config) -> loop.Program:
    """The run as a :class:`jaxrl.loop.Program` (for :mod:`jaxrl.runner`'s chunked training)."""
    return loop.Program(
        init=lambda key, inputs: init(key, config),
        iteration=lambda state, key, index: step(state, key, config),
        evaluate=functools.partial(evaluate, config=config),
        num_iterations=config.num_iterations,
        num_evals=config.num_evals,
        num_reports=config.num_reports,
        budget=config.total_timesteps,
    )


def train(key: jax.Array, config: Config) -> TrainOutput:
    """``init``, then ``num_iterations`` iterations of :func:`step` in one scan. Metric
    leaves are ``[num_iterations]``, with ``eval_return`` (mean outcome against a random
    player) NaN except at the ``num_evals`` evaluation points."""
    return loop.train(program(config), key)
