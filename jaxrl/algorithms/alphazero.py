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

Observations are dicts ``{"observation": board [B, ...], "action_mask": [B, A]}``
(:func:`observation` of a batch of pgx states), so :func:`act` (the raw network's
masked policy, no search) needs nothing but them. Search needs the game itself: use
:func:`search_policy` with the pgx state. Needs ``pip install "jaxrl[search]"`` (mctx
and pgx).

**Single-agent search.** Any other ``env_id`` that :func:`jaxrl.envs.make` accepts, with
discrete actions and stepped on the device, is one agent's env searched with its own
``step`` as the model (:func:`single_agent_search`): the search is exact for
deterministic dynamics (a stochastic env's search sees one sampled outcome per
expansion). Each iteration plays ``num_steps`` searched steps in each of ``num_games``
envs; each step's value target is the TD(``td_lambda``) return over the search's root
values (:func:`single_agent_value_targets`: stopped at termination, bootstrapped through
truncation), and the same loss trains the network, whose value head is then unbounded.
Observations are the env's raw arrays and every action is legal. ::

    config = alphazero.Config(env_id="CartPole-v1", num_games=32, num_steps=16)
    out = jax.jit(alphazero.train)(jax.random.key(0), config)
    out.metrics["eval_return"]  # the env's return of the greedy network
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import envs, evaluation, networks, optim, returns, rollout
from jaxrl.algorithms import requirements
from jaxrl.algorithms.contract import Algorithm
from jaxrl.buffers import replay
from jaxrl.config import freeze_mapping, require_int, require_range, static
from jaxrl.distributions import mask_actions
from jaxrl.envs import pgx as pgx_games

PREFIX = envs.PGX_PREFIX
GAMES = pgx_games.GAMES  # pgx's deterministic two-player zero-sum games with perfect information
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
    """The pgx game of ``env_id`` (cached: one object per game): the one
    :mod:`jaxrl.envs.pgx`'s env plays against its random opponent."""
    require_search_libraries()
    return envs.make(PREFIX + game_id(env_id))[0].game


def two_player(env_id: str) -> bool:
    """Whether ``env_id`` names a pgx game (two-player self-play) rather than one
    agent's env (single-agent search)."""
    return isinstance(env_id, str) and env_id.startswith(PREFIX)


def check_single_agent_env(env_id: str, env_kwargs: tuple) -> None:
    """ValueError, naming ``env_id`` and what is allowed, unless ``env_id`` is an env
    :func:`jaxrl.envs.make` accepts with ``env_kwargs``, stepped on the device (its
    state can be stepped from a search), with discrete actions and array observations."""
    allowed = (
        f"two-player pgx games ({', '.join(PREFIX + game for game in GAMES)}) or single-agent jaxrl envs "
        "stepped on the device with discrete actions (gymnax ids such as 'CartPole-v1' and registered ids)"
    )
    if not isinstance(env_id, str):
        raise ValueError(f"alphazero plays {allowed}; got env_id={env_id!r}")
    if envs.steps_on_host(env_id):
        raise ValueError(
            f"alphazero plays {allowed}; got env_id={env_id!r}, stepped on the host: a search cannot step it"
        )
    try:
        spec = envs.spec(*envs.make(env_id, **dict(env_kwargs)))
    except ValueError as error:
        raise ValueError(f"alphazero plays {allowed}; got env_id={env_id!r}: {error}") from error
    requirements.refuse_multi_discrete(spec, env_id, "alphazero")
    if not spec.discrete:
        raise ValueError(f"alphazero plays {allowed}; got env_id={env_id!r}, whose actions are {spec.action_kind}")
    if spec.obs_shape is None:  # a dict / tuple observation: the network takes one array
        raise ValueError(f"alphazero's single-agent search needs array observations; env_id={env_id!r} gives others")


def make_single_agent_env(config):
    """``(env, env_params)`` of a single-agent config: the env of ``env_id`` with
    ``env_kwargs``, reporting episode statistics (:class:`jaxrl.envs.EpisodeStatistics`)."""
    env, env_params = envs.make(config.env_id, **dict(config.env_kwargs))
    return envs.EpisodeStatistics(env), env_params


