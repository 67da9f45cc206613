"""brax's physics tasks: ``"brax:<name>"`` (``pip install "jaxrl[brax]"``).

``jaxrl.envs.make("brax:inverted_pendulum")`` is brax's own env
(``brax.envs.get_environment(name, **kwargs)``, its ``reset(rng)`` and
``step(state, action)``, none of brax's training wrappers) in the gymnax API:

- the observation is brax's (float32 ``[observation_size]``), the action a float32
  vector in ``[-1, 1]^action_size``, the reward brax's;
- ``terminated`` is brax's ``done`` (the task failed, e.g. the pole fell);
- ``truncated`` is the time limit, ``EnvParams.max_steps_in_episode`` (default 1000,
  brax's usual episode length) steps without termination. It is never ``terminated``:
  brax's training wrapper sets ``done`` at the time limit, this adapter does not;
- auto-reset draws a fresh initial state from the step's key (gymnax's reset), where
  brax's ``AutoResetWrapper`` replays the first state it cached; the last observation
  before the reset is ``info["final_observation"]``.

``make`` takes ``max_steps_in_episode`` and the keyword arguments of brax's env class
(``backend``: ``"generalized"`` (brax's default for its tasks), ``"positional"``,
``"spring"`` or ``"mjx"``; ``n_frames``; a task's own, such as ``ctrl_cost_weight``).
One env; batch with ``jax.vmap``.
"""

from __future__ import annotations

import inspect
import numbers

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

__all__ = ["BraxEnv", "EnvParams", "EnvState", "BACKENDS", "check", "make", "names", "require_brax"]

# brax's physics pipelines (``brax.envs.base.PipelineEnv``).
BACKENDS = ("generalized", "positional", "spring", "mjx")


def require_brax():
    """The ``brax`` module (with ``brax.envs`` imported), or an ImportError saying how to install it."""
    try:
        import brax
        import brax.envs  # noqa: F401
    except ImportError as error:
        raise ImportError(f'"brax:" envs need brax ({error}); install it with pip install "jaxrl[brax]"') from error
    return brax


def names() -> list[str]:
    """The env names brax has registered (``brax.envs.register_environment`` adds to them)."""
    return sorted(require_brax().envs._envs)


def check(name: str) -> None:
    """ValueError unless brax has an env registered as ``name``."""
    known = names()
    if name not in known:
        raise ValueError(f"unknown brax env {name!r} (brax:{name}); brax's envs: {', '.join(known)}")


@struct.dataclass
class EnvParams:
    max_steps_in_episode: int = 1000  # the time limit (truncation), brax's usual episode length


@struct.dataclass
class EnvState:
    brax: object  # brax.envs.State: pipeline_state, obs, reward, done, metrics, info
    time: jax.Array  # int32 steps taken in this episode


def _like(new, old):
    """``new``'s leaves with ``old``'s dtypes (brax's step returns Python floats and
    weakly typed arrays where its reset returned float32 arrays; a scan carry or
    gymnax's reset-select needs the same types on both sides)."""

    def cast(n, o):
        return n if jax.dtypes.issubdtype(o.dtype, jax.dtypes.prng_key) else jnp.asarray(n, dtype=o.dtype)

    return jax.tree.map(cast, new, old)


class BraxEnv(environment.Environment):
    """A brax env with the gymnax API (see the module's docstring). ``brax_env`` is the
    raw brax env. One env; batch with ``jax.vmap``."""

    def __init__(self, name: str, **brax_kwargs):
        super().__init__()
        check(name)
        brax = require_brax()
        self.env_name = name
        self.brax_kwargs = dict(brax_kwargs)
        self.brax_env = brax.envs.get_environment(name, **brax_kwargs)
        # Shapes only: brax's own observation_size runs a reset.
        self._reset_shape = jax.eval_shape(self.brax_env.reset, jax.random.key(0))

    @property
    def name(self) -> str:
        return f"brax:{self.env_name}"

    @property
    def backend(self) -> str:
        return self.brax_env.backend

    @property
    def num_actions(self) -> int:
        return int(self.brax_env.action_size)

    @property
    def default_params(self) -> EnvParams:
        return EnvParams()

    def _brax_reset(self, key):
        return _like(self.brax_env.reset(key), self._reset_shape)

    def reset_env(self, key, params):
        state = self._brax_reset(key)
        return state.obs, EnvState(brax=state, time=jnp.zeros((), jnp.int32))

    def step_env(self, key, state, action, params):
        del key  # brax's dynamics are deterministic
        action = jnp.asarray(action, jnp.float32)
        brax_state = _like(self.brax_env.step(state.brax, action), state.brax)
        state = EnvState(brax=brax_state, time=state.time + 1)
        terminated = brax_state.done > 0
        return brax_state.obs, state, brax_state.reward, terminated, {}

    def is_truncated(self, state, params):
        return (state.time >= params.max_steps_in_episode) & ~(state.brax.done > 0)

    def observation_space(self, params=None):
        def box(leaf):
            return spaces.Box(-jnp.inf, jnp.inf, tuple(leaf.shape), jnp.float32)

        obs = self._reset_shape.obs
        if isinstance(obs, dict):
            return spaces.Dict({key: box(leaf) for key, leaf in obs.items()})
        return box(obs)

    def action_space(self, params=None):
        return spaces.Box(-1.0, 1.0, (self.num_actions,), jnp.float32)


def _brax_parameters(name: str) -> list[str]:
    """The keyword arguments brax's env class ``name`` takes (its own and PipelineEnv's ``n_frames``)."""
    env_class = require_brax().envs._envs[name]
    own = [
        p.name
        for p in inspect.signature(env_class.__init__).parameters.values()
        if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    return own + [extra for extra in ("backend", "n_frames") if extra not in own]


def make(name: str, **overrides):
    """``(BraxEnv(name, **brax_kwargs), EnvParams(max_steps_in_episode))``: ``overrides``
    holds ``max_steps_in_episode`` and keyword arguments for brax's env class."""
    check(name)
    params = EnvParams()
    if "max_steps_in_episode" in overrides:
        steps = overrides.pop("max_steps_in_episode")
        if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 1:
            raise ValueError(f"max_steps_in_episode must be an integer >= 1, got {steps!r}")
        params = params.replace(max_steps_in_episode=int(steps))
    known = _brax_parameters(name)
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise ValueError(
            f"unknown env parameter(s) {unknown} for brax:{name}; its parameters are {['max_steps_in_episode', *known]}"
        )
    backend = overrides.get("backend", BACKENDS[0])
    if backend not in BACKENDS:
        raise ValueError(f"unknown brax backend {backend!r} for brax:{name}; brax's backends: {', '.join(BACKENDS)}")
    return BraxEnv(name, **overrides), params
