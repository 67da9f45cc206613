"""pgx's board games as single-agent envs: ``"pgx:<game>"`` (``pip install "jaxrl[search]"``).

``jaxrl.envs.make("pgx:tic_tac_toe")`` is the game against a uniformly random opponent,
in the gymnax API: the agent's seat is drawn at each reset (when the opponent moves
first, its move is already played), each ``step`` plays the agent's move and then the
opponent's reply, and the reward is the agent's: 1 for a win, -1 for a loss, 0
otherwise. The observation is the dict ``{"observation": board float32 [*board_shape],
"action_mask": bool [A]}``, the board seen from the agent's side. An illegal move
loses the game (pgx's own rule). A game cut off by pgx's move limit, or after ``max_steps_in_episode`` moves of the
agent, ends ``truncated``.

Self-play, where both seats learn, uses the pgx game itself: :attr:`PgxEnv.game`
(``jaxrl.algorithms.alphazero`` does).
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

__all__ = ["GAMES", "PgxEnv", "EnvParams", "EnvState", "check", "make", "require_pgx"]

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


def require_pgx():
    """The ``pgx`` module, or an ImportError saying how to install it."""
    try:
        import pgx
    except ImportError as error:
        raise ImportError(f'"pgx:" envs need pgx ({error}); install it with pip install "jaxrl[search]"') from error
    return pgx


def check(name: str) -> None:
    """ValueError unless ``name`` is one of :data:`GAMES`."""
    if name not in GAMES:
        raise ValueError(f"unknown pgx game {name!r} (pgx:{name}); pgx games: {', '.join(GAMES)}")


@struct.dataclass
class EnvParams:
    max_steps_in_episode: int = 1000  # the agent's moves before the game is cut off (truncated)


@struct.dataclass
class EnvState:
    game: object  # pgx.State of the game
    seat: jax.Array  # int32: the agent's player id (0 or 1)
    time: jax.Array  # int32: the agent's moves in this game so far


def _random_legal(key: jax.Array, mask: jax.Array) -> jax.Array:
    return jax.random.categorical(key, jnp.where(mask, 0.0, -jnp.inf)).astype(jnp.int32)


class PgxEnv(environment.Environment):
    """A pgx game against a uniformly random opponent, with the gymnax API (see the
    module's docstring). One env; batch with ``jax.vmap``."""

    def __init__(self, name: str):
        super().__init__()
        check(name)
        pgx = require_pgx()
        # pgx builds arrays when a game module is first imported: concrete ones, even inside a trace.
        with jax.ensure_compile_time_eval():
            self.game = pgx.make(name)
        self.game_name = name

    @property
    def name(self) -> str:
        return f"pgx:{self.game_name}"

    @property
    def num_actions(self) -> int:
        return self.game.num_actions

    @property
    def default_params(self) -> EnvParams:
        return EnvParams()

    def _over(self, game) -> jax.Array:
        return game.terminated | game.truncated

    def _opponent_moves(self, key, game, seat):
        """The opponent's reply where it is to move and the game goes on."""
        reply = self.game.step(game, _random_legal(key, game.legal_action_mask))
        moves = (game.current_player != seat) & ~self._over(game)
        return jax.tree.map(lambda after, before: jnp.where(moves, after, before), reply, game)

    def _observation(self, state: EnvState) -> dict:
        with warnings.catch_warnings():  # pgx 2.6 deprecates player_id, with nothing in its place yet
            warnings.simplefilter("ignore", DeprecationWarning)
            board = self.game.observe(state.game, state.seat)  # the agent's view, whoever moved last
        return {"observation": board.astype(jnp.float32), "action_mask": state.game.legal_action_mask}

    def reset_env(self, key, params):
        init_key, seat_key, reply_key = jax.random.split(key, 3)
        game = self.game.init(init_key)
        seat = jax.random.bernoulli(seat_key).astype(jnp.int32)
        state = EnvState(game=self._opponent_moves(reply_key, game, seat), seat=seat, time=jnp.zeros((), jnp.int32))
        return self._observation(state), state

    def step_env(self, key, state, action, params):
        game = self.game.step(state.game, jnp.asarray(action, jnp.int32))
        reward = game.rewards[state.seat]
        replied = self._opponent_moves(key, game, state.seat)
        reward = reward + jnp.where(self._over(game), 0.0, replied.rewards[state.seat])
        state = state.replace(game=replied, time=state.time + 1)
        return self._observation(state), state, reward.astype(jnp.float32), replied.terminated, {}

    def is_truncated(self, state, params):
        cut_off = state.game.truncated | (state.time >= params.max_steps_in_episode)
        return cut_off & ~state.game.terminated

    def observation_space(self, params=None):
        shape = tuple(self.game.observation_shape)
        return spaces.Dict(
            {
                "observation": spaces.Box(0.0, 1.0, shape, jnp.float32),
                "action_mask": spaces.Box(0, 1, (self.num_actions,), jnp.bool_),
            }
        )

    def action_space(self, params=None):
        return spaces.Discrete(self.num_actions)


def make(name: str, **overrides):
    """``(PgxEnv(name), EnvParams(**overrides))``: the only parameter is
    ``max_steps_in_episode``."""
    unknown = sorted(set(overrides) - {"max_steps_in_episode"})
    if unknown:
        raise ValueError(f"unknown env parameter(s) {unknown} for pgx:{name}; its only one is max_steps_in_episode")
    return PgxEnv(name), EnvParams(**overrides)