@struct.dataclass
class Config:
    """AlphaZero settings. Static fields fix the program; ``learning_rate``,
    ``weight_decay``, ``value_coef``, ``random_move_prob``, ``gamma`` and ``td_lambda``
    can be traced and vmapped.

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

    Single-agent envs (any ``env_id`` but ``pgx:``) take ``env_kwargs`` (a dict or
    ``(name, value)`` pairs for :func:`jaxrl.envs.make`, e.g. ``{"max_steps_in_episode":
    200}``), play ``num_games`` envs at once and use ``gamma`` (the search's and the
    targets' discount) and ``td_lambda`` (the value targets' lambda); the buffer must hold
    an iteration's ``num_games * num_steps`` steps. The value head is unbounded there:
    scale ``value_coef`` to the returns (tests/test_alphazero.py's CartPole uses 0.05).
    Evaluation is ``eval_episodes`` episodes of the env's undiscounted return.
    """

    # --- static: the game and program structure
    env_id: str = static("pgx:tic_tac_toe")
    env_kwargs: Any = static(())  # single-agent envs' make() overrides; pgx games take none
    num_games: int = static(64)  # self-play games (single-agent: envs) played at once
    num_steps: int = static(8)  # moves per game per iteration
    num_simulations: int = static(16)  # search simulations per move
    max_num_considered_actions: int = static(16)  # Gumbel MuZero's sampled root actions
    num_updates: int = static(8)  # gradient steps per iteration
    batch_size: int = static(256)
    buffer_size: int = static(20_000)  # positions
    total_timesteps: int = static(102_400)  # moves over all games
    network: Any = static("mlp")  # a shorthand or a user's torso (jaxrl.networks.resolve_torso)
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
    gamma: float = 0.99  # single-agent only: the discount of the search and the value targets
    td_lambda: float = 0.95  # single-agent only: lambda of the value targets over root search values

    def __post_init__(self):
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        if two_player(self.env_id):
            make_env(self.env_id)  # a clear error for an unknown game or missing libraries
            if self.env_kwargs not in ((), None, {}):
                raise ValueError(f"env_kwargs: pgx games take no parameters, got {self.env_kwargs!r}")
            object.__setattr__(self, "env_kwargs", ())
        else:
            require_search_libraries()
            object.__setattr__(self, "env_kwargs", freeze_mapping(self.env_kwargs, "env_kwargs"))
            check_single_agent_env(self.env_id, self.env_kwargs)
        for field in ("num_games", "num_steps", "num_simulations", "max_num_considered_actions"):
            require_int(self, field, 1)
        for field in ("num_updates", "batch_size", "buffer_size", "eval_episodes"):
            require_int(self, field, 1)
        for field in ("num_evals", "num_reports", "eval_simulations"):
            require_int(self, field, 0)
        require_int(self, "total_timesteps", self.num_games * self.num_steps)
        networks.require_network(self, network_spec(self))
        if not two_player(self.env_id) and self.buffer_size < self.num_games * self.num_steps:
            # an iteration's steps enter the replay at once, with their value targets
            raise ValueError(
                f"buffer_size must hold an iteration's num_games * num_steps = {self.num_games * self.num_steps} "
                f"steps, got {self.buffer_size}"
            )

    @property
    def num_iterations(self) -> int:
        return self.total_timesteps // (self.num_games * self.num_steps)


PRESETS = {}


@struct.dataclass
class State:
    params: dict  # {"network": flax params}: all ``act`` needs
    opt_state: Any
    buffer: replay.ReplayState  # positions, leaves [R, num_games, ...]
    env_state: Any  # pgx states of the self-play games (single-agent: the envs' states) [num_games]
    game_start: jax.Array  # int32 [num_games]: the absolute replay row of each game's first move
    first_player: jax.Array  # int32 [num_games]: who moved first in each game
    rows_written: jax.Array  # int32: rows added to the replay so far
    timesteps: jax.Array  # int32 moves played so far
    updates: jax.Array  # int32 gradient steps so far
    obs: Any = ()  # single-agent only: the envs' observations [num_games, *obs_shape]


# ----------------------------------------------------------------------------- network


class PolicyValueNetwork(nn.Module):
    """A torso over the board (or observation; ``network`` as :func:`jaxrl.networks.torso`
    takes it, an MLP by default), a policy head (logits ``[..., A]``) and a value head
    ``[...]``: ``tanh``-bounded to [-1, 1] (the outcome for the player to move) if
    ``bounded_value``, else unbounded (a discounted return)."""

    num_actions: int
    network: str | networks.CustomTorso = "mlp"
    hidden_sizes: tuple = (128, 128)
    activation: str = "relu"
    obs_ndim: int = 1
    bounded_value: bool = True

    @nn.compact
    def __call__(self, board):
        features = networks.torso(self.network, self.hidden_sizes, self.activation, self.obs_ndim)(board)
        logits = nn.Dense(self.num_actions, kernel_init=networks.orthogonal(0.01))(features)
        value = nn.Dense(1, kernel_init=networks.orthogonal(1.0))(features)[..., 0]
        return logits, jnp.tanh(value) if self.bounded_value else value


