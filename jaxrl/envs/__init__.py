"""Environments: ``make`` for every gymnax id, every id registered with :func:`register`
(such as the partially observed tasks of :mod:`jaxrl.envs.partial`), and every id under
a registered prefix: ``"gymnasium:<id>"`` (stepped on the host: see
:mod:`jaxrl.envs.gymnasium`), ``"pgx:<game>"`` (:mod:`jaxrl.envs.pgx`), the JAX suites
(``"brax:"``, ``"playground:"``, ``"craftax:"``, ``"navix:"``, ``"xminigrid:"``,
``"jumanji:"``) and envpool's C++ envs (``"envpool:"``): one adapter module each,
``jaxrl.envs.<suite>``, and an optional extra each; and a user's own. ``EnvSpec``, and
pure wrappers.

The env API is gymnax >= 1.0: ``reset(key, params) -> (obs, state)`` and
``step(key, state, action, params) -> (obs, state, reward, terminated, truncated, info)``
with auto-reset and the pre-reset observation in ``info["final_observation"]``.
"""

from __future__ import annotations

import importlib
import warnings

from jaxrl.envs import builtin  # noqa: F401 - registers the built-in ids and prefixes
from jaxrl.envs.from_config import config_num_agents, config_spec, make_config_env
from jaxrl.envs.partial import FrameStack, MaskObservation
from jaxrl.envs.registry import (
    GYMNASIUM_PREFIX,
    HISTORY_KWARGS,
    PGX_PREFIX,
    check_env_id,
    make,
    register,
    register_adapter,
    registered_ids,
    registered_prefixes,
    steps_on_host,
)
from jaxrl.envs.spec import (
    ACTION_MASK,
    ONE_HOT_MAX_CLASSES,
    EnvSpec,
    OneHot,
    observation_classes,
    observation_struct,
    spec,
)
from jaxrl.envs.wrappers import (
    ClipAction,
    EpisodeStatistics,
    NormalizeObservation,
    RunningStats,
    ScaleReward,
    Wrapper,
    normalize,
    normalize_observation,
    observation_stats_fold,
    observation_stats_init,
    observation_stats_update,
    running_stats_init,
    running_stats_merge,
    running_stats_update,
)

__all__ = [
    "make",
    "register",
    "register_adapter",
    "HISTORY_KWARGS",
    "GYMNASIUM_PREFIX",
    "PGX_PREFIX",
    "EnvSpec",
    "OneHot",
    "ACTION_MASK",
    "observation_struct",
    "observation_classes",
    "ONE_HOT_MAX_CLASSES",
    "spec",
    "config_spec",
    "config_num_agents",
    "make_config_env",
    "registered_ids",
    "registered_prefixes",
    "check_env_id",
    "steps_on_host",
    "ClipAction",
    "EpisodeStatistics",
    "NormalizeObservation",
    "ScaleReward",
    "Wrapper",
    "RunningStats",
    "running_stats_init",
    "running_stats_update",
    "running_stats_merge",
    "normalize",
    "observation_stats_init",
    "observation_stats_fold",
    "observation_stats_update",
    "normalize_observation",
    "FrameStack",
    "MaskObservation",
]

# Names that moved to the algorithms, which know what each algorithm takes.
_MOVED = {
    "require_transitions_only": "jaxrl.algorithms.requirements",
    "refuse_multi_discrete": "jaxrl.algorithms.requirements",
    "MULTI_DISCRETE_ALGORITHMS": "jaxrl.algorithms.requirements",
}


def __getattr__(name):
    if name in _MOVED:
        warnings.warn(
            f"jaxrl.envs.{name} moved to {_MOVED[name]}.{name}; the old name goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module 'jaxrl.envs' has no attribute {name!r}")
