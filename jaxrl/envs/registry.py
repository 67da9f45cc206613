"""The env registry: :func:`make` for every gymnax id, every id given to :func:`register`
and every id under a registered prefix (``"<prefix><name>"``, served by an adapter
module such as :mod:`jaxrl.envs.gymnasium`), with the history arguments any env takes.
The built-in ids and prefixes are registered by :mod:`jaxrl.envs.builtin`."""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import numbers
from collections.abc import Callable

import gymnax
import numpy as np

from jaxrl.envs.partial import FrameStack

GYMNASIUM_PREFIX = "gymnasium:"
PGX_PREFIX = "pgx:"

# Ids registered with ``register``: id -> factory(**overrides) -> (env, env_params).
_REGISTRY: dict[str, Callable] = {}
# Prefixes registered with ``register``: prefix -> (factory(name, **overrides), check(name)).
_PREFIXES: dict[str, tuple[Callable, Callable | None]] = {}


def register(id_or_prefix: str, factory: Callable, replace: bool = False, check: Callable | None = None) -> None:
    """Make an env id, or a family of ids, known to :func:`make`.

    An id: ``make(env_id, **overrides)`` then returns ``factory(**overrides)``, which
    must be ``(env, env_params)`` for a gymnax-API env. A prefix (ending in ``":"``, such
    as ``"mysuite:"``): ``make("mysuite:<name>", **overrides)`` returns
    ``factory(name, **overrides)``, and ``check(name)``, if given, raises ``ValueError``
    for a name the suite does not know (so :func:`check_env_id` can refuse it without
    building an env).

    An id or prefix that already exists (a gymnax id, a registered one, a built-in
    prefix) is a ``ValueError`` unless ``replace``; a registered id shadows the gymnax id
    of the same name. ``make``'s history arguments (:data:`HISTORY_KWARGS`) never reach
    ``factory``.
    """
    if not isinstance(id_or_prefix, str) or not id_or_prefix or id_or_prefix == ":":
        raise TypeError(f"id_or_prefix must be a non-empty string, got {id_or_prefix!r}")
    if not callable(factory):
        raise TypeError(
            "factory must be callable (an id's factory(**overrides), a prefix's factory(name, **overrides)), "
            f"got {factory!r}"
        )
    if check is not None and not callable(check):
        raise TypeError(f"check must be callable as check(name) or None, got {check!r}")
    if id_or_prefix.endswith(":"):
        if not replace and id_or_prefix in _PREFIXES:
            raise ValueError(f"env prefix {id_or_prefix!r} is already registered; pass replace=True to replace it")
        _PREFIXES[id_or_prefix] = (factory, check)
        return
    if check is not None:
        raise ValueError(f"check applies to prefixes (ending in ':'), not to the id {id_or_prefix!r}")
    prefix = _prefix_of(id_or_prefix)
    if prefix is not None:
        raise ValueError(
            f"env ids starting with {prefix!r} belong to that registered prefix; register {id_or_prefix!r} without it"
        )
    if not replace and (id_or_prefix in _REGISTRY or id_or_prefix in gymnax.registered_envs):
        raise ValueError(f"env id {id_or_prefix!r} is already registered; pass replace=True to replace it")
    _REGISTRY[id_or_prefix] = factory


def _prefix_of(env_id: str) -> str | None:
    """The registered prefix ``env_id`` starts with (the longest), or None."""
    matches = [prefix for prefix in _PREFIXES if env_id.startswith(prefix)]
    return max(matches, key=len) if matches else None


def registered_ids() -> list[str]:
    """Every single env id ``make`` accepts: registered ids first, then gymnax ids.
    Families of ids under a prefix are listed by :func:`registered_prefixes`."""
    return list(_REGISTRY) + [env_id for env_id in gymnax.registered_envs if env_id not in _REGISTRY]


def registered_prefixes() -> list[str]:
    """The registered prefixes (``"gymnasium:"``, ``"pgx:"``, and any of a user's)."""
    return list(_PREFIXES)


def steps_on_host(env_id: str) -> bool:
    """Whether ``env_id``'s env runs on the host (its state is a handle, not arrays):
    the Gymnasium bridge's envs and envpool's."""
    return env_id.startswith((GYMNASIUM_PREFIX, "envpool:"))