def network_spec(config) -> envs.EnvSpec:
    """What the network sees: the env's spec, or a game's board and moves."""
    if not two_player(config.env_id):
        return envs.config_spec(config)
    return _game_spec(config.env_id)


@functools.cache
def _game_spec(env_id: str) -> envs.EnvSpec:
    game = make_env(env_id)
    board = jax.eval_shape(game.init, jax.random.key(0)).observation
    return envs.EnvSpec(
        obs_shape=tuple(board.shape),
        obs_dtype=board.dtype,
        action_kind="discrete",
        action_shape=(),
        num_actions=game.num_actions,
        observation=board,
    )


def make_network(config: Config) -> PolicyValueNetwork:
    spec = network_spec(config)
    return PolicyValueNetwork(
        num_actions=spec.num_actions,
        network=networks.resolve_torso(config.network, spec),
        hidden_sizes=config.hidden_sizes,
        activation=config.activation,
        obs_ndim=len(spec.obs_shape),
        bounded_value=two_player(config.env_id),
    )


def observation(env_state) -> dict:
    """What :func:`act` sees of a batch of pgx states: the board from the point of view
    of the player to move and the legal-action mask."""
    return {"observation": env_state.observation, "action_mask": env_state.legal_action_mask}


def policy_value(params: dict, obs, config: Config):
    """``(logits [B, A], value [B])`` of the network: on :func:`observation` s of pgx
    games, masked to legal actions; on a single-agent env's observations ``[B,
    *obs_shape]``, unmasked."""
    if not two_player(config.env_id):
        return make_network(config).apply(params["network"], obs)
    logits, value = make_network(config).apply(params["network"], obs["observation"])
    return mask_actions(logits, obs["action_mask"]), value


def make_optimizer(config: Config) -> optax.GradientTransformation:
    return optax.inject_hyperparams(optax.adamw)(learning_rate=config.learning_rate, weight_decay=config.weight_decay)


def _check_traced(config: Config) -> None:
    require_range(config, "learning_rate", 0.0, float("inf"), low_open=True)
    require_range(config, "weight_decay", 0.0, float("inf"))
    require_range(config, "value_coef", 0.0, float("inf"))
    require_range(config, "random_move_prob", 0.0, 1.0)
    require_range(config, "gamma", 0.0, 1.0)
    require_range(config, "td_lambda", 0.0, 1.0)


def _reset(env, key: jax.Array, num_games: int):
    return jax.vmap(env.init)(jax.random.split(key, num_games))


