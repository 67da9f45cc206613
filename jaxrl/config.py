"""Config helpers shared by every algorithm.

An algorithm's ``Config`` is a frozen ``flax.struct.dataclass``. Fields that decide
shapes or program structure are declared with :func:`static` (hashed into the compiled
program); numeric hyper-parameters are ordinary pytree leaves, so they can be traced and
``jax.vmap``-ed over without recompiling.
"""

from __future__ import annotations

import dataclasses
import difflib
import numbers
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct


def static(default: Any, **kwargs) -> Any:
    """A config field that is part of the program structure (not traced)."""
    return struct.field(pytree_node=False, default=default, **kwargs)


def static_fields(config) -> list[str]:
    """Names of the static fields of a Config class or instance."""
    return [f.name for f in dataclasses.fields(config) if not f.metadata.get("pytree_node", True)]


def freeze_mapping(value: Any, field: str) -> tuple:
    """Turn a dict (or iterable of pairs) into a sorted tuple of pairs, hashable as static."""
    if value is None:
        return ()
    if isinstance(value, dict):
        value = value.items()
    try:
        pairs = tuple(sorted((str(k), v) for k, v in value))
    except (TypeError, ValueError) as error:
        raise TypeError(f"{field} must be a dict of name -> value, got {value!r}") from error
    return pairs


def require_int(config, field: str, minimum: int = 1) -> None:
    """Raise ValueError unless ``config.field`` is an integer >= ``minimum``."""
    value = getattr(config, field)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{field} must be an integer >= {minimum}, got {value!r}")


def require_choice(config, field: str, choices) -> None:
    value = getattr(config, field)
    if value not in choices:
        raise ValueError(f"{field} must be one of {sorted(choices)}, got {value!r}")


def require_network(config, obs_ndim: int | tuple) -> None:
    """Check the ``network`` / ``hidden_sizes`` / ``activation`` fields an algorithm's
    networks are built from, against the env's observation dims (``EnvSpec.obs_ndim``)."""
    from jaxrl.networks import ACTIVATIONS, NETWORKS, require_image_leaf

    sizes = config.hidden_sizes
    if not sizes or not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in sizes):
        raise ValueError(f"hidden_sizes must be a non-empty tuple of positive ints, got {sizes!r}")
    require_choice(config, "activation", ACTIVATIONS)
    require_choice(config, "network", NETWORKS)  # "mlp", "cnn" (MinAtar), "nature_cnn", "impala_cnn"
    require_image_leaf(config.network, obs_ndim, f"{config.env_id}'s observations")


def require_range(config, field: str, low: float, high: float, low_open: bool = False, high_open: bool = False) -> None:
    """Check a traced hyper-parameter when it is concrete (skipped while tracing).

    Arrays (for vmapped sweeps) are checked element-wise.
    """
    value = getattr(config, field)
    if isinstance(value, jax.core.Tracer):
        return
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{field} must be a number or an array of numbers, got {value!r}") from error
    above = array > low if low_open else array >= low
    below = array < high if high_open else array <= high
    if not (np.all(above) and np.all(below) and np.all(np.isfinite(array) | np.isinf(high))):
        interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        raise ValueError(f"{field} must lie in {interval}, got {value!r}")


def sweep_axes(config):
    """``in_axes`` for ``jax.vmap`` over a config whose swept leaves are arrays.

    Leaves with a leading axis (ndim >= 1) are mapped over axis 0; scalars are broadcast::

        configs = config.replace(learning_rate=jnp.array([1e-4, 3e-4, 1e-3]))
        out = jax.vmap(ppo.train, in_axes=(None, sweep_axes(configs)))(key, configs)
    """
    return jax.tree.map(lambda leaf: 0 if np.ndim(leaf) >= 1 else None, config)


def swept_config(config, settings: dict):
    """``config`` with each swept field replaced by its ``[C]`` array of values, after
    checking the fields exist, are traced, and all have ``C`` values."""
    fields = {f.name: f for f in dataclasses.fields(config)}
    static = set(static_fields(config))
    lengths = set()
    replacements = {}
    for name, values in settings.items():
        if name not in fields:
            close = difflib.get_close_matches(name, fields, n=3)
            hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise ValueError(f"{type(config).__qualname__} has no field {name!r}.{hint}")
        if name in static:
            raise ValueError(
                f"{name!r} is a static field of {type(config).__qualname__} (it fixes a shape or the program's "
                f"structure), so it cannot be swept inside one compiled program: loop over its values on the host, "
                f"e.g. [sweep.run(algorithm, config.replace({name}=v), settings) for v in values]"
            )
        default = getattr(config, name)
        if isinstance(default, bool) or not isinstance(default, (int, float)):
            raise ValueError(f"{name!r} holds {default!r}; only numeric fields can be swept")
        dtype = jnp.int32 if isinstance(default, int) else jnp.float32
        array = np.asarray(values)
        if array.ndim != 1 or array.size == 0:
            raise ValueError(f"values for {name!r} must be a non-empty 1-D list, got shape {array.shape}")
        lengths.add(array.size)
        replacements[name] = jnp.asarray(array, dtype)
    if not replacements:
        raise ValueError("settings must name at least one field to sweep")
    if len(lengths) > 1:
        raise ValueError(
            f"every swept field needs the same number of values (one per setting), got "
            f"{ {name: int(v.size) for name, v in replacements.items()} }"
        )
    try:  # the config's own range checks, on every value
        configs = config.replace(**replacements)
        if hasattr(configs, "check_traced"):
            configs.check_traced()
    except (ValueError, TypeError) as error:
        raise ValueError(f"a swept value is out of range: {error}") from None
    return configs
