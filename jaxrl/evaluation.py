"""Deterministic evaluation over vmapped episodes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxrl import envs
from jaxrl.networks import reset_carry


class EvalResult(NamedTuple):
    returns: jax.Array  # [num_episodes] undiscounted return of each episode
    lengths: jax.Array  # [num_episodes] int32 length of each episode


@jax.custom_batching.custom_vmap
def any_in_batch(x: jax.Array) -> jax.Array:
    """``jnp.any(x)``, over every ``jax.vmap``-ed copy of ``x`` too: the result is one
    unbatched bool however ``x`` is vmapped."""
    return jnp.any(x)


@any_in_batch.def_vmap
def _any_in_batch_rule(axis_size, in_batched, x):
    del axis_size, in_batched
    # ``x`` carries the vmapped axis here; calling ``any_in_batch`` again lets an outer
    # vmap fold its own axis in the same way.
    return any_in_batch(x), False


def evaluate(
    act_fn: Callable,
    params,
    env,
    key: jax.Array,
    num_episodes: int,
    env_params=None,
    max_steps: int | None = None,
    carry=(),
) -> EvalResult:
    """Run ``num_episodes`` episodes in parallel, each to its first end.

    Args:
      act_fn: ``act_fn(params, obs [E, ...], carry, key) -> (action [E, ...], carry)``,
        typically the algorithm's ``act`` with ``deterministic=True`` bound.
      params: whatever ``act_fn`` needs (``state.params``).
      carry: the policy's memory before the episodes' first steps, leaves ``[E, ...]``
        (the algorithm's ``initial_carry(config, E)``); ``()`` without memory.
      env: an env id (made with :func:`jaxrl.envs.make`) or a gymnax-API env. For a
        :class:`jaxrl.envs.multiagent.AgentBatch` (rewards ``[E, A]``) an episode's
        return is the mean over agents of theirs, and it lasts until every agent's ends.
      env_params: the env's params (defaults to those ``make`` gives / the env's own).
      max_steps: steps to simulate (static); defaults to ``env_params.max_steps_in_episode``.
        Episodes still running then are cut there.
    Works under ``jit`` and ``vmap``.
    """
    if isinstance(env, str):
        env, default_params = envs.make(env)
        env_params = default_params if env_params is None else env_params
    elif env_params is None:
        env_params = env.default_params
    if max_steps is None:
        if getattr(env_params, "max_steps_in_episode", None) is None:
            raise ValueError(
                "the env has no time limit: pass max_steps (for a Gymnasium env, or make it with max_episode_steps=...)"
            )
        max_steps = int(env_params.max_steps_in_episode)
    env = envs.ClipAction(env)
    reset_key, run_key = jax.random.split(key)
    obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, num_episodes), env_params)
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def cond(carry):
        t, *_, running = carry
        return (t < max_steps) & any_in_batch(running)

    def body(carry):
        t, obs, env_state, policy_carry, total, length, running = carry
        act_key, env_key = jax.random.split(jax.random.fold_in(run_key, t))
        action, policy_carry = act_fn(params, obs, policy_carry, act_key)
        obs, env_state, reward, terminated, truncated, _ = step(
            jax.random.split(env_key, num_episodes), env_state, action, env_params
        )
        ended = terminated | truncated
        if reward.ndim > 1:  # agents as a batch axis (AgentBatch): the mean agent's return, until the last one ends
            reward = jnp.mean(reward.reshape(num_episodes, -1), axis=1)
            ended = jnp.all(ended.reshape(num_episodes, -1), axis=1)
        total = total + jnp.where(running, reward, 0.0)
        length = length + running.astype(jnp.int32)
        running = running & ~ended
        return t + 1, obs, env_state, reset_carry(policy_carry, ~running), total, length, running

    # A while loop stops as soon as every episode has ended (early in training most
    # end long before the time limit). Under vmap it runs while any episode of any
    # vmapped copy runs (``any_in_batch``: finished episodes are masked above), which
    # keeps the predicate unbatched, as host-env steps (io_callback) require.
    init = (
        jnp.zeros((), jnp.int32),
        obs,
        env_state,
        carry,
        jnp.zeros(num_episodes),
        jnp.zeros(num_episodes, jnp.int32),
        jnp.ones(num_episodes, bool),
    )
    *_, total, length, _ = jax.lax.while_loop(cond, body, init)
    return EvalResult(total, length)


def evaluate_config(
    act: Callable, initial_carry: Callable, params, key: jax.Array, config, deterministic: bool = True
) -> EvalResult:
    """An algorithm's evaluation: ``config.eval_episodes`` episodes of
    ``act(params, obs, carry, key, config, deterministic=deterministic)`` from
    ``initial_carry(config, eval_episodes)`` on the config's env (without training-time
    wrappers such as reward scaling). Deterministic, as training evaluates, unless
    ``deterministic=False`` (the policy's sampled actions)."""
    env, env_params = envs.make_config_env(config)
    act_fn = functools.partial(act, config=config, deterministic=deterministic)
    carry = initial_carry(config, config.eval_episodes)
    return evaluate(act_fn, params, env, key, config.eval_episodes, env_params, carry=carry)
