"""Algorithms, each an :class:`~jaxrl.algorithms.contract.Algorithm` record built from its
family's parts: :func:`get` finds one by name, :func:`names` lists them, :func:`register`
adds a user's own. ::

    from jaxrl import algorithms

    ppo = algorithms.get("ppo")
    out = jax.jit(ppo.train)(jax.random.key(0), ppo.preset("CartPole-v1"))

The modules are the same records by import path: ``from jaxrl.algorithms import ppo``
gives ``ppo.Config``, ``ppo.train``, ... (``ppo.algorithm`` is the record itself).
"""

from __future__ import annotations

import difflib
import importlib
from types import ModuleType

from jaxrl.algorithms.contract import Algorithm

# The built-in algorithms: name -> the module that builds its record (imported on first
# use, as some need optional extras).
BUILT_IN = {
    name: f"jaxrl.algorithms.{name}"
    for name in (
        "ppo",
        "ppo_es",
        "a2c",
        "reinforce",
        "impala",
        "appo",
        "pqn",
        "dqn",
        "apex",
        "r2d2",
        "ddpg",
        "td3",
        "sac",
        "bc",
        "td3_bc",
        "cql",
        "discrete_cql",
        "implicit_q",
        "es",
        "alphazero",
        "ippo",
        "mappo",
        "iql",
        "vdn",
    )
}
_REGISTERED: dict[str, Algorithm] = {}


def names() -> list[str]:
    """Every algorithm :func:`get` knows: the built-in ones, then those registered."""
    return list(BUILT_IN) + [name for name in _REGISTERED if name not in BUILT_IN]


def get(name: str) -> Algorithm:
    """The algorithm called ``name`` (``get("ppo")``)."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name not in BUILT_IN:
        known = names()
        close = difflib.get_close_matches(name, known, n=3) if isinstance(name, str) else []
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(f"unknown algorithm {name!r}.{hint} Available: {', '.join(known)}")
    return importlib.import_module(BUILT_IN[name]).algorithm


def register(algorithm: Algorithm, replace: bool = False) -> Algorithm:
    """Make a user's own algorithm known by its name to :func:`get`, and so to the runner,
    sweeps, PBT and the command line. A name already taken is a ValueError unless
    ``replace``. Returns ``algorithm``."""
    if not isinstance(algorithm, Algorithm):
        raise TypeError(f"register takes an Algorithm record (jaxrl.algorithms.contract.Algorithm), got {algorithm!r}")
    if not replace and (algorithm.name in BUILT_IN or algorithm.name in _REGISTERED):
        raise ValueError(f"algorithm {algorithm.name!r} is already registered; pass replace=True to replace it")
    _REGISTERED[algorithm.name] = algorithm
    return algorithm


def resolve(algorithm: str | Algorithm | ModuleType) -> Algorithm:
    """An algorithm given by name, by record, or by its module (``from jaxrl.algorithms
    import ppo``): its record."""
    if isinstance(algorithm, Algorithm):
        return algorithm
    if isinstance(algorithm, str):
        return get(algorithm)
    record = getattr(algorithm, "algorithm", None)
    if isinstance(algorithm, ModuleType) and isinstance(record, Algorithm):
        return record
    raise TypeError(f"expected an algorithm name, record or module, got {algorithm!r}")


__all__ = ["Algorithm", "BUILT_IN", "get", "names", "register", "resolve"]


def __getattr__(name):
    if name == "ALGORITHMS":  # the tuple this module held before records
        import warnings

        warnings.warn(
            "jaxrl.algorithms.ALGORITHMS is now jaxrl.algorithms.names(); the old name goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return tuple(names())
    raise AttributeError(f"module 'jaxrl.algorithms' has no attribute {name!r}")
