"""MaskedCue, a registered-in-tests env with dict observations and an action mask that
changes every step, shared by the structured-observation and dataset tests."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

NUM_ACTIONS = 4
EPISODE = 8
PENALTY = -1000.0  # the reward of a masked action: one would show in any episode's return


@struct.dataclass
class CueParams:
    max_steps_in_episode: int = EPISODE


@struct.dataclass
class CueState:
    cue: jax.Array  # int32: the rewarded action
    mask: jax.Array  # bool [A]: the allowed actions (the cue and one other)
    time: jax.Array


class MaskedCue(environment.Environment):
    """Each step shows a cue (one-hot) and a position vector; the cue's action earns 1,
    another allowed action 0, a masked one ``PENALTY``. Two of four actions are allowed,
    drawn afresh every step. Episodes are cut at ``max_steps_in_episode`` steps."""

    @property
    def default_params(self):
        return CueParams()

    def _draw(self, key, time):
        cue_key, other_key = jax.random.split(key)
        cue = jax.random.randint(cue_key, (), 0, NUM_ACTIONS)
        other = (cue + jax.random.randint(other_key, (), 1, NUM_ACTIONS)) % NUM_ACTIONS
        mask = (jnp.arange(NUM_ACTIONS) == cue) | (jnp.arange(NUM_ACTIONS) == other)
        return CueState(cue=cue, mask=mask, time=time)

    def _obs(self, state):
        return {
            "cue": jax.nn.one_hot(state.cue, NUM_ACTIONS),
            "position": jnp.stack([state.time, 10.0 + 5.0 * state.time]).astype(jnp.float32),
            "action_mask": state.mask,
        }

    def reset_env(self, key, params):
        state = self._draw(key, jnp.zeros((), jnp.int32))
        return self._obs(state), state

    def step_env(self, key, state, action, params):
        reward = jnp.where(state.mask[action], (action == state.cue).astype(jnp.float32), PENALTY)
        state = self._draw(key, state.time + 1)
        return self._obs(state), state, reward, jnp.zeros((), bool), {}

    def observation_space(self, params=None):
        return spaces.Dict(
            {
                "cue": spaces.Box(0.0, 1.0, (NUM_ACTIONS,), jnp.float32),
                "position": spaces.Box(0.0, 100.0, (2,), jnp.float32),
                "action_mask": spaces.Box(0, 1, (NUM_ACTIONS,), jnp.bool_),
            }
        )

    def action_space(self, params=None):
        return spaces.Discrete(NUM_ACTIONS)
