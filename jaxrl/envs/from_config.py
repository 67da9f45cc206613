"""An algorithm config's env: ``(env, env_params)`` and :class:`jaxrl.envs.EnvSpec` of a
config's ``env_id`` / ``env_kwargs`` and, for a multi-agent config (its ``agent_view``
set), the :class:`jaxrl.envs.multiagent.AgentBatch` view whose agents are a batch axis."""

from __future__ import annotations

import functools

from jaxrl.envs.multiagent import make_agent_batch
from jaxrl.envs.registry import make
from jaxrl.envs.spec import EnvSpec, spec


def _make(env_id: str, env_kwargs: tuple, agent_view: tuple | None):
    if agent_view is None:
        return make(env_id, **dict(env_kwargs))
    return make_agent_batch(env_id, *agent_view, **dict(env_kwargs))


def make_config_env(config):
    """``(env, env_params)`` of an algorithm config: :func:`make` of its ``env_id`` and
    ``env_kwargs`` or, where the config's ``agent_view`` is set (a multi-agent config:
    ``(agent_id, global_state)``), the :class:`jaxrl.envs.multiagent.AgentBatch` view of
    that multi-agent env, whose agents are a batch axis."""
    return _make(config.env_id, config.env_kwargs, _agent_view(config))


def config_num_agents(config) -> int:
    """The agents of a multi-agent config's env (its ``agent_view`` set); 1 otherwise (cached)."""
    view = _agent_view(config)
    return _cached_num_agents(config.env_id, config.env_kwargs, view) if view else 1


@functools.cache
def _cached_num_agents(env_id: str, env_kwargs: tuple, agent_view: tuple) -> int:
    return _make(env_id, env_kwargs, agent_view)[0].num_agents


def _agent_view(config) -> tuple | None:
    return getattr(config, "agent_view", None)


@functools.cache
def _cached_spec(env_id: str, env_kwargs: tuple, agent_view: tuple | None) -> EnvSpec:
    return spec(*_make(env_id, env_kwargs, agent_view))


def config_spec(config) -> EnvSpec:
    """The :class:`EnvSpec` of an algorithm config's env (:func:`make_config_env`;
    cached): one agent's, for a multi-agent config."""
    return _cached_spec(config.env_id, config.env_kwargs, _agent_view(config))
