"""JaxMARL's envs in jaxrl's multi-agent API: ``"jaxmarl:<id>"`` (``pip install "jaxrl[marl]"``).

``jaxrl.envs.make("jaxmarl:MPE_simple_spread_v3")`` is JaxMARL's env of that id as a
:class:`jaxrl.envs.multiagent.MultiAgentEnv`. ``make``'s keyword arguments other than
``max_steps_in_episode`` go to ``jaxmarl.make(id, **kwargs)`` (``num_allies=2`` for
SMAX, ``num_agents=2`` for MPE spread, ...). The ids are :data:`SUPPORTED`: the MPE
tasks, SMAX (both teams as agents) and HeuristicEnemySMAX (the allies against JaxMARL's
scripted enemies), and Hanabi.

What the adapter changes, and why:

- Time limits. JaxMARL ends an episode with one ``done`` flag, so a time limit cannot be
  told from a real end; its MPE also ends after ``max_steps + 1`` steps. The adapter
  builds time-limited envs (MPE, SMAX) with a limit JaxMARL never reaches and counts
  steps itself: ``EnvParams.max_steps_in_episode`` (default: the env's own
  ``max_steps``, 25 for MPE as in PettingZoo, 100 for SMAX) ends an episode
  ``truncated``; JaxMARL's ``done`` is then always ``terminated``. Set the limit with
  ``max_steps_in_episode``, not JaxMARL's ``max_steps``.
- Final observations. JaxMARL's ``step`` resets inside and returns only the new
  episode's observation; the adapter calls its ``step_env`` (the step without reset)
  and resets itself with the same key split, so ``info["final_observation"]`` is the
  true last observation and every other output equals JaxMARL's ``step`` key for key.
- Agents that leave early. A SMAX unit that dies is ``done`` in JaxMARL from then on;
  here it is ``terminated``, with ``info["active"][agent]`` False after its last step.
- Action masks. SMAX's ``get_avail_actions`` and Hanabi's ``get_legal_moves`` become
  ``{"observation": obs, "action_mask": bool [num_actions]}`` per agent.
- Global state. SMAX's ``world_state`` (taken out of the observation dict), otherwise
  the agents' observations concatenated in agent order (as JaxMARL's baselines do).
- Keys. jaxrl's typed keys (``jax.random.key``) go to JaxMARL unchanged: its envs
  split and sample with them as with raw ones.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import numbers
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import spaces

from jaxrl.envs.multiagent import MultiAgentEnv
from jaxrl.envs.spaces import MultiDiscrete

__all__ = ["SUPPORTED", "JaxMarlEnv", "EnvParams", "EnvState", "check", "make", "require_jaxmarl"]

_MPE = (
    "MPE_simple_v3",
    "MPE_simple_tag_v3",
    "MPE_simple_world_comm_v3",
    "MPE_simple_spread_v3",
    "MPE_simple_crypto_v3",
    "MPE_simple_speaker_listener_v4",
    "MPE_simple_push_v3",
    "MPE_simple_adversary_v3",
    "MPE_simple_reference_v3",
)
_SMAX = ("SMAX", "HeuristicEnemySMAX")
#: The JaxMARL ids the adapter serves (others need downloads, brax, or differ in API).
SUPPORTED = _MPE + _SMAX + ("hanabi",)
# The method giving each agent's legal actions, for the envs that restrict them.
_MASKS = {"SMAX": "get_avail_actions", "HeuristicEnemySMAX": "get_avail_actions", "hanabi": "get_legal_moves"}
_NEVER = 2**31 - 1  # the max_steps JaxMARL is built with where the adapter applies its own limit
DEFAULT_MAX_STEPS = 10_000  # the time limit of envs without one of their own (Hanabi)
ACTION_MASK = "action_mask"  # jaxrl.envs.ACTION_MASK


@contextlib.contextmanager
def _quiet_stdout():
    """Silence stdout at the file-descriptor level: jaxmarl prints about its optional
    submodules on import, and an import inside it swaps ``sys.stdout`` back to the real
    one first, so ``contextlib.redirect_stdout`` alone does not catch the lines."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(io.StringIO()):
            os.dup2(devnull.fileno(), 1)
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def require_jaxmarl():
    """The ``jaxmarl`` module, or an ImportError saying how to install it."""
    try:
        with _quiet_stdout():
            import jaxmarl
    except ImportError as error:
        raise ImportError(
            f'"jaxmarl:" envs need jaxmarl ({error}); install it with pip install "jaxrl[marl]"'
        ) from error
    return jaxmarl