def check_env_id(env_id: str) -> None:
    """Raise ``ValueError`` (with close matches) unless ``env_id`` is known: a registered
    id, a gymnax id, or ``"<prefix><name>"`` for a registered prefix whose ``check``
    accepts ``name`` (``"gymnasium:<id>"`` for any id Gymnasium knows)."""
    if not isinstance(env_id, str):
        raise TypeError(f"env_id must be a string, got {env_id!r}")
    if env_id in _REGISTRY:
        return
    prefix = _prefix_of(env_id)
    if prefix is not None:
        check = _PREFIXES[prefix][1]
        if check is not None:
            check(env_id[len(prefix) :])
        return
    ids = registered_ids()
    if env_id not in ids:
        if ":" in env_id:
            known = ", ".join(repr(p) for p in registered_prefixes())
            raise ValueError(
                f"unknown env prefix {env_id[: env_id.index(':') + 1]!r} in {env_id!r}; known prefixes: {known}"
            )
        close = difflib.get_close_matches(env_id, ids, n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(f"unknown env_id {env_id!r}.{hint} Known ids: {', '.join(ids)}")


# make's keyword arguments that ask for a FrameStack around any env, with their defaults.
HISTORY_KWARGS = {"frame_stack": 1, "stack_action": False, "stack_reward": False}


def _pop_history_kwargs(kwargs: dict) -> dict:
    """Take :data:`HISTORY_KWARGS` out of ``kwargs`` (in place), checked."""
    history = {name: kwargs.pop(name, default) for name, default in HISTORY_KWARGS.items()}
    frame_stack = history["frame_stack"]
    if isinstance(frame_stack, bool) or not isinstance(frame_stack, numbers.Integral) or frame_stack < 1:
        raise ValueError(f"frame_stack must be an integer >= 1 (1: no stacking), got {frame_stack!r}")
    for name in ("stack_action", "stack_reward"):
        if not isinstance(history[name], (bool, np.bool_)):
            raise ValueError(f"{name} must be a bool (True or False), got {history[name]!r}")
    return {"num_frames": int(frame_stack), **{name: bool(history[name]) for name in ("stack_action", "stack_reward")}}


def make(env_id: str, **env_param_overrides):
    """Create an env and its params, overriding any ``EnvParams`` field.

    ``make("CartPole-v1", max_steps_in_episode=200)`` gives the classic 200-step
    CartPole (time-limit override). Returns ``(env, env_params)``.

    ``make("gymnasium:<id>", **kwargs)`` gives any Gymnasium env with the same API,
    ``kwargs`` going to ``gymnasium.make`` (see :func:`jaxrl.envs.gymnasium.make`);
    ``make("pgx:<game>")`` a pgx board game against a random opponent
    (:mod:`jaxrl.envs.pgx`); an id or prefix given to :func:`register` gets ``kwargs``
    in its factory.

    For every env, the history arguments ``frame_stack`` (an int >= 1), ``stack_action``
    and ``stack_reward`` (bools) are taken out of ``kwargs`` and wrap the env in
    :class:`FrameStack` ``(env, frame_stack, stack_action, stack_reward)`` unless they
    ask for nothing (``frame_stack=1`` and neither bool).
    """
    check_env_id(env_id)
    history = _pop_history_kwargs(env_param_overrides)
    prefix = None if env_id in _REGISTRY else _prefix_of(env_id)
    if prefix is not None:
        env, params = _PREFIXES[prefix][0](env_id[len(prefix) :], **env_param_overrides)
    elif env_id in _REGISTRY:
        env, params = _REGISTRY[env_id](**env_param_overrides)
    else:
        env, params = gymnax.make(env_id)
        if env_param_overrides:
            known = [f.name for f in dataclasses.fields(params)]
            unknown = sorted(set(env_param_overrides) - set(known))
            if unknown:
                raise ValueError(f"unknown env parameter(s) {unknown} for {env_id!r}; its parameters are {known}")
            params = params.replace(**env_param_overrides)
    if history["num_frames"] > 1 or history["stack_action"] or history["stack_reward"]:
        env = FrameStack(env, **history)
        env.observation_space(params)  # raises now for a history the env cannot give
    return env, params


# The built-in prefixes: ``"<suite>:"`` is served by the adapter module
# ``jaxrl.envs.<suite>`` (its ``make(name, **overrides)`` and ``check(name)``), imported
# when first used, as each suite is an optional dependency.
def register_adapter(suite: str, replace: bool = True) -> None:
    """Register the prefix ``"<suite>:"`` for the adapter module ``jaxrl.envs.<suite>``."""

    def adapter():
        return importlib.import_module(f"jaxrl.envs.{suite}")

    register(
        f"{suite}:",
        lambda name, **kwargs: adapter().make(name, **kwargs),
        replace=replace,
        check=lambda name: adapter().check(name),
    )
