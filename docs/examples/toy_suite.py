"""A toy env suite under the prefix ``"toy:"``: ``jaxrl.envs.make("toy:Corridor-5")``.

An adapter is a function ``make(name, **overrides) -> (env, env_params)`` returning an
env with the gymnax API, and a ``check(name)`` that refuses names the suite does not
know, registered for a prefix with :func:`jaxrl.envs.register`.
"""

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

from jaxrl import envs
from jaxrl.algorithms import ppo


@struct.dataclass
class EnvState:
    position: jax.Array  # int32 cell, 0 .. length - 1
    time: jax.Array  # int32 steps into the episode (gymnax's is_truncated reads it)


@struct.dataclass
class EnvParams:
    max_steps_in_episode: int = 20  # the time limit: jaxrl reads it as the env's


class Corridor(environment.Environment):
    """Walk to the right end of a corridor of ``length`` cells: action 1 steps right,
    0 left. Reaching the end terminates the episode with reward 1; the time limit
    truncates it. The observation is the one-hot cell."""

    def __init__(self, length: int):
        super().__init__()
        self.length = length

    @property
    def name(self) -> str:
        return f"toy:Corridor-{self.length}"

    @property
    def num_actions(self) -> int:
        return 2

    @property
    def default_params(self) -> EnvParams:
        return EnvParams()

    def reset_env(self, key, params):
        state = EnvState(position=jnp.zeros((), jnp.int32), time=jnp.zeros((), jnp.int32))
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        # One transition; gymnax's step() adds truncation (is_truncated), the automatic
        # reset and info["final_observation"], the observation that ended the episode.
        position = jnp.clip(state.position + 2 * action - 1, 0, self.length - 1)
        state = EnvState(position=position, time=state.time + 1)
        terminated = position == self.length - 1
        return self.get_obs(state), state, terminated.astype(jnp.float32), terminated, {}

    def get_obs(self, state, params=None, key=None):
        return jax.nn.one_hot(state.position, self.length)

    def observation_space(self, params=None):
        return spaces.Box(0.0, 1.0, (self.length,), jnp.float32)

    def action_space(self, params=None):
        return spaces.Discrete(2)


def check(name: str) -> None:
    """ValueError unless ``name`` is ``Corridor-<length>`` with a length of at least 2."""
    kind, _, length = name.partition("-")
    if kind != "Corridor" or not length.isdigit() or int(length) < 2:
        raise ValueError(f"unknown toy env {name!r}: toy ids are Corridor-<length>, length >= 2 (toy:Corridor-5)")


def make(name: str, **overrides):
    """``(Corridor(length), EnvParams)``; ``overrides`` set EnvParams' fields."""
    check(name)
    env = Corridor(int(name.partition("-")[2]))
    unknown = sorted(set(overrides) - {"max_steps_in_episode"})
    if unknown:
        raise ValueError(
            f"unknown env parameter(s) {unknown} for toy:{name}; its parameters are ['max_steps_in_episode']"
        )
    return env, env.default_params.replace(**overrides)


envs.register("toy:", make, check=check, replace=True)


def train_ppo(seeds: int = 4):
    """PPO on ``toy:Corridor-5`` for ``seeds`` seeds at once: every algorithm takes a
    registered env id."""
    config = ppo.Config(
        env_id="toy:Corridor-5",
        num_envs=4,
        num_steps=16,
        hidden_sizes=(16,),
        learning_rate=3e-3,
        total_timesteps=4 * 16 * 30,
        num_evals=1,
        eval_episodes=4,
        num_reports=0,
    )
    keys = jax.random.split(jax.random.key(0), seeds)
    return jax.jit(jax.vmap(ppo.train, in_axes=(0, None)))(keys, config)