def init(key: jax.Array, config: Config) -> State:
    """The network, optimiser, an empty replay and ``num_games`` new games (or freshly
    reset single-agent envs)."""
    _check_traced(config)
    if not two_player(config.env_id):
        return init_single_agent(key, config)
    env = make_env(config.env_id)
    params_key, env_key = jax.random.split(key)
    env_state = _reset(env, env_key, config.num_games)
    network_params = make_network(config).init(params_key, env_state.observation[:1])
    example = {
        "observation": env_state.observation[0],
        "action_mask": env_state.legal_action_mask[0],
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


def init_single_agent(key: jax.Array, config: Config) -> State:
    """:func:`init` for a single-agent env: ``num_games`` reset envs and a replay of
    ``(observation, policy, value)`` rows."""
    env, env_params = make_single_agent_env(config)
    params_key, env_key = jax.random.split(key)
    obs, env_state = rollout.reset(env, env_params, env_key, config.num_games)
    network_params = make_network(config).init(params_key, obs[:1])
    example = {
        "observation": obs[0],
        "policy": jnp.zeros(envs.config_spec(config).num_actions, jnp.float32),
        "value": jnp.zeros((), jnp.float32),
    }
    zeros = jnp.zeros(config.num_games, jnp.int32)  # the two-player fields, unused
    return State(
        params={"network": network_params},
        opt_state=make_optimizer(config).init(network_params),
        buffer=replay.init(example, config.buffer_size, config.num_games),
        env_state=env_state,
        game_start=zeros,
        first_player=zeros,
        rows_written=jnp.zeros((), jnp.int32),
        timesteps=jnp.zeros((), jnp.int32),
        updates=jnp.zeros((), jnp.int32),
        obs=obs,
    )


# ----------------------------------------------------------------------------- acting


def initial_carry(config: Config, batch_size: int):
    """A feed-forward policy has no memory: ``()``."""
    return ()


def act(params: dict, obs, carry, key: jax.Array, config: Config, deterministic: bool = False):
    """``(action [B], carry)`` from the raw network's policy, masked to legal actions
    (sampled, or its most likely action when ``deterministic``); no search, which needs
    the game's state: see :func:`search_policy`. ``obs`` is :func:`observation` of the
    games (single-agent: the env's observations ``[B, *obs_shape]``); ``carry`` is
    ``()`` and passed through."""
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
    return jax.random.categorical(key, mask_actions(zeros, env_state.legal_action_mask)).astype(jnp.int32)


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
    uniform = lambda state: mask_actions(jnp.zeros(state.legal_action_mask.shape), state.legal_action_mask)  # noqa: E731

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
    return jnp.argmax(mask_actions(out.action_weights, env_state.legal_action_mask), axis=-1).astype(jnp.int32)


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


# ----------------------------------------------------------------------------- single-agent search


class SearchNode(NamedTuple):
    """A single-agent search node's embedding (leaves ``[B, ...]``): the env's state,
    whether an earlier step of the path ended the episode (``done``, terminated or
    truncated) and, once done, the value the node keeps (``done_value``: 0 after
    termination, the network's value of the final observation after truncation)."""

    env_state: Any
    done: jax.Array  # bool [B]
    done_value: jax.Array  # float32 [B]


def single_agent_recurrent_fn(params: dict, key: jax.Array, action: jax.Array, node: SearchNode, config: Config):
    """mctx's model step for a single-agent env: the env's own ``step`` from the node's
    state with ``action`` (a key per lane from mctx's), the env's reward, discount
    ``gamma`` and the network's prior and value at ``info["final_observation"]`` (the
    next observation, or the last one before an auto-reset). The value is 0 where the
    step terminated. Below a done node every step returns reward ``(1 - gamma) *
    done_value``, discount ``gamma`` and value ``done_value``, so every return backed up
    through it is ``done_value``: done nodes are absorbing."""
    mctx, _ = require_search_libraries()
    env, env_params = make_single_agent_env(config)
    keys = jax.random.split(key, action.shape[0])
    _, env_state, reward, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
        keys, node.env_state, action, env_params
    )
    logits, value = policy_value(params, info["final_observation"], config)
    value = jnp.where(terminated, 0.0, value)
    gamma = jnp.asarray(config.gamma, jnp.float32)
    reward = jnp.where(node.done, (1.0 - gamma) * node.done_value, reward.astype(jnp.float32))
    value = jnp.where(node.done, node.done_value, value)
    output = mctx.RecurrentFnOutput(
        reward=reward, discount=jnp.broadcast_to(gamma, reward.shape), prior_logits=logits, value=value
    )
    return output, SearchNode(env_state, node.done | terminated | truncated, value)


def single_agent_search(
    params: dict,
    obs: jax.Array,
    env_state,
    key: jax.Array,
    config: Config,
    num_simulations: int | None = None,
    gumbel_scale: float = 1.0,
):
    """``mctx.gumbel_muzero_policy`` from a batch of single-agent envs (their
    observations ``[B, *obs_shape]`` and states ``[B]``, as :func:`init` and the env's
    ``step`` give them): the network's prior and value at the root and
    :func:`single_agent_recurrent_fn` below it. Returns mctx's ``PolicyOutput``
    (``action [B]``, ``action_weights [B, A]``, ``search_tree``; the root's search value
    is ``search_tree.summary().value``). ``num_simulations`` defaults to the config's;
    ``gumbel_scale=0`` searches without Gumbel noise (evaluation)."""
    mctx, _ = require_search_libraries()
    logits, value = policy_value(params, obs, config)
    root = mctx.RootFnOutput(
        prior_logits=logits,
        value=value,
        embedding=SearchNode(env_state, jnp.zeros(value.shape, bool), jnp.zeros(value.shape, jnp.float32)),
    )
    return mctx.gumbel_muzero_policy(
        params=params,
        rng_key=key,
        root=root,
        recurrent_fn=functools.partial(single_agent_recurrent_fn, config=config),
        num_simulations=config.num_simulations if num_simulations is None else num_simulations,
        max_num_considered_actions=config.max_num_considered_actions,
        gumbel_scale=gumbel_scale,
    )


