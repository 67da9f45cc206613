"""Datasets of recorded transitions: collect from any policy, save / load as ``.npz``. ::

    act_fn = functools.partial(ppo.act, config=config, deterministic=True)
    dataset = data.collect_dataset(act_fn, params, "CartPole-v1", key, num_steps=10_000, num_envs=10)
    data.save_dataset("cartpole.npz", dataset)
    dataset = data.load_dataset("cartpole.npz", env_id="CartPole-v1")

A :class:`Dataset` is a pytree of flat ``[S, ...]`` arrays (``S`` transitions) that
offline algorithms such as :mod:`jaxrl.algorithms.bc` take as an argument to ``init``
and ``train``. Observations keep the env's structure: an array, or a dict / tuple
(nested too) of arrays, each leaf ``[S, ...]``; a file stores each leaf under its key
path (``obs['image']``, ``next_obs[0]``), from which :func:`load_dataset` rebuilds it.
"""

from __future__ import annotations

import ast
import os
import re
import tempfile
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl import envs, rollout
from jaxrl.config import static

FORMAT_VERSION = 1
FIELDS = ("obs", "action", "reward", "terminated", "truncated", "next_obs", "episode_return", "episode_length")
# Fields of one scalar per transition, with the dtype each must have.
_SCALAR_FIELDS = {
    "reward": "floating",
    "terminated": "bool",
    "truncated": "bool",
    "episode_return": "floating",
    "episode_length": "integer",
}
# Metadata stored next to the arrays in the .npz file ("_" marks them as not fields).
_META = ("_format_version", "_env_id", "_num_envs")
# The fields that may be pytrees; a file names each of their leaves by its key path.
_OBS_FIELDS = ("obs", "next_obs")


@struct.dataclass
class Dataset:
    """``S`` recorded transitions, as flat arrays with a leading ``[S]`` axis.

    Layout: env-major. ``collect_dataset`` with ``num_envs = N`` records ``S / N``
    consecutive steps from each env, stored one env after the other, so transition
    ``i`` is step ``i % (S / N)`` of env ``i // (S / N)``. Within an env's block
    ``next_obs[i] == obs[i + 1]`` unless an episode ended at ``i`` (``done[i]``), where
    ``next_obs[i]`` is the episode's final observation and ``obs[i + 1]`` the first
    of the next episode (as in :class:`jaxrl.types.Trajectory`).
    """

    obs: Any  # [S, *obs_shape] observation the action was chosen from (a pytree of such leaves if structured)
    action: jax.Array  # [S, *action_shape]: int32 [S] for discrete actions
    reward: jax.Array  # [S] float32
    terminated: jax.Array  # [S] bool: the MDP ended (do not bootstrap)
    truncated: jax.Array  # [S] bool: cut by a time limit
    next_obs: Any  # [S, *obs_shape] observation the step produced, before any reset (structured as obs)
    episode_return: jax.Array  # [S] float32 return of the episode that ended at this step, else 0
    episode_length: jax.Array  # [S] int32 length of that episode, else 0
    env_id: str = static("")  # the env it was recorded on ("" if unknown)
    num_envs: int = static(1)  # env blocks in the layout above

    @property
    def size(self) -> int:
        """``S``, the number of transitions."""
        return jax.tree.leaves(self.obs)[0].shape[0]

    @property
    def done(self) -> jax.Array:
        """``[S]`` bool: an episode ended at this transition."""
        return self.terminated | self.truncated


def episode_metrics(dataset: Dataset) -> dict:
    """Mean ``episode_return`` / ``episode_length`` of the episodes that finished inside
    the dataset (NaN if none did) and their count ``episodes``; see
    :func:`jaxrl.rollout.episode_metrics`, which reads the same three fields."""
    return rollout.episode_metrics(dataset)


def sample(dataset: Dataset, key: jax.Array, batch_size: int) -> Dataset:
    """``batch_size`` transitions drawn uniformly with replacement: leaves ``[B, ...]``."""
    index = jax.random.randint(key, (batch_size,), 0, dataset.size)
    return jax.tree.map(lambda x: x[index], dataset)


# ----------------------------------------------------------------------------- collecting