def check(name: str) -> None:
    """ValueError (with close matches) unless ``name`` is in :data:`SUPPORTED`."""
    if name not in SUPPORTED:
        close = difflib.get_close_matches(name, SUPPORTED, n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(
            f"unknown or unsupported jaxmarl env {name!r} (jaxmarl:{name}).{hint} Supported: {', '.join(SUPPORTED)}"
        )


@struct.dataclass
class EnvParams:
    max_steps_in_episode: int = DEFAULT_MAX_STEPS


@struct.dataclass
class EnvState:
    env_state: object  # JaxMARL's state
    time: jax.Array  # int32: steps in this episode so far
    left: jax.Array  # bool [A]: agents that have left the episode (terminated earlier)
    global_state: jax.Array  # float32 [D]: the global state of env_state


def _space(space, where: str):
    """A JaxMARL space as a gymnax one (MultiDiscrete as jaxrl's)."""
    kind = type(space).__name__
    if kind == "Discrete":
        return spaces.Discrete(int(space.n))
    if kind == "MultiDiscrete":
        return MultiDiscrete(np.asarray(space.num_categories))
    if kind == "Box":
        # Hanabi gives its shape as a bare integer.
        shape = tuple(int(n) for n in np.atleast_1d(space.shape))
        return spaces.Box(space.low, space.high, shape, space.dtype)
    raise ValueError(f"unsupported JaxMARL space {kind} for {where}: Discrete, MultiDiscrete or Box")


class JaxMarlEnv(MultiAgentEnv):
    """A JaxMARL env in the multi-agent API (see the module's docstring). One env;
    batch with ``jax.vmap``."""

    def __init__(self, name: str, **kwargs):
        check(name)
        if "max_steps" in kwargs:
            raise ValueError(f"jaxmarl:{name}: set the time limit with max_steps_in_episode, not max_steps")
        jaxmarl = require_jaxmarl()
        self.id = name
        self._time_limited = name in _MPE or name in _SMAX
        # JaxMARL's constructors compute and assert on arrays: concrete even when an
        # algorithm makes its env inside a jit trace.
        with jax.ensure_compile_time_eval():
            probe = jaxmarl.make(name, **kwargs)
            # The env's own limit becomes the default of ours; JaxMARL's is moved out of reach.
            self.own_max_steps = int(probe.max_steps) if self._time_limited else DEFAULT_MAX_STEPS
            self.env = jaxmarl.make(name, max_steps=_NEVER, **kwargs) if self._time_limited else probe
        self.agents = tuple(self.env.agents)
        self._mask = _MASKS.get(name)
        self._world_state = name in _SMAX
        self.agents_leave = name in _SMAX

    @property
    def name(self) -> str:
        return f"jaxmarl:{self.id}"

    @property
    def default_params(self) -> EnvParams:
        return EnvParams(max_steps_in_episode=self.own_max_steps)

    def _observe(self, obs: dict, env_state) -> dict:
        obs = {a: obs[a] for a in self.agents}  # drops SMAX's "world_state"
        if self._mask is None:
            return obs
        masks = getattr(self.env, self._mask)(env_state)
        return {a: {"observation": obs[a], ACTION_MASK: masks[a].astype(jnp.bool_)} for a in self.agents}

    def _global(self, obs: dict) -> jax.Array:
        if self._world_state:
            return obs["world_state"].astype(jnp.float32)
        return jnp.concatenate([jnp.ravel(obs[a]).astype(jnp.float32) for a in self.agents])

    def reset_env(self, key, params):
        obs, env_state = self.env.reset(key)
        left = jnp.zeros((self.num_agents,), jnp.bool_)
        state = EnvState(env_state, jnp.zeros((), jnp.int32), left, self._global(obs))
        return self._observe(obs, env_state), state

    def step_env(self, key, state, actions, params):
        obs, env_state, rewards, dones, info = self.env.step_env(key, state.env_state, dict(actions))
        time = state.time + 1
        end = dones["__all__"]
        # With JaxMARL's own limit out of reach, every JaxMARL end is a real one.
        terminated = {a: jnp.logical_or(dones[a], end) for a in self.agents}
        limit = time >= params.max_steps_in_episode
        truncated = {a: jnp.logical_and(limit, ~terminated[a]) for a in self.agents}
        info = {**info, "active": {a: ~state.left[i] for i, a in enumerate(self.agents)}}
        left = jnp.stack([terminated[a] for a in self.agents])
        state = EnvState(env_state, time, left, self._global(obs))
        rewards = {a: jnp.asarray(rewards[a], jnp.float32) for a in self.agents}  # drops Hanabi's "__all__"
        return self._observe(obs, env_state), state, rewards, terminated, truncated, info

    def global_state(self, state: EnvState, params=None) -> jax.Array:
        return state.global_state

    def observation_space(self, params, agent: str):
        obs = _space(self.env.observation_space(agent), f"{self.name} observation of {agent}")
        if self._mask is None:
            return obs
        n = int(self.env.action_space(agent).n)
        return spaces.Dict({"observation": obs, ACTION_MASK: spaces.Box(False, True, (n,), jnp.bool_)})

    def action_space(self, params, agent: str):
        return _space(self.env.action_space(agent), f"{self.name} action of {agent}")

    def global_state_space(self, params):
        params = self.default_params if params is None else params
        _, state = jax.eval_shape(self.reset_env, jax.random.key(0), params)
        return spaces.Box(-jnp.inf, jnp.inf, state.global_state.shape, jnp.float32)


def make(name: str, **kwargs):
    """``(JaxMarlEnv(name, **kwargs), EnvParams)``; ``max_steps_in_episode`` (an int >= 1)
    goes to the params, every other keyword to ``jaxmarl.make``."""
    max_steps = kwargs.pop("max_steps_in_episode", None)
    env = JaxMarlEnv(name, **kwargs)
    params = env.default_params
    if max_steps is not None:
        if isinstance(max_steps, bool) or not isinstance(max_steps, numbers.Integral) or max_steps < 1:
            raise ValueError(f"max_steps_in_episode must be an integer >= 1, got {max_steps!r}")
        params = params.replace(max_steps_in_episode=int(max_steps))
    return env, params
