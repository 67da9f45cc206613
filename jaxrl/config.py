"""Config helpers shared by every algorithm.

An algorithm's ``Config`` is a frozen ``flax.struct.dataclass``. Fields that decide
shapes or program structure are declared with :func:`static` (hashed into the compiled
program); numeric hyper-parameters are ordinary pytree leaves, so they can be traced and
``jax.vmap``-ed over without recompiling.

A Config composes *parts* (:func:`part`): small frozen dataclasses that hold the numbers
of one choice (an exploration schedule, prioritized replay, a value head), held by one
field. Which part a field holds changes the program; the part's traced numbers sweep like
any other. A part's field is named by a dotted path (``"exploration.end"``) wherever
fields are named by strings: ``--set``, sweeps, PBT, ``run.json`` (:func:`replace_paths`,
:func:`field_paths`, :func:`to_json`).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import numbers
import typing
from typing import Any

import flax.linen as nn
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


# ----------------------------------------------------------------------------- parts


def part(cls):
    """Declare a part: a frozen ``flax.struct.dataclass`` of the fields one choice of a
    Config needs (static ones with :func:`static`), held by one Config field. The part's
    class is the choice (it changes the program); its traced fields trace like a
    Config's. A part validates its own fields in ``__post_init__`` (static ones) and
    ``check_traced()`` (traced ones, called by the algorithm's ``init``). Only declared
    parts load from JSON (:func:`from_json`), so a ``run.json`` cannot name any other class."""
    cls = struct.dataclass(cls)
    PARTS[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return cls


# Every part declared so far, by "<module>.<qualname>": what from_json may build.
PARTS: dict[str, type] = {}


def is_part(value) -> bool:
    """Whether ``value`` is a part (a dataclass instance held by a Config field; a flax
    module, a user's network, is not one)."""
    return dataclasses.is_dataclass(value) and not isinstance(value, (type, nn.Module))


def choose_part(config, field: str, choices: dict, optional: bool = False) -> None:
    """Set ``config.<field>`` (from a Config's ``__post_init__``) from what it was given:
    a part of one of ``choices``' classes (``{shorthand: part class}``) as it is, a
    shorthand as that class's defaults; with ``optional``, ``None``, ``False`` or
    ``"none"`` as None and ``True`` as the first choice's defaults (the command line's
    switch). ValueError, naming the field and what it takes, for anything else."""
    value = getattr(config, field)
    if optional and (value is None or value is False or (isinstance(value, str) and value == "none")):
        value = None
    elif optional and value is True:
        value = next(iter(choices.values()))()
    elif isinstance(value, str) and value in choices:
        value = choices[value]()
    if not (value is None and optional) and not isinstance(value, tuple(choices.values())):
        allowed = ", ".join(f"{cls.__module__}.{cls.__qualname__}" for cls in choices.values())
        shorthands = ", ".join(repr(name) for name in choices) + (", True, False or None" if optional else "")
        raise ValueError(f"{field} must be one of {allowed} (or {shorthands}), got {value!r}")
    object.__setattr__(config, field, value)


def check_traced_parts(config) -> None:
    """``check_traced()`` of every part ``config``'s fields hold (range checks of their
    traced numbers; skipped while tracing)."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if is_part(value) and hasattr(value, "check_traced"):
            try:
                value.check_traced()
            except ValueError as error:  # the part names its own field: name it by its path
                raise ValueError(f"{field.name}.{error}") from None


def optional_part(config, name: str) -> type | None:
    """The part class that field ``name`` of ``config`` (a Config class or instance) holds
    when it is annotated ``Part | None`` (SAC's ``sde: GSDE | None``), else None."""
    try:
        hint = typing.get_type_hints(config if isinstance(config, type) else type(config)).get(name)
    except (NameError, TypeError):  # an annotation that does not resolve names no part
        return None
    args = typing.get_args(hint)
    parts = [arg for arg in args if isinstance(arg, type) and dataclasses.is_dataclass(arg)]
    return parts[0] if len(parts) == 1 and type(None) in args else None


def field_paths(config) -> dict[str, tuple[Any, bool]]:
    """Every field of ``config`` (a Config class or instance) by its path, with its value
    (a class: its default) and whether it is static: ``{"learning_rate": (2.5e-4, False),
    "exploration": (EpsilonGreedy(...), False), "exploration.end": (0.05, False), ...}``;
    a part's own fields follow the part, as ``"<field>.<name>"`` (of a class, also those of
    an optional part whose default is None, at the part's defaults: :func:`optional_part`)."""
    paths = {}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name) if not isinstance(config, type) else _default(field)
        paths[field.name] = (value, not field.metadata.get("pytree_node", True))
        if value is None and isinstance(config, type):
            value = optional_part(config, field.name)
        if is_part(value) or isinstance(value, type):
            paths.update({f"{field.name}.{name}": entry for name, entry in field_paths(value).items()})
    return paths


def _default(field: dataclasses.Field):
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def replace_paths(config, values: dict):
    """``config`` with the fields at ``values``' paths replaced (``{"learning_rate": 1e-3,
    "exploration.end": 0.01}``): a part's field is replaced inside the part the config
    holds (an optional part that holds None starts from its defaults). An unknown path is
    a ValueError naming the fields there are."""
    top, nested = {}, {}
    for path, value in values.items():
        head, _, rest = path.partition(".")
        if not rest:
            top[head] = value
        else:
            nested.setdefault(head, {})[rest] = value
    names = {f.name for f in dataclasses.fields(config)}
    for head in [*top, *nested]:
        if head not in names:
            close = difflib.get_close_matches(head, names, n=3)
            hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise ValueError(f"{type(config).__qualname__} has no field {head!r}.{hint}")
    for head, rest in nested.items():
        holder = top.get(head, getattr(config, head))
        if holder is None and optional_part(config, head) is not None:  # setting its field chooses the part
            holder = optional_part(config, head)()
        if not is_part(holder):
            raise ValueError(f"{type(config).__qualname__}.{head} holds {holder!r}, which has no fields to set")
        top[head] = replace_paths(holder, rest)
    return config.replace(**top) if top else config


def get_path(config, path: str):
    """The value at a dotted ``path`` of ``config``."""
    for name in path.split("."):
        config = getattr(config, name)
    return config


def to_json(value):
    """A config, a part or a field's value as JSON data: a dataclass as ``{"part":
    "<module>.<class>", <field>: ...}`` (a Config as its fields alone), tuples as lists,
    arrays as (nested) lists; a flax module (a user's network) as ``{"module":
    "<module>:<class>", <field>: ...}`` and another function or class as ``{"callable":
    "<module>:<name>"}``, by their import paths. :func:`from_json` inverts it."""
    if isinstance(value, nn.Module):
        fields = [field.name for field in dataclasses.fields(value) if field.name not in ("parent", "name")]
        return {"module": reference(type(value)), **{name: to_json(getattr(value, name)) for name in fields}}
    if callable(value) and not is_part(value):
        return {"callable": reference(value)}
    if is_part(value):
        return {"part": f"{type(value).__module__}.{type(value).__qualname__}", **fields_to_json(value)}
    if isinstance(value, (tuple, list)):
        return [to_json(item) for item in value]
    if isinstance(value, dict):
        return {str(key): to_json(item) for key, item in value.items()}
    if isinstance(value, (np.ndarray, jax.Array, np.generic)):
        return np.asarray(value).tolist()
    return value


def fields_to_json(config) -> dict:
    """``{field: to_json(value)}`` of a Config or part."""
    return {field.name: to_json(getattr(config, field.name)) for field in dataclasses.fields(config)}


def from_json(value):
    """The value :func:`to_json` gave: parts rebuilt from their class's import path,
    lists as tuples. A part must be declared with :func:`part`: one of jaxrl's own (its
    module is imported on demand) or of a module already imported; any other name is a
    ValueError. A user's network (a module or a function) is imported from the path the
    run saved: that is the code the run trained with."""
    if isinstance(value, dict) and isinstance(value.get("module"), str):
        fields = {key: from_json(item) for key, item in value.items() if key != "module"}
        return import_reference(value["module"], "network")(**fields)
    if isinstance(value, dict) and set(value) == {"callable"}:
        return import_reference(value["callable"], "network")
    if isinstance(value, list):
        return tuple(from_json(item) for item in value)
    if isinstance(value, dict) and isinstance(value.get("part"), str):
        name = value["part"]
        if name not in PARTS and name.startswith("jaxrl."):
            try:
                importlib.import_module(name.rpartition(".")[0])  # jaxrl's parts declare themselves on import
            except ImportError:
                pass
        if name not in PARTS:
            raise ValueError(
                f"unknown part {name!r}: only classes declared with jaxrl.config.part load (import the module "
                "that declares it first)"
            )
        return PARTS[name](**{key: from_json(item) for key, item in value.items() if key != "part"})
    if isinstance(value, dict):
        return {key: from_json(item) for key, item in value.items()}
    return value


def import_reference(reference: str, field: str) -> Any:
    """The object ``"package.module:name"`` names (``name`` may be dotted), imported."""
    module_name, _, name = reference.partition(":")
    try:
        value = importlib.import_module(module_name)
        for part in name.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError, ValueError) as error:
        raise ValueError(f"{field}: cannot import {reference!r} ('package.module:name'): {error}") from None
    return value


def reference(value) -> str:
    """``"<module>:<qualified name>"`` of a class or function, :func:`import_reference`'s input."""
    return f"{value.__module__}:{value.__qualname__}"


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
    if value not in choices:  # sorted by repr: None may be a choice beside strings
        raise ValueError(f"{field} must be one of {sorted(choices, key=repr)}, got {value!r}")


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
    """``config`` with each swept field (a path: ``"learning_rate"``, ``"exploration.end"``)
    replaced by its ``[C]`` array of values, after checking the fields exist, are traced
    and numeric, and all have ``C`` values."""
    paths = field_paths(config)
    lengths = set()
    replacements = {}
    for name, values in settings.items():
        if name not in paths:
            close = difflib.get_close_matches(name, paths, n=3)
            hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise ValueError(f"{type(config).__qualname__} has no field {name!r}.{hint}")
        default, static = paths[name]
        if static:
            raise ValueError(
                f"{name!r} is a static field of {type(config).__qualname__} (it fixes a shape or the program's "
                f"structure), so it cannot be swept inside one compiled program: loop over its values on the host, "
                f"e.g. [sweep.run(algorithm, replace_paths(config, {{{name!r}: v}}), settings) for v in values]"
            )
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
        configs = replace_paths(config, replacements)
        if hasattr(configs, "check_traced"):
            configs.check_traced()
        check_traced_parts(configs)
    except (ValueError, TypeError) as error:
        raise ValueError(f"a swept value is out of range: {error}") from None
    return configs
