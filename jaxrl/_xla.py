"""XLA settings jaxrl applies when it is imported, before JAX starts its CPU backend.

XLA:CPU's concurrency-optimised thunk scheduler can deadlock (every thread parked,
``block_until_ready`` never returns) on the vmapped training programs jaxrl builds:
on a 2-core machine, PPO on CartPole vmapped over 4 or 8 seeds hung in most runs with
it and in none of 21 runs without it (jax/jaxlib 0.10.2). Disabling it costs nothing
measurable here. Set ``JAXRL_NO_XLA_FLAGS=1`` to leave ``XLA_FLAGS`` untouched.
"""

from __future__ import annotations

import os
import warnings

SAFE_FLAGS = ("--xla_cpu_enable_concurrency_optimized_scheduler=false",)


def apply_safe_flags() -> None:
    if os.environ.get("JAXRL_NO_XLA_FLAGS"):
        return
    flags = os.environ.get("XLA_FLAGS", "")
    missing = [flag for flag in SAFE_FLAGS if flag.split("=")[0] not in flags]
    if not missing:
        return
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        warnings.warn(
            "jaxrl was imported after JAX initialised its backends, so it could not set "
            f"XLA_FLAGS={' '.join(missing)} (XLA:CPU can deadlock on vmapped programs "
            "without it). Import jaxrl first, or set the flag in the environment.",
            stacklevel=3,
        )
        return
    os.environ["XLA_FLAGS"] = " ".join([flags, *missing]).strip()