def collect_dataset(
    act_fn: Callable,
    params,
    env_id: str,
    key: jax.Array,
    num_steps: int,
    num_envs: int = 1,
    env_kwargs: dict | None = None,
    carry=(),
) -> Dataset:
    """Record ``num_steps`` transitions of a policy on ``num_envs`` parallel envs.

    Args:
      act_fn: ``act_fn(params, obs [N, *obs_shape], carry, key) -> (action [N,
        *action_shape], carry)`` (``obs`` a pytree of ``[N, ...]`` leaves for a
        structured observation), as for :func:`jaxrl.evaluation.evaluate`, e.g.
        ``functools.partial(ppo.act, config=config, deterministic=True)``.
      params: whatever ``act_fn`` needs (``state.params``).
      carry: the policy's memory before the first steps (the algorithm's
        ``initial_carry(config, num_envs)``), reset where episodes end; ``()`` without.
      env_id: a gymnax env id; ``env_kwargs`` overrides its ``EnvParams`` fields.
      num_steps: total transitions ``S``; must be a multiple of ``num_envs`` (each env
        runs ``S / num_envs`` steps from a fresh reset, auto-resetting as episodes end).
    Returns a :class:`Dataset` with leaves ``[S, ...]`` in the env-major layout it
    describes. Continuous actions are recorded clipped to the action bounds, i.e. as
    the env executed them. The collection runs as one compiled program.
    """
    for name, value in (("num_steps", num_steps), ("num_envs", num_envs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if num_steps % num_envs:
        raise ValueError(f"num_steps ({num_steps}) must be a multiple of num_envs ({num_envs})")
    env, env_params = envs.make(env_id, **dict(env_kwargs or {}))
    spec = envs.spec(env, env_params)
    if spec.padding_steps:
        raise ValueError(f"datasets hold transitions; {env_id} inserts steps that are not (e.g. envpool's reset step)")
    env = envs.EpisodeStatistics(env)
    steps_per_env = num_steps // num_envs

    @jax.jit
    def run(params, carry, key):  # params and carry as arguments, not a closure: no weights baked into the program
        def policy(obs, policy_carry, policy_key):
            action, policy_carry = act_fn(params, obs, policy_carry, policy_key)
            expected = (num_envs,) + spec.action_shape
            if action.shape != expected:
                raise ValueError(f"act_fn returned actions of shape {action.shape}, expected {expected} for {env_id}")
            if spec.discrete:
                return action.astype(jnp.int32), policy_carry, {}
            return jnp.clip(action, spec.action_low, spec.action_high), policy_carry, {}

        reset_key, run_key = jax.random.split(key)
        obs, env_state = rollout.reset(env, env_params, reset_key, num_envs)
        trajectory, *_ = rollout.collect(env, env_params, policy, env_state, obs, run_key, steps_per_env, carry)
        # [T, N, ...] -> [N, T, ...] -> [N * T, ...]: each env's steps stay contiguous.
        flat = lambda x: jnp.swapaxes(x, 0, 1).reshape((num_steps,) + x.shape[2:])  # noqa: E731
        fields = {name: jax.tree.map(flat, getattr(trajectory, name)) for name in FIELDS}
        return Dataset(**fields, env_id=env_id, num_envs=num_envs)

    return run(params, carry, key)


# ----------------------------------------------------------------------------- leaf names


def leaf_names(field: str, tree) -> dict[str, Any]:
    """``{name: leaf}`` over a dataset field's leaves, in ``jax.tree.leaves`` order.

    An array is named ``field``; the leaves of a dict (string keys) / tuple / list of
    arrays, nested to any depth, are named ``field`` followed by their key path, e.g.
    ``obs['image']`` or ``next_obs[0]['goal']``. A file stores each leaf under this name
    and errors name leaves by it (a list comes back from a file as a tuple). Any other
    container is a ``ValueError``, as its structure could not be rebuilt from the names.
    """
    named = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        name = field
        for entry in path:
            if isinstance(entry, jax.tree_util.DictKey) and isinstance(entry.key, str):
                name += f"[{entry.key!r}]"
            elif isinstance(entry, jax.tree_util.SequenceKey):
                name += f"[{entry.idx}]"
            else:
                raise ValueError(
                    f"dataset field {field!r} must be an array or a dict (string keys) / tuple of arrays; "
                    f"it has {entry} below {name}"
                )
        named[name] = leaf
    return named


# One step of a key path in a leaf name: a tuple index, or a dict key as its Python repr.
_PATH_ENTRY = re.compile(r"""\[(\d+|'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\]""")


def _parse_leaf_name(name: str) -> tuple[str, tuple] | None:
    """``(field, path)`` for a name :func:`leaf_names` gives (path entries: ``int`` tuple
    indices, ``str`` dict keys), or None if ``name`` is no such name."""
    field = next((f for f in FIELDS if name == f or (f in _OBS_FIELDS and name.startswith(f + "["))), None)
    if field is None:
        return None
    path, position = [], len(field)
    while position < len(name):
        match = _PATH_ENTRY.match(name, position)
        if match is None:
            return None
        token = match.group(1)
        path.append(int(token) if token.isdigit() else ast.literal_eval(token))
        position = match.end()
    return field, tuple(path)


def _build_tree(field: str, leaves: list[tuple[tuple, str, Any]]):
    """The pytree whose leaves are ``(path, name, array)`` (paths as
    :func:`_parse_leaf_name` gives them): an array, or dicts (str keys) and tuples
    (indices ``0..n-1``). ValueError naming the leaves if they form no such tree."""
    if len(leaves) == 1 and leaves[0][0] == ():
        return leaves[0][2]
    groups: dict = {}
    for path, name, array in leaves:
        groups.setdefault(path[0] if path else None, []).append((path[1:], name, array))
    heads = list(groups)  # None: an array where other leaves say there is a container
    if all(isinstance(head, str) for head in heads):
        return {head: _build_tree(field, groups[head]) for head in heads}
    if all(isinstance(head, int) for head in heads) and sorted(heads) == list(range(len(heads))):
        return tuple(_build_tree(field, groups[index]) for index in range(len(heads)))
    names = ", ".join(name for _, name, _ in leaves)
    raise ValueError(f"dataset field {field!r}: the leaves {names} form no array, dict or tuple (0..n-1)")


# ----------------------------------------------------------------------------- checking


def check_dataset(dataset: Dataset, spec: envs.EnvSpec | None = None, env_name: str = "the env") -> None:
    """Raise ``ValueError`` naming the field, or the observation leaf (as
    :func:`leaf_names` names it), unless ``dataset``'s arrays fit the schema (and, given an
    env ``spec``, that env's observation structure, each leaf's shape, and its action
    shape).

    Observation dtypes are checked against ``spec`` only where the env declares a bool
    leaf (an action mask): gymnax envs do not all return the dtypes their observation
    spaces declare (``Catch-bsuite`` gives float32 for int32), so a stricter check would
    refuse the datasets :func:`collect_dataset` records. Only shapes and dtypes are
    read, so this works on traced arrays inside ``jit``.
    """
    obs = leaf_names("obs", dataset.obs)
    if not obs:
        raise ValueError("dataset field 'obs' holds no arrays")
    first = next(iter(obs))
    if np.ndim(obs[first]) < 1:
        raise ValueError(f"dataset field {first!r} must be [S, ...] (rank >= 1), got shape {np.shape(obs[first])}")
    size = np.shape(obs[first])[0]
    if size < 1:
        raise ValueError(f"dataset field {first!r} holds no transitions (S = 0)")
    for name, leaf in obs.items():
        if np.ndim(leaf) < 1 or np.shape(leaf)[0] != size:
            raise ValueError(f"dataset field {name!r} must be [{size}, ...] like {first!r}, got shape {np.shape(leaf)}")
    next_obs = leaf_names("next_obs", dataset.next_obs)
    paths, next_paths = [name[len("obs") :] for name in obs], [name[len("next_obs") :] for name in next_obs]
    if sorted(paths) != sorted(next_paths):
        raise ValueError(
            f"dataset field 'next_obs' must have the leaves of obs ({', '.join(obs)}), got {', '.join(next_obs)}"
        )
    for path in paths:
        leaf, next_leaf, name = obs["obs" + path], next_obs["next_obs" + path], "next_obs" + path
        if np.shape(next_leaf) != np.shape(leaf):
            raise ValueError(
                f"dataset field {name!r} must have the shape of obs{path} {np.shape(leaf)}, got {np.shape(next_leaf)}"
            )
        if next_leaf.dtype != leaf.dtype:
            raise ValueError(
                f"dataset field {name!r} must have the dtype of obs{path} ({leaf.dtype}), got {next_leaf.dtype}"
            )
    if np.ndim(dataset.action) < 1 or dataset.action.shape[0] != size:
        raise ValueError(
            f"dataset field 'action' must be [{size}, *action_shape], got shape {np.shape(dataset.action)}"
        )
    for name, kind in _SCALAR_FIELDS.items():
        value = getattr(dataset, name)
        if value.shape != (size,):
            raise ValueError(f"dataset field {name!r} must have shape ({size},), got {value.shape}")
        if not _is_kind(value.dtype, kind):
            raise ValueError(f"dataset field {name!r} must have a {kind} dtype, got {value.dtype}")
    if dataset.num_envs < 1 or size % dataset.num_envs:
        raise ValueError(f"dataset num_envs ({dataset.num_envs}) must divide its {size} transitions")
    if spec is None:
        return
    expected = leaf_names("obs", spec.observation)
    if sorted(obs) != sorted(expected):
        raise ValueError(
            f"dataset field 'obs' has the leaves {', '.join(obs)}, expected {', '.join(expected)} for {env_name}"
        )
    for name, leaf in obs.items():
        if leaf.shape[1:] != expected[name].shape:
            raise ValueError(
                f"dataset field {name!r} has observations of shape {leaf.shape[1:]}, "
                f"expected {expected[name].shape} for {env_name}"
            )
        if _is_kind(expected[name].dtype, "bool") and not _is_kind(leaf.dtype, "bool"):
            raise ValueError(f"dataset field {name!r} must be bool for {env_name} (its space is), got {leaf.dtype}")
    if dataset.action.shape[1:] != spec.action_shape:
        raise ValueError(
            f"dataset field 'action' has actions of shape {dataset.action.shape[1:]}, "
            f"expected {spec.action_shape} for {env_name}"
        )
    if spec.discrete and not _is_kind(dataset.action.dtype, "integer"):
        raise ValueError(
            f"dataset field 'action' must be integers for {env_name} (discrete actions), got {dataset.action.dtype}"
        )


def _is_kind(dtype, kind: str) -> bool:
    if kind == "bool":
        return np.dtype(dtype) == np.bool_
    return np.issubdtype(dtype, np.floating if kind == "floating" else np.integer)


def check_env_dataset(dataset: Dataset, env_id: str, env_kwargs=None) -> None:
    """:func:`check_dataset` against the env ``env_id`` (with ``env_kwargs`` overrides),
    which must also be the env the dataset was recorded on, where the dataset says."""
    if dataset.env_id and dataset.env_id != env_id:
        raise ValueError(f"dataset env_id is {dataset.env_id!r}, expected {env_id!r}")
    check_dataset(dataset, envs.spec(*envs.make(env_id, **dict(env_kwargs or {}))), env_id)


# ----------------------------------------------------------------------------- files


def save_dataset(path: str | os.PathLike, dataset: Dataset) -> None:
    """Write ``dataset`` to ``path`` as an uncompressed ``.npz``: one array per field
    (per observation leaf for structured observations, named by :func:`leaf_names`),
    plus ``_format_version``, ``_env_id`` and ``_num_envs``. Array observations are
    stored as before structured ones existed, so format version 1 covers both.

    The file is written under a temporary name in the same directory and moved into
    place with ``os.replace``, so a crash never leaves a half-written file at ``path``
    (an existing file there stays intact until the new one is complete).
    """
    check_dataset(dataset)
    arrays = {
        name: np.asarray(leaf) for field in FIELDS for name, leaf in leaf_names(field, getattr(dataset, field)).items()
    }
    meta = {
        "_format_version": np.int64(FORMAT_VERSION),
        "_env_id": np.str_(dataset.env_id),
        "_num_envs": np.int64(dataset.num_envs),
    }
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            np.savez(file, **arrays, **meta)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def load_dataset(path: str | os.PathLike, env_id: str | None = None, env_kwargs=None) -> Dataset:
    """Read a dataset written by :func:`save_dataset` and check its schema; structured
    observations are rebuilt from their leaves' names (dicts and tuples).

    Given ``env_id`` (and ``env_kwargs`` overrides), also check that the file was
    recorded on that env and that its observation and action shapes fit it. Raises
    ``ValueError`` naming the field on any mismatch; ``FileNotFoundError`` if there is
    no file.
    """
    with np.load(path, allow_pickle=False) as file:
        contents = {name: file[name] for name in file.files}
    if "_format_version" not in contents:
        raise ValueError(f"{os.fspath(path)} is not a jaxrl dataset (no _format_version field)")
    version = int(contents["_format_version"])
    if version != FORMAT_VERSION:
        raise ValueError(f"{os.fspath(path)} has dataset _format_version {version}; this jaxrl reads {FORMAT_VERSION}")
    leaves, unknown = {field: [] for field in FIELDS}, []
    for name, array in contents.items():
        parsed = None if name in _META else _parse_leaf_name(name)
        if parsed is not None:
            leaves[parsed[0]].append((parsed[1], name, array))
        elif name not in _META:
            unknown.append(name)
    missing = [name for name in FIELDS if not leaves[name]] + [name for name in _META if name not in contents]
    if missing:
        raise ValueError(
            f"dataset field {missing[0]!r} is missing from {os.fspath(path)} "
            f"(expected fields: {', '.join(FIELDS + _META)})"
        )
    if unknown:
        raise ValueError(
            f"dataset field {sorted(unknown)[0]!r} in {os.fspath(path)} is not one of {', '.join(FIELDS + _META)} "
            "(nor an observation leaf such as obs['name'] or obs[0])"
        )
    # The structure comes from the names alone, so a file without an env id loads too.
    dataset = Dataset(
        **{field: jax.tree.map(jnp.asarray, _build_tree(field, leaves[field])) for field in FIELDS},
        env_id=str(contents["_env_id"]),
        num_envs=int(contents["_num_envs"]),
    )
    if env_id is None:
        check_dataset(dataset)
    else:
        check_env_dataset(dataset, env_id, env_kwargs)
    return dataset