def single_agent_value_targets(
    r_t: jax.Array,
    v_t: jax.Array,
    v_final_t: jax.Array,
    terminated_t: jax.Array,
    truncated_t: jax.Array,
    gamma: float,
    lambda_: float,
) -> jax.Array:
    """TD(lambda) value targets over the root search values of a stretch of steps
    (:func:`jaxrl.returns.lambda_returns`, Sutton & Barto, 2018, ch. 12).

    The value of the state step ``t`` reached is the next step's root search value
    ``v_{t+1}`` inside an episode and ``v_final_t`` (the network's value of the final
    observation) where the episode was truncated and at the last step; nothing is
    bootstrapped after termination.

    Args: ``[T, ...]`` arrays: ``r_t`` rewards, ``v_t`` root search values of the
    states the steps started from, ``v_final_t`` network values of
    ``info["final_observation"]``, ``terminated_t``, ``truncated_t``; ``gamma``,
    ``lambda_`` scalars (may be traced). Returns the targets ``[T, ...]``.
    """
    done_t = terminated_t | truncated_t
    v_next_t = jnp.where(done_t[:-1], v_final_t[:-1], v_t[1:])
    v_next_t = jnp.concatenate([v_next_t, v_final_t[-1:]])
    return returns.lambda_returns(r_t, v_next_t, terminated_t, truncated_t, gamma, lambda_)


def single_agent_move(state: State, key: jax.Array, config: Config):
    """One searched step in every env (a uniformly random action instead with
    probability ``random_move_prob``). Returns ``(state, record)``, ``record`` a dict of
    ``[N, ...]`` arrays: ``observation``, ``policy`` (the search's), ``reward``,
    ``terminated``, ``truncated``, ``search_value`` (the root's), ``final_value`` (the
    network's, of ``info["final_observation"]``), ``episode_return`` and
    ``episode_length`` (the finished episode's, 0 elsewhere) and ``done``."""
    env, env_params = make_single_agent_env(config)
    search_key, explore_key, random_key, step_key = jax.random.split(key, 4)
    out = single_agent_search(state.params, state.obs, state.env_state, search_key, config)
    explore = jax.random.uniform(explore_key, (config.num_games,)) < config.random_move_prob
    random_action = jax.random.randint(random_key, (config.num_games,), 0, out.action_weights.shape[-1])
    action = jnp.where(explore, random_action, out.action)
    obs, env_state, reward, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
        jax.random.split(step_key, config.num_games), state.env_state, action, env_params
    )
    _, final_value = policy_value(state.params, info["final_observation"], config)
    record = {
        "observation": state.obs,
        "policy": out.action_weights.astype(jnp.float32),
        "reward": reward.astype(jnp.float32),
        "terminated": terminated,
        "truncated": truncated,
        "search_value": out.search_tree.summary().value,
        "final_value": final_value,
        "episode_return": info["episode_return"],
        "episode_length": info["episode_length"],
        "done": info["episode_done"],
    }
    state = state.replace(obs=obs, env_state=env_state, timesteps=state.timesteps + config.num_games)
    return state, record


def single_agent_play(state: State, key: jax.Array, config: Config):
    """``num_steps`` :func:`single_agent_move` s, then every step's observation, search
    policy and value target (:func:`single_agent_value_targets`) into the replay.
    Metrics over the episodes that ended: ``episode_return``, ``episode_length`` (NaN
    where none ended) and ``episodes`` (how many)."""

    def one_move(state, key):
        return single_agent_move(state, key, config)

    state, steps = jax.lax.scan(one_move, state, jax.random.split(key, config.num_steps))
    targets = single_agent_value_targets(
        steps["reward"],
        steps["search_value"],
        steps["final_value"],
        steps["terminated"],
        steps["truncated"],
        config.gamma,
        config.td_lambda,
    )
    rows = {"observation": steps["observation"], "policy": steps["policy"], "value": targets}
    state = state.replace(buffer=replay.add_sequence(state.buffer, rows))
    done = steps["done"]
    count = jnp.sum(done)
    mean = lambda x: jnp.where(count > 0, jnp.sum(jnp.where(done, x, 0.0)) / jnp.maximum(count, 1), jnp.nan)  # noqa: E731
    metrics = {
        "timesteps": state.timesteps,
        "episode_return": mean(steps["episode_return"]),
        "episode_length": mean(steps["episode_length"].astype(jnp.float32)),
        "episodes": count.astype(jnp.int32),
    }
    return state, metrics


