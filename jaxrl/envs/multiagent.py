"""Multi-agent environments: the per-agent form of the gymnax API, a spec, helpers that
turn agents into a batch axis, episode statistics, and one built-in cooperative task.

A multi-agent env names its agents in a fixed order, ``env.agents`` (a tuple of
strings), and speaks the gymnax API with one entry per agent::

    obs, state = env.reset(key, params)                      # obs: {agent: observation}
    obs, state, rewards, terminated, truncated, info = env.step(key, state, actions, params)

``actions``, ``rewards`` (float32 scalars), ``terminated`` and ``truncated`` (bool
scalars) are dicts keyed by agent; an observation is an array or a dict of arrays
(with an ``"action_mask"`` bool ``[num_actions]`` where actions can be illegal), as in
the single-agent contract. Batching is the caller's ``jax.vmap``.

Episode ends: the whole env ends its episode when every agent is ``terminated`` or
``truncated``, and then resets itself in the same ``step`` with a fresh key. An agent
may leave earlier (a dead SMAX unit): it is then ``terminated`` at that step and at
every later step of the episode, and ``info["active"][agent]`` is False at those later
steps, which are not transitions of that agent. ``info`` always holds

- ``"final_observation"``: the per-agent observations before any reset (the true last
  observation at an episode's end; equal to the returned ones otherwise);
- ``"global_state"``: float32 ``[D]``, the global state that goes with the returned
  observations (after the reset, if one happened): a centralised critic's input;
- ``"final_global_state"``: float32 ``[D]``, the global state before any reset, to
  bootstrap a truncated episode's last value;
- ``"episode_done"``: bool, whether the episode ended (and the env reset) at this step;
- ``"active"``: ``{agent: bool}``, whether the agent was still in the episode when it acted.

At a reset, ``env.global_state(state, params)`` gives the first global state.

Agents whose observation and action spaces agree (:attr:`MultiAgentSpec.homogeneous`)
can be stacked into a batch axis with :func:`stack` and split again with
:func:`unstack`; agents that differ are refused (padding them to a common shape is not
done here).

The built-in task ``"MultiAgentClimbing-v0"`` (:class:`ClimbingGame`) is registered
with :func:`jaxrl.envs.register` when this module is imported.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import spaces

from jaxrl.envs.registry import make
from jaxrl.envs.spec import EnvSpec, observation_struct
from jaxrl.envs.spec import spec as agent_spec
from jaxrl.envs.wrappers import Wrapper

__all__ = [
    "MultiAgentEnv",
    "MultiAgentSpec",
    "spec",
    "stack",
    "unstack",
    "AgentBatch",
    "AgentBatchState",
    "AGENT_ID",
    "GLOBAL_STATE",
    "EpisodeStatistics",
    "EpisodeStatisticsState",
    "ClimbingGame",
    "ClimbingParams",
    "ClimbingState",
    "CLIMBING_PAYOFF",
]


def _select(pred: jax.Array, on_true, on_false):
    """Leafwise ``pred ? on_true : on_false`` for two pytrees of the same structure."""
    return jax.tree.map(lambda a, b: jax.lax.select(pred, a, b), on_true, on_false)


class MultiAgentEnv:
    """Base class of multi-agent envs (see the module's docstring for the API).

    Subclasses set :attr:`agents` and implement ``default_params``, ``reset_env``,
    ``step_env`` (one step without auto-reset, returning the same 6-tuple as ``step``),
    ``global_state``, ``observation_space``, ``action_space`` and ``global_state_space``;
    ``step`` adds the auto-reset and the ``info`` entries every env provides.
    """

    # Marks the env for jaxrl.envs.spec, which refuses it: single-agent code cannot run it.
    multi_agent = True
    agents: tuple[str, ...] = ()
    # Whether an agent can leave before the episode ends (a dead SMAX unit): its later
    # steps are then no transitions, and AgentBatch reports them invalid.
    agents_leave: bool = False

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    @property
    def default_params(self):
        raise NotImplementedError

    def reset(self, key: jax.Array, params=None):
        """``(obs {agent: observation}, state)`` of a new episode drawn with ``key``."""
        return self.reset_env(key, self.default_params if params is None else params)

    def step(self, key: jax.Array, state, actions: dict, params=None):
        """One step of every agent, resetting the env when the episode ends.

        ``actions`` is ``{agent: action}``. Returns ``(obs, state, rewards, terminated,
        truncated, info)``, the first and the last three dicts keyed by agent (see the
        module's docstring for ``info``).
        """
        params = self.default_params if params is None else params
        missing = set(self.agents) - set(actions)
        if missing:
            raise ValueError(f"{self.name}: actions lack agent(s) {sorted(missing)}; agents are {list(self.agents)}")
        # The same split as JaxMARL's step, so its adapter reproduces JaxMARL key for key.
        key_step, key_reset = jax.random.split(key)
        obs_st, state_st, rewards, terminated, truncated, info = self.step_env(key_step, state, actions, params)
        obs_re, state_re = self.reset_env(key_reset, params)
        done = jnp.all(jnp.stack([terminated[a] | truncated[a] for a in self.agents]))
        final_global = self.global_state(state_st, params)
        info = {
            **info,
            "final_observation": obs_st,
            "final_global_state": final_global,
            "global_state": jax.lax.select(done, self.global_state(state_re, params), final_global),
            "episode_done": done,
        }
        info.setdefault("active", {a: jnp.ones((), jnp.bool_) for a in self.agents})
        return _select(done, obs_re, obs_st), _select(done, state_re, state_st), rewards, terminated, truncated, info

    def reset_env(self, key: jax.Array, params):
        raise NotImplementedError

    def step_env(self, key: jax.Array, state, actions: dict, params):
        raise NotImplementedError

    def global_state(self, state, params=None) -> jax.Array:
        """The global state float32 ``[D]`` of ``state`` (a centralised critic's input)."""
        raise NotImplementedError

    def observation_space(self, params, agent: str):
        raise NotImplementedError

    def action_space(self, params, agent: str):
        raise NotImplementedError

    def global_state_space(self, params):
        raise NotImplementedError


# ----------------------------------------------------------------------------- spec


class _AgentView:
    """One agent's spaces with the single-agent signatures, so :func:`jaxrl.envs.spec`
    describes them."""

    multi_agent = False

    def __init__(self, env, agent: str):
        self._env, self._agent = env, agent
        self.name = f"{env.name}[{agent}]"

    def observation_space(self, params):
        return self._env.observation_space(params, self._agent)

    def action_space(self, params):
        return self._env.action_space(params, self._agent)


def _same_spec(a: EnvSpec, b: EnvSpec) -> bool:
    """Whether two agents' specs agree (so their arrays stack); bounds compared as arrays."""
    arrays = ("action_low", "action_high")
    for field in dataclasses.fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if field.name in arrays:
            if (x is None) != (y is None) or (x is not None and not np.array_equal(x, y)):
                return False
        elif x != y:
            return False
    return True


@dataclasses.dataclass(frozen=True)
class MultiAgentSpec:
    """Static facts about a multi-agent env, built by :func:`spec`.

    ``agent_specs[agent]`` is that agent's :class:`jaxrl.envs.EnvSpec` (observation
    struct, action kind, number of actions, mask, ...); ``global_state`` the
    ``jax.ShapeDtypeStruct`` of the global state; ``homogeneous`` whether every agent
    has the same spaces, so their observations and actions stack into ``[A, ...]``.
    """

    agents: tuple[str, ...]
    agent_specs: dict
    global_state: jax.ShapeDtypeStruct
    homogeneous: bool
    max_episode_steps: int | None = None

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    @property
    def observations(self) -> dict:
        """``{agent: observation struct}``."""
        return {a: self.agent_specs[a].observation for a in self.agents}

    @property
    def action_kinds(self) -> dict:
        """``{agent: "discrete" | "multi_discrete" | "continuous"}``."""
        return {a: self.agent_specs[a].action_kind for a in self.agents}

    @property
    def agent(self) -> EnvSpec:
        """The one :class:`jaxrl.envs.EnvSpec` every agent shares; ValueError if they differ."""
        if not self.homogeneous:
            raise ValueError(_heterogeneous_message(self.agents))
        return self.agent_specs[self.agents[0]]


def _heterogeneous_message(agents) -> str:
    return (
        f"agents {list(agents)} have different observation or action spaces, so they cannot be stacked "
        "into one batch axis (padding heterogeneous agents is not supported); treat them per agent"
    )


def spec(env: MultiAgentEnv, params=None) -> MultiAgentSpec:
    """Describe a multi-agent env's per-agent spaces and its global state."""
    if not getattr(env, "multi_agent", False):
        raise ValueError(f"{env.name} is a single-agent env; use jaxrl.envs.spec")
    params = env.default_params if params is None else params
    agent_specs = {a: agent_spec(_AgentView(env, a), params) for a in env.agents}
    first = agent_specs[env.agents[0]]
    max_steps = getattr(params, "max_steps_in_episode", None)
    return MultiAgentSpec(
        agents=tuple(env.agents),
        agent_specs=agent_specs,
        global_state=observation_struct(env.global_state_space(params), "global state"),
        homogeneous=all(_same_spec(first, s) for s in agent_specs.values()),
        max_episode_steps=int(max_steps) if max_steps is not None else None,
    )


# ----------------------------------------------------------------------------- agents as a batch axis


def stack(tree: dict, agents, axis: int = 0):
    """``{agent: pytree}`` -> one pytree whose leaves gain an agent axis at ``axis``.

    Every agent's pytree must have the same structure, shapes and dtypes (leaves
    ``[...]`` -> ``[A, ...]`` for ``axis=0``, ``[N, ...]`` -> ``[N, A, ...]`` for
    ``axis=1``); otherwise ValueError, since heterogeneous agents are not padded.
    """
    agents = tuple(agents)
    parts = [tree[a] for a in agents]
    first = jax.tree.structure(parts[0])
    shapes = [jax.tree.map(lambda x: (jnp.shape(x), jnp.result_type(x)), p) for p in parts]
    if any(jax.tree.structure(p) != first for p in parts) or any(s != shapes[0] for s in shapes):
        raise ValueError(_heterogeneous_message(agents))
    return jax.tree.map(lambda *xs: jnp.stack(xs, axis=axis), *parts)


def unstack(tree, agents, axis: int = 0) -> dict:
    """The inverse of :func:`stack`: leaves ``[A, ...]`` (agent axis at ``axis``) ->
    ``{agent: pytree with leaves [...]}``."""
    agents = tuple(agents)
    for leaf in jax.tree.leaves(tree):
        if jnp.shape(leaf)[axis] != len(agents):
            raise ValueError(f"leaf of shape {jnp.shape(leaf)} has no axis {axis} of {len(agents)} agents")
    return {a: jax.tree.map(lambda x, i=i: jnp.take(x, i, axis=axis), tree) for i, a in enumerate(agents)}


# ----------------------------------------------------------------------------- one env with agents as a batch axis

#: The keys :class:`AgentBatch` adds to each agent's observation: a one-hot of the
#: agent's index ``[A]`` (for parameters shared across agents) and the global state ``[D]``
#: (a centralised critic's input).
AGENT_ID = "agent_id"
GLOBAL_STATE = "global_state"


@struct.dataclass
class AgentBatchState:
    env_state: Any
    agent_returns: jax.Array  # float32 [A]: each agent's return in its current episode
    agent_lengths: jax.Array  # int32 [A]: each agent's steps in its current episode


class AgentBatch:
    """A multi-agent env of homogeneous agents as one gymnax-API env whose every array
    has a leading agent axis ``[A]``: how the multi-agent algorithms see it.

    ``reset`` gives observations with leaves ``[A, ...]``; ``step`` takes actions ``[A,
    ...]`` and returns rewards, ``terminated`` and ``truncated`` ``[A]``, each agent's
    own. Its spaces and :func:`jaxrl.envs.spec` describe one agent, so single-agent
    networks, masks and distributions apply to the agent axis as to any batch axis.

    With ``agent_id`` each observation gains :data:`AGENT_ID`, the agent's one-hot
    index; with ``global_state``, :data:`GLOBAL_STATE`, the env's global state (the
    same for every agent). An array observation then becomes ``{"observation": obs,
    ...}``; a dict one gains the keys beside its own (an ``"action_mask"`` stays on top).

    ``info`` holds ``final_observation`` (the observations before an auto-reset, with
    the global state before it), each agent's ``episode_return`` and
    ``episode_length`` ``[A]`` at the step its episode ended (0 elsewhere: an agent's
    episode ends when it leaves or the env's episode ends) and, for an env whose agents
    can leave (:attr:`MultiAgentEnv.agents_leave`; :attr:`padding_steps` is then True),
    ``valid [A]``: False at the steps of an agent that has left, which are no transitions.
    """

    multi_agent = False  # its spaces are one agent's: jaxrl.envs.spec describes it

    def __init__(self, env: MultiAgentEnv, agent_id: bool = False, global_state: bool = False, params=None):
        if not getattr(env, "multi_agent", False):
            raise ValueError(
                f"{env.name} is a single-agent env; the multi-agent algorithms (ippo, mappo, iql, vdn) "
                "need a multi-agent one (jaxmarl:<id>, MultiAgentClimbing-v0)"
            )
        self.agent_spec = spec(env, params)
        self.agent_spec.agent  # noqa: B018 -- raises for heterogeneous agents, naming them
        self._env, self.agent_id, self.with_global_state = env, agent_id, global_state
        self.padding_steps = bool(env.agents_leave)

    @property
    def name(self) -> str:
        return self._env.name

    @property
    def agents(self) -> tuple[str, ...]:
        return tuple(self._env.agents)

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    @property
    def default_params(self):
        return self._env.default_params

    def _observe(self, obs: dict, global_state: jax.Array):
        obs = stack(obs, self.agents)
        extra = {}
        if self.agent_id:
            extra[AGENT_ID] = jnp.eye(self.num_agents, dtype=jnp.float32)
        if self.with_global_state:
            extra[GLOBAL_STATE] = jnp.broadcast_to(global_state, (self.num_agents,) + global_state.shape)
        if not extra:
            return obs
        return {**obs, **extra} if isinstance(obs, dict) else {"observation": obs, **extra}

    def reset(self, key: jax.Array, params=None):
        """``(obs [A, ...], state)``."""
        params = self.default_params if params is None else params
        obs, env_state = self._env.reset(key, params)
        zeros = jnp.zeros((self.num_agents,), jnp.float32)
        state = AgentBatchState(env_state, zeros, zeros.astype(jnp.int32))
        return self._observe(obs, self._env.global_state(env_state, params)), state

    def step(self, key: jax.Array, state: AgentBatchState, action, params=None):
        """One step of every agent: ``action [A, ...]`` -> ``(obs, state, reward [A],
        terminated [A], truncated [A], info)``."""
        params = self.default_params if params is None else params
        obs, env_state, rewards, terminated, truncated, info = self._env.step(
            key, state.env_state, unstack(action, self.agents), params
        )
        reward, terminated, truncated, active = (
            stack(x, self.agents) for x in (rewards, terminated, truncated, info["active"])
        )
        agent_returns = state.agent_returns + jnp.where(active, reward, 0.0)
        agent_lengths = state.agent_lengths + active.astype(jnp.int32)
        ended = (terminated | truncated) & active
        restart = ended | info["episode_done"]
        out = {
            "final_observation": self._observe(info["final_observation"], info["final_global_state"]),
            "episode_return": jnp.where(ended, agent_returns, 0.0),
            "episode_length": jnp.where(ended, agent_lengths, 0),
        }
        if self.padding_steps:
            out["valid"] = active
        state = AgentBatchState(env_state, jnp.where(restart, 0.0, agent_returns), jnp.where(restart, 0, agent_lengths))
        return self._observe(obs, info["global_state"]), state, reward, terminated, truncated, out

    def observation_space(self, params=None):
        """One agent's observation space, with the keys this view adds."""
        params = self.default_params if params is None else params
        own = self._env.observation_space(params, self.agents[0])
        extra = {}
        if self.agent_id:
            extra[AGENT_ID] = spaces.Box(0.0, 1.0, (self.num_agents,), jnp.float32)
        if self.with_global_state:
            extra[GLOBAL_STATE] = self._env.global_state_space(params)
        if not extra:
            return own
        if isinstance(own, spaces.Dict):
            clash = sorted(set(own.spaces) & set(extra))
            if clash:
                raise ValueError(f"{self.name}: the observation already has key(s) {clash}, which AgentBatch adds")
            return spaces.Dict({**own.spaces, **extra})
        return spaces.Dict({"observation": own, **extra})

    def action_space(self, params=None):
        """One agent's action space."""
        return self._env.action_space(self.default_params if params is None else params, self.agents[0])


def make_agent_batch(env_id: str, agent_id: bool = False, global_state: bool = False, **env_kwargs):
    """``(AgentBatch(env, agent_id, global_state), env_params)`` for ``env_id`` made by
    :func:`jaxrl.envs.make`: how a multi-agent algorithm's config makes its env."""
    env, params = make(env_id, **env_kwargs)
    return AgentBatch(env, agent_id, global_state, params), params


# ----------------------------------------------------------------------------- episode statistics


@struct.dataclass
class EpisodeStatisticsState:
    env_state: Any
    episode_return: jax.Array  # float32: running team return (sum over agents)
    agent_returns: dict  # {agent: float32} running return of each agent
    episode_length: jax.Array  # int32


class EpisodeStatistics(Wrapper):
    """Track the current episode's returns and length (multi-agent
    :class:`jaxrl.envs.EpisodeStatistics`).

    At a step where the episode ended (``info["episode_done"]``), ``info`` holds its
    team return ``"episode_return"`` (the sum over agents of their returns),
    ``"agent_episode_returns"`` ``{agent: return}`` and ``"episode_length"``; at other
    steps they are 0 and must be masked out, as for a single agent.
    """

    def reset(self, key, params=None):
        obs, env_state = self._env.reset(key, params)
        zero = jnp.zeros((), jnp.float32)
        return obs, EpisodeStatisticsState(env_state, zero, {a: zero for a in self.agents}, jnp.zeros((), jnp.int32))

    def step(self, key, state, actions, params=None):
        obs, env_state, rewards, terminated, truncated, info = self._env.step(key, state.env_state, actions, params)
        done = jnp.all(jnp.stack([terminated[a] | truncated[a] for a in self.agents]))
        agent_returns = {a: state.agent_returns[a] + rewards[a].astype(jnp.float32) for a in self.agents}
        team_return = state.episode_return + sum(rewards[a].astype(jnp.float32) for a in self.agents)
        length = state.episode_length + 1
        info = {
            **info,
            "episode_return": jnp.where(done, team_return, 0.0),
            "agent_episode_returns": {a: jnp.where(done, r, 0.0) for a, r in agent_returns.items()},
            "episode_length": jnp.where(done, length, 0),
            "episode_done": done,
        }
        state = EpisodeStatisticsState(
            env_state,
            jnp.where(done, 0.0, team_return),
            {a: jnp.where(done, 0.0, r) for a, r in agent_returns.items()},
            jnp.where(done, 0, length),
        )
        return obs, state, rewards, terminated, truncated, info

    def global_state(self, state: EpisodeStatisticsState, params=None) -> jax.Array:
        return self._env.global_state(state.env_state, params)


# ----------------------------------------------------------------------------- the built-in task

# The climbing game (Claus & Boutilier, 1998): row = agent_0's action, column = agent_1's.
# The best joint action (0, 0) pays 11, but a one-sided deviation from it costs -30, so
# independent learners drift to the safe (2, 2) = 5 or (1, 1) = 7, and a sum of
# per-agent values cannot represent the table.
_CLIMBING = np.array([[11.0, -30.0, 0.0], [-30.0, 7.0, 6.0], [0.0, 0.0, 5.0]], np.float32)
# Table 1 relabels the actions (new action i is old action _RELABEL[i]) so the best joint
# action is (1, 1): the agents must read which table is in play.
_RELABEL = np.array([2, 0, 1])
#: The two payoff tables ``[2, 3, 3]``: table, agent_0's action, agent_1's action.
CLIMBING_PAYOFF = np.stack([_CLIMBING, _CLIMBING[np.ix_(_RELABEL, _RELABEL)]])


@struct.dataclass
class ClimbingParams:
    max_steps_in_episode: int = 10  # rounds per episode; the episode then ends terminated


@struct.dataclass
class ClimbingState:
    table: jax.Array  # int32: which payoff table this episode plays
    last_actions: jax.Array  # int32 [2]: each agent's previous action, -1 before the first round
    time: jax.Array  # int32: rounds played


class ClimbingGame(MultiAgentEnv):
    """``"MultiAgentClimbing-v0"``: two agents play the climbing game for
    ``max_steps_in_episode`` rounds (10) with one shared reward.

    At each reset a payoff table is drawn uniformly from :data:`CLIMBING_PAYOFF` (the
    climbing game, and the same with relabelled actions). Each round both agents
    choose one of 3 actions at once and each receives the team payoff
    ``CLIMBING_PAYOFF[table, a_0, a_1]``. Agent ``i`` observes float32 ``[6]``: the
    table one-hot ``[2]``, its own previous action one-hot ``[3]`` (zeros in the first
    round) and the fraction of rounds played; it never sees the other agent's action.
    The global state is float32 ``[9]``: the table, both previous actions, the time.
    The episode ends ``terminated`` after the last round (the horizon is observed).

    Per agent (10 rounds): optimum 110 (joint action (0, 0) on table 0, (1, 1) on
    table 1), uniformly random play -310/9 ~ -34.4 in expectation, and the traps the
    independent learners fall into 70 (both on the 7) and 50 (both on the 5). The team
    return of :class:`EpisodeStatistics` (a sum over agents) is twice these.
    """

    agents = ("agent_0", "agent_1")

    @property
    def name(self) -> str:
        return "MultiAgentClimbing-v0"

    @property
    def default_params(self) -> ClimbingParams:
        return ClimbingParams()

    def _observe(self, state: ClimbingState, params) -> dict:
        table = jax.nn.one_hot(state.table, 2)
        # one_hot of -1 is all zeros: nothing played yet.
        last = jax.nn.one_hot(state.last_actions, 3)
        time = (state.time / params.max_steps_in_episode).astype(jnp.float32)[None]
        return {a: jnp.concatenate([table, last[i], time]) for i, a in enumerate(self.agents)}

    def global_state(self, state: ClimbingState, params=None) -> jax.Array:
        params = self.default_params if params is None else params
        last = jax.nn.one_hot(state.last_actions, 3).reshape(-1)
        time = (state.time / params.max_steps_in_episode).astype(jnp.float32)[None]
        return jnp.concatenate([jax.nn.one_hot(state.table, 2), last, time])

    def reset_env(self, key, params):
        state = ClimbingState(
            table=jax.random.randint(key, (), 0, 2, jnp.int32),
            last_actions=jnp.full((2,), -1, jnp.int32),
            time=jnp.zeros((), jnp.int32),
        )
        return self._observe(state, params), state

    def step_env(self, key, state, actions, params):
        joint = jnp.stack([jnp.asarray(actions[a], jnp.int32) for a in self.agents])
        reward = jnp.asarray(CLIMBING_PAYOFF)[state.table, joint[0], joint[1]]
        state = state.replace(last_actions=joint, time=state.time + 1)
        end = state.time >= params.max_steps_in_episode
        no = jnp.zeros((), jnp.bool_)
        return (
            self._observe(state, params),
            state,
            {a: reward for a in self.agents},
            {a: end for a in self.agents},
            {a: no for a in self.agents},
            {},
        )

    def observation_space(self, params, agent: str):
        return spaces.Box(0.0, 1.0, (6,), jnp.float32)

    def action_space(self, params, agent: str):
        return spaces.Discrete(3)

    def global_state_space(self, params):
        return spaces.Box(0.0, 1.0, (9,), jnp.float32)


def make_climbing(**overrides):
    params = ClimbingParams()
    known = [f.name for f in dataclasses.fields(params)]
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise ValueError(f"unknown env parameter(s) {unknown} for 'MultiAgentClimbing-v0'; its parameters are {known}")
    return ClimbingGame(), params.replace(**overrides)