def single_agent_episodes(params: dict, key: jax.Array, config: Config, num_simulations: int) -> evaluation.EvalResult:
    """``eval_episodes`` episodes of the env, each to its first end (or the env's
    ``max_steps_in_episode``), acting with :func:`single_agent_search` of
    ``num_simulations`` without Gumbel noise. Returns each episode's undiscounted
    return and length."""
    env, env_params = make_single_agent_env(config)
    num = config.eval_episodes
    max_steps = envs.config_spec(config).max_episode_steps
    if max_steps is None:
        raise ValueError(f"evaluation runs episodes to the env's time limit; {config.env_id} has none")
    reset_key, run_key = jax.random.split(key)
    obs, env_state = rollout.reset(env, env_params, reset_key, num)

    def running(carry):
        t, *_, alive = carry
        return (t < max_steps) & evaluation.any_in_batch(alive)

    def body(carry):
        t, obs, env_state, total, length, alive = carry
        search_key, env_key = jax.random.split(jax.random.fold_in(run_key, t))
        action = single_agent_search(params, obs, env_state, search_key, config, num_simulations, 0.0).action
        obs, env_state, reward, terminated, truncated, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(env_key, num), env_state, action, env_params
        )
        total = total + jnp.where(alive, reward, 0.0)
        length = length + alive.astype(jnp.int32)
        return t + 1, obs, env_state, total, length, alive & ~(terminated | truncated)

    init = (jnp.zeros((), jnp.int32), obs, env_state, jnp.zeros(num), jnp.zeros(num, jnp.int32), jnp.ones(num, bool))
    *_, total, length, _ = jax.lax.while_loop(running, body, init)
    return evaluation.EvalResult(total, length)


# ----------------------------------------------------------------------------- learning


def sample(state: State, key: jax.Array, config: Config) -> dict:
    """``batch_size`` positions drawn uniformly from the replay; ``ready`` marks those
    whose game has ended (the others weigh nothing in the loss; single-agent rows are
    all ready)."""
    return replay.sample(state.buffer, key, config.batch_size)[0]


def loss_fn(network_params, batch: dict, config: Config):
    """Cross-entropy from the search policy to the network's masked policy plus
    ``value_coef`` times the squared error to the value target, over the ready
    positions. Single-agent rows have no ``legal_action_mask`` (every action is legal)
    and no ``ready`` (their targets are known when they are stored)."""
    logits, value = make_network(config).apply(network_params, batch["observation"])
    mask = batch.get("action_mask", jnp.ones(logits.shape, bool))
    log_probs = jax.nn.log_softmax(mask_actions(logits, mask))
    cross_entropy = -jnp.sum(jnp.where(mask, batch["policy"] * log_probs, 0.0), axis=-1)
    entropy = -jnp.sum(jnp.where(mask, jnp.exp(log_probs) * log_probs, 0.0), axis=-1)
    weight = batch.get("ready", jnp.ones(value.shape, bool)).astype(jnp.float32)
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
    """One iteration: :func:`self_play` (single-agent: :func:`single_agent_play`), then
    ``num_updates`` sampled updates (their metrics averaged)."""
    play_key, update_key = jax.random.split(key)
    play = self_play if two_player(config.env_id) else single_agent_play
    state, metrics = play(state, play_key, config)

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
    agent is the greedy network, or Gumbel search with ``eval_simulations``.
    Single-agent: ``eval_episodes`` episodes' undiscounted returns and lengths, of the
    greedy network (:func:`jaxrl.evaluation.evaluate_config`) or of the search."""
    if not two_player(config.env_id):
        if config.eval_simulations:
            return single_agent_episodes(params, key, config, config.eval_simulations)
        return evaluation.evaluate_config(act, initial_carry, params, key, config)
    policy = agent_policy(params, config, config.eval_simulations)
    opponent = functools.partial(random_policy, config=config)
    return play(policy, opponent, key, config.eval_episodes, config)


algorithm = Algorithm(
    name="alphazero",
    Config=Config,
    init=init,
    act=act,
    initial_carry=initial_carry,
    update=update,
    step=step,
    evaluate=evaluate,
    presets=PRESETS,
    summary="AlphaZero with Gumbel MuZero search (mctx): pgx self-play, or search on a single-agent env",
)
__getattr__ = algorithm.module_getattr(__name__)  # alphazero.train, alphazero.preset: the record's
