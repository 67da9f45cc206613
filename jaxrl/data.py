"""Datasets of recorded transitions: collect from any policy or a mixture of policies,
save / load as ``.npz``, read D4RL- and Minari-style HDF5 files, describe. ::

    act_fn = functools.partial(ppo.act, config=config, deterministic=True)
    dataset = data.collect_dataset(act_fn, params, "CartPole-v1", key, num_steps=10_000, num_envs=10)
    data.save_dataset("cartpole.npz", dataset)
    dataset = data.load_dataset("cartpole.npz", env_id="CartPole-v1")

    expert = data.Part("expert", act_fn, params, (), 0.7)
    mixed = data.collect_mixture([expert, data.random_part("CartPole-v1", 0.3)], "CartPole-v1", key, 10_000, 10)
    data.describe(mixed)                        # transitions, episodes, return statistics, the parts
    dataset = data.load("hopper-medium.hdf5")   # by suffix: .npz, D4RL or Minari HDF5

A :class:`Dataset` is a pytree of flat ``[S, ...]`` arrays (``S`` transitions) that
offline algorithms such as :mod:`jaxrl.algorithms.bc` take as an argument to ``init``
and ``train``. Observations keep the env's structure: an array, or a dict / tuple
(nested too) of arrays, each leaf ``[S, ...]``; a file stores each leaf under its key
path (``obs['image']``, ``next_obs[0]``), from which :func:`load_dataset` rebuilds it.

A dataset says what it is: ``Dataset.metadata`` is a JSON object (text, ``""`` for
none) that :func:`collect_mixture` fills with each part's policy, transitions and
episode-return statistics and the HDF5 loaders with the file they read;
:func:`save_dataset` stores it under ``_metadata`` and :func:`load_dataset` returns it.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl import envs, rollout
from jaxrl.buffers import replay
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
# Written only where there is some (so a dataset without any stays readable by the jaxrl
# versions before it); files without it load with ``metadata=""``. Still format version 1.
_OPTIONAL_META = ("_metadata",)
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

    A mixture (:func:`collect_mixture`) is its parts one after the other, each in this
    layout with ``num_envs`` blocks; ``metadata`` gives each part's transitions. A file
    read by :func:`load_d4rl` or :func:`load_minari` is one stream (``num_envs = 1``).

    ``metadata`` is a JSON object as text (``""``: none), static so that the dataset stays
    a hashable-treedef pytree; :func:`describe` reads it.
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
    metadata: str = static("")  # a JSON object: what the data is (e.g. {"parts": [...]}), "" if unknown

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


# ----------------------------------------------------------------------------- mixtures


class Part(NamedTuple):
    """One policy of a mixture (:func:`collect_mixture`).

    Attributes:
      name: how the metadata and :func:`describe` name it (``"random"``, a run directory).
      act_fn / params / carry: the policy, as :func:`collect_dataset` takes them (``carry``
        for ``num_envs`` envs, ``()`` without memory).
      proportion: its share of the transitions, > 0; a mixture's proportions sum to 1.
      policy: what the policy is, JSON-able, stored in the metadata: ``"random"``, a
        saved run's directory and checkpoint (:func:`jaxrl.workflow.saved.part`), ...;
        None: ``name``.
    """

    name: str
    act_fn: Callable
    params: Any
    carry: Any
    proportion: float
    policy: Any = None


def uniform_actions(key: jax.Array, spec: envs.EnvSpec, num: int, obs=None) -> jax.Array:
    """``num`` uniformly random actions for an env of ``spec``: int32 ``[num]`` for a
    discrete space (uniform over the allowed actions where ``obs`` carries an action
    mask, :data:`jaxrl.envs.ACTION_MASK`), int32 ``[num, k]`` for a multi-discrete one,
    float32 ``[num, *action_shape]`` uniform within the bounds of a Box (ValueError if
    they are not finite)."""
    if spec.discrete:
        if spec.action_mask and obs is not None:
            logits = jnp.where(obs[envs.ACTION_MASK], 0.0, -jnp.inf)
            return jax.random.categorical(key, logits).astype(jnp.int32)
        return jax.random.randint(key, (num,), 0, spec.num_actions, jnp.int32)
    if spec.multi_discrete:
        nvec = jnp.asarray(spec.action_nvec, jnp.int32)
        return jax.random.randint(key, (num, len(spec.action_nvec)), 0, nvec, jnp.int32)
    low, high = np.asarray(spec.action_low, np.float32), np.asarray(spec.action_high, np.float32)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise ValueError(f"uniform actions need a bounded action space, got bounds {low} to {high}")
    return jax.random.uniform(key, (num,) + spec.action_shape, jnp.float32, low, high)


def random_part(env_id: str, proportion: float, env_kwargs: dict | None = None, name: str = "random") -> Part:
    """A :class:`Part` that acts uniformly at random (:func:`uniform_actions`) on ``env_id``."""
    spec = envs.spec(*envs.make(env_id, **dict(env_kwargs or {})))
    if spec.continuous:  # refuse an unbounded Box here, before anything compiles
        uniform_actions(jax.random.key(0), spec, 1)

    def act(params, obs, carry, key):
        return uniform_actions(key, spec, jax.tree.leaves(obs)[0].shape[0], obs), carry

    return Part(name, act, None, (), proportion, "random")


def part_steps(parts: Sequence[Part], num_steps: int, num_envs: int = 1) -> list[int]:
    """Each part's transitions in a mixture of ``num_steps``: its proportion of them
    rounded to a multiple of ``num_envs`` (largest remainders, so that they sum to
    ``num_steps``). ``ValueError`` naming the part for a proportion that is not a number
    > 0 or that rounds to nothing, or naming them all if they do not sum to 1 (within
    1e-6)."""
    for name, value in (("num_steps", num_steps), ("num_envs", num_envs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if num_steps % num_envs:
        raise ValueError(f"num_steps ({num_steps}) must be a multiple of num_envs ({num_envs})")
    parts = list(parts)
    if not parts:
        raise ValueError("a mixture needs at least one part")
    for part in parts:
        if not isinstance(part, Part):
            raise ValueError(f"a mixture's parts must be jaxrl.data.Part records, got {part!r}")
        p = part.proportion
        if (
            isinstance(p, bool)
            or not isinstance(p, (int, float, np.integer, np.floating))
            or not p > 0
            or p == math.inf
        ):
            raise ValueError(f"part {part.name!r}: proportion must be a number > 0, got {p!r}")
    total = math.fsum(float(part.proportion) for part in parts)
    if abs(total - 1.0) > 1e-6:
        shares = ", ".join(f"{part.name!r}: {float(part.proportion):g}" for part in parts)
        raise ValueError(f"the parts' proportions must sum to 1, got {total:.6g} ({shares})")
    blocks = num_steps // num_envs
    ideal = [float(part.proportion) / total * blocks for part in parts]
    counts = [math.floor(x) for x in ideal]
    by_remainder = sorted(range(len(parts)), key=lambda i: (counts[i] - ideal[i], i))
    for i in by_remainder[: blocks - sum(counts)]:
        counts[i] += 1
    for part, count in zip(parts, counts, strict=True):
        if count == 0:
            raise ValueError(
                f"part {part.name!r}: proportion {float(part.proportion):g} of {num_steps:,} transitions rounds to "
                f"none (parts come in multiples of num_envs = {num_envs}); record more steps"
            )
    return [count * num_envs for count in counts]


def collect_mixture(
    parts: Sequence[Part],
    env_id: str,
    key: jax.Array,
    num_steps: int,
    num_envs: int = 1,
    env_kwargs: dict | None = None,
) -> Dataset:
    """Record ``num_steps`` transitions from several policies on one env: each
    :class:`Part` records its share (:func:`part_steps`) with :func:`collect_dataset` on
    ``num_envs`` envs from ``fold_in(key, index)``, and the parts are concatenated in
    order (each in the env-major layout; ``num_envs`` stays the envs of one part).

    The dataset's ``metadata`` is ``{"parts": [...]}``, per part: ``name``, ``policy``
    (``part.policy``, else its name), ``proportion`` (asked for), ``transitions``, and the statistics of
    the episodes that finished inside the part (:func:`episode_statistics`: ``episodes``,
    ``episode_return_mean`` / ``_std`` (population) / ``_min`` / ``_max``,
    ``episode_length_mean``; None where no episode finished). :func:`save_dataset` keeps it.
    """
    steps = part_steps(parts, num_steps, num_envs)
    policies = [part.name if part.policy is None else part.policy for part in parts]
    for part, policy in zip(parts, policies, strict=True):
        try:
            json.dumps(policy, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise ValueError(f"part {part.name!r}: its policy description is not JSON: {error}") from None
    datasets, described = [], []
    for index, (part, policy, count) in enumerate(zip(parts, policies, steps, strict=True)):
        dataset = collect_dataset(
            part.act_fn,
            part.params,
            env_id,
            jax.random.fold_in(key, index),
            count,
            num_envs,
            env_kwargs=env_kwargs,
            carry=part.carry,
        )
        datasets.append(dataset)
        statistics = {k: _json_number(v) for k, v in episode_statistics(dataset).items()}
        entry = {"name": part.name, "policy": policy, "proportion": float(part.proportion), "transitions": count}
        described.append(entry | statistics)
    mixture = jax.tree.map(lambda *leaves: jnp.concatenate(leaves), *datasets) if len(datasets) > 1 else datasets[0]
    return mixture.replace(metadata=_dump_metadata({"parts": described}))


# ----------------------------------------------------------------------------- describing


def episode_statistics(dataset: Dataset) -> dict:
    """Statistics of the episodes that finished inside ``dataset`` (``episode_return`` /
    ``episode_length`` where ``done``), as Python numbers: ``episodes`` (their count),
    ``episode_return_mean`` / ``_std`` (population, ``ddof=0``) / ``_min`` / ``_max`` and
    ``episode_length_mean``; NaN where no episode finished."""
    metrics = episode_metrics(dataset)
    done = np.asarray(dataset.done)
    returns = np.asarray(dataset.episode_return, np.float64)[done]
    count = int(metrics["episodes"])
    nan = float("nan")
    return {
        "episodes": count,
        "episode_return_mean": float(metrics["episode_return"]),
        "episode_return_std": float(returns.std()) if count else nan,
        "episode_return_min": float(returns.min()) if count else nan,
        "episode_return_max": float(returns.max()) if count else nan,
        "episode_length_mean": float(metrics["episode_length"]),
    }


def describe(dataset: Dataset) -> dict:
    """What ``dataset`` holds, for people: ``env_id``, ``transitions``, the episodes that
    finished inside it (:func:`episode_statistics`: ``episodes``, ``episode_return_mean``
    / ``_std`` / ``_min`` / ``_max``, ``episode_length_mean``; NaN without any), and its
    metadata's entries (:func:`metadata`): ``parts`` (a mixture's, each with its own
    statistics, None where it finished no episode; ``[]`` if the data does not say) and
    ``source`` (the file an HDF5 loader read) where it has them."""
    described = {"env_id": dataset.env_id, "transitions": dataset.size, **episode_statistics(dataset)}
    stored = metadata(dataset)
    return described | {"parts": stored.get("parts", [])} | {k: v for k, v in stored.items() if k not in described}


def metadata(dataset: Dataset) -> dict:
    """``dataset.metadata`` as a dict (``{}`` if there is none)."""
    return _load_metadata(dataset.metadata, "dataset")


def _json_number(value):
    """A statistic as JSON holds it: None for NaN (JSON has no NaN)."""
    return None if isinstance(value, float) and math.isnan(value) else value


def _dump_metadata(value: dict) -> str:
    return json.dumps(value, allow_nan=False)


def _load_metadata(text: str, where: str) -> dict:
    """The JSON object in ``text`` (``{}`` for ``""``); ValueError naming ``metadata`` otherwise."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, TypeError) as error:
        raise ValueError(f"{where} field 'metadata' is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{where} field 'metadata' must be a JSON object, got {type(value).__name__}")
    return value


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
    if not isinstance(dataset.metadata, str):
        raise ValueError(f"dataset field 'metadata' must be a JSON object as a string, got {dataset.metadata!r}")
    _load_metadata(dataset.metadata, "dataset")
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
    plus ``_format_version``, ``_env_id``, ``_num_envs`` and, where the dataset has any,
    ``_metadata`` (its JSON text). Array observations are stored as before structured
    ones existed, and ``_metadata`` is optional, so format version 1 covers them all.

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
        **({"_metadata": np.str_(dataset.metadata)} if dataset.metadata else {}),
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


def load_dataset(
    path: str | os.PathLike, env_id: str | None = None, env_kwargs=None, max_bytes: int | None = None
) -> Dataset:
    """Read a dataset written by :func:`save_dataset` and check its schema; structured
    observations are rebuilt from their leaves' names (dicts and tuples), and the
    metadata comes back as ``Dataset.metadata`` (``""`` from a file written without any,
    as every file before mixtures).

    Given ``env_id`` (and ``env_kwargs`` overrides), also check that the file was
    recorded on that env and that its observation and action shapes fit it. Raises
    ``ValueError`` naming the field on any mismatch, or if the arrays need more than
    ``max_bytes`` (default: the device's memory, :func:`jaxrl.buffers.replay.memory_limit`;
    see :func:`check_size`); ``FileNotFoundError`` if there is no file.
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
        parsed = None if name in _META + _OPTIONAL_META else _parse_leaf_name(name)
        if parsed is not None:
            leaves[parsed[0]].append((parsed[1], name, array))
        elif name not in _META + _OPTIONAL_META:
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
        **{field: _build_tree(field, leaves[field]) for field in FIELDS},
        env_id=str(contents["_env_id"]),
        num_envs=int(contents["_num_envs"]),
        metadata=str(contents.get("_metadata", "")),
    )
    return _to_device(dataset, os.fspath(path), env_id, env_kwargs, max_bytes)


def _to_device(dataset: Dataset, path: str, env_id, env_kwargs, max_bytes) -> Dataset:
    """``dataset`` (NumPy leaves) with its size checked against ``max_bytes`` and its
    schema (given ``env_id``, against that env), as device arrays."""
    check_size(dataset, max_bytes, path)
    # The dtypes the device arrays will have (float64 / int64 are 32-bit unless x64 is on).
    dataset = jax.tree.map(lambda leaf: np.asarray(leaf, jax.dtypes.canonicalize_dtype(leaf.dtype)), dataset)
    if env_id is None:
        check_dataset(dataset)
    else:
        check_env_dataset(dataset, env_id, env_kwargs)
    return jax.tree.map(jnp.asarray, dataset)


def check_size(dataset: Dataset, max_bytes: int | None = None, where: str = "") -> None:
    """Raise ``ValueError`` naming the transitions and the GiB they need if ``dataset``'s
    arrays (the sum of its leaves' bytes as device arrays) take more than ``max_bytes``,
    by default the device's memory (:func:`jaxrl.buffers.replay.memory_limit`: the
    accelerator's where JAX reports it, else the machine's). The loaders call it before
    they copy a file to the device, so a file too large fails with this, not an
    out-of-memory crash half-way."""
    # As device arrays: float64 / int64 become 32-bit unless x64 is on.
    leaves = jax.tree.leaves(dataset)
    needed = sum(np.dtype(jax.dtypes.canonicalize_dtype(leaf.dtype)).itemsize * int(np.size(leaf)) for leaf in leaves)
    limit = replay.memory_limit() if max_bytes is None else int(max_bytes)
    if needed > limit:
        source = f"{where}: " if where else ""
        raise ValueError(
            f"{source}dataset of {dataset.size:,} transitions needs {needed / 2**30:.2f} GiB ({needed:,} bytes), "
            f"more than the {limit / 2**30:.2f} GiB ({limit:,} bytes) of {_memory_name(max_bytes)}; "
            "load a smaller part of it"
        )


def _memory_name(max_bytes) -> str:
    if max_bytes is not None:
        return "max_bytes"
    return f"memory on {jax.devices()[0].platform.upper()} device 0"


# ----------------------------------------------------------------------------- other formats


def load(path: str | os.PathLike, env_id: str | None = None, env_kwargs=None, max_bytes: int | None = None) -> Dataset:
    """The dataset in ``path``, read by the loader its name calls for: ``.npz``
    :func:`load_dataset`; ``.hdf5`` / ``.h5`` :func:`load_minari` if the file has
    ``episode_*`` groups, else :func:`load_d4rl`; a directory :func:`load_minari` (a
    Minari dataset's). The offline algorithms read ``dataset_path`` through it.
    ``FileNotFoundError`` if there is nothing at ``path``; ``ValueError`` for another suffix."""
    path = _existing(path)
    if os.path.isdir(path):
        return load_minari(path, env_id, env_kwargs, max_bytes)
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".npz":
        return load_dataset(path, env_id, env_kwargs, max_bytes)
    if suffix in (".hdf5", ".h5"):
        with _h5py().File(path, "r") as file:
            episodes = any(name.startswith("episode_") for name in file.keys())
        loader = load_minari if episodes else load_d4rl
        return loader(path, env_id, env_kwargs, max_bytes)
    raise ValueError(
        f"dataset file {path!r}: unknown suffix {suffix!r}; expected .npz (jaxrl), .hdf5 / .h5 (D4RL, Minari) "
        "or a Minari dataset directory"
    )


def _h5py():
    try:
        import h5py
    except ImportError:
        raise ImportError("reading HDF5 datasets needs h5py: pip install 'jaxrl[offline]'") from None
    return h5py


def _read(group, key: str, path: str, where: str = ""):
    """``group[key]`` as a NumPy array, ``ValueError`` naming the key and the file if absent."""
    if key not in group:
        raise ValueError(f"{path}: it has no {where + key!r}")
    if not isinstance(group[key], _h5py().Dataset):
        raise ValueError(f"{path}: {where + key!r} must be an array (an HDF5 dataset), not a group")
    return group[key][()]


def _per_step(array: np.ndarray, size: int, key: str, path: str) -> np.ndarray:
    """A per-transition scalar as ``[size]`` (``[size, 1]`` is accepted, as some files store it)."""
    if array.shape == (size, 1):
        array = array[:, 0]
    if array.shape != (size,):
        raise ValueError(f"{path}: {key!r} must have shape ({size},) like the actions, got {array.shape}")
    return array


def _as_observation(array):
    """Observations as float32, except bool leaves (an action mask), which stay bool."""
    return array if array.dtype == np.bool_ else array.astype(np.float32)


def _as_action(array):
    """Integer actions as int32 (discrete), anything else as float32."""
    return array.astype(np.int32 if np.issubdtype(array.dtype, np.integer) else np.float32)


def _episode_totals(reward: np.ndarray, done: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(return float64 [S], length int64 [S])``: at every step, the sum of the rewards
    and the number of steps of its episode, episodes ending where ``done`` (the last one
    runs to the end of the arrays)."""
    reward, done = np.asarray(reward, np.float64), np.asarray(done, bool)
    episode = np.concatenate([[0], np.cumsum(done[:-1])]).astype(np.int64) if done.size else done.astype(np.int64)
    return np.bincount(episode, weights=reward)[episode], np.bincount(episode)[episode]


def _episode_fields(totals: tuple[np.ndarray, np.ndarray], done: np.ndarray) -> dict:
    """``episode_return`` (float32) / ``episode_length`` (int32): ``totals`` where ``done``, else 0."""
    return {
        "episode_return": np.where(done, totals[0], 0.0).astype(np.float32),
        "episode_length": np.where(done, totals[1], 0).astype(np.int32),
    }


def _existing(path) -> str:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no dataset file {path!r}")
    return path


def load_d4rl(
    path: str | os.PathLike, env_id: str | None = None, env_kwargs=None, max_bytes: int | None = None
) -> Dataset:
    """A dataset from a local HDF5 file in D4RL's layout (nothing is downloaded): arrays
    ``observations [N, ...]``, ``actions [N, ...]``, ``rewards [N]``, ``terminals [N]``,
    ``timeouts [N]`` and optionally ``next_observations [N, ...]``, one stream of
    episodes that end where ``terminals`` (the MDP ended) or ``timeouts`` (a time limit).

    With ``next_observations`` every transition is kept: ``terminated = terminals``,
    ``truncated = timeouts``. Without it, ``next_obs[i]`` is ``observations[i + 1]``, and
    the transitions that cannot be completed are dropped, as D4RL's own
    ``qlearning_dataset`` does: the file's last transition, and each one where
    ``timeouts`` is set (its next observation, that of the next episode, is not the
    one the step produced). The transition before a dropped timeout is then marked
    ``truncated`` (its episode ends there in the dataset; bootstrapping from its
    ``next_obs`` is right). For a terminal transition ``next_obs`` is the next row's
    observation, a placeholder: the file does not hold the final observation, and a
    terminated transition is never bootstrapped from it.

    ``episode_return`` / ``episode_length`` are those of the file's episodes, computed
    from all its rewards (a dropped timeout step included), set on the dataset's last
    transition of each episode that ends in the file. Observations become float32,
    integer actions int32 (discrete), other actions float32. ``metadata`` records the
    source. Given ``env_id``, the shapes are checked against that env and the dataset
    takes its id. ``ValueError`` naming a missing key and the file, or for a dataset
    larger than ``max_bytes`` (:func:`check_size`); ``FileNotFoundError`` for no file.
    """
    path = _existing(path)
    with _h5py().File(path, "r") as file:
        arrays = {
            key: _read(file, key, path) for key in ("observations", "actions", "rewards", "terminals", "timeouts")
        }
        next_observations = _read(file, "next_observations", path) if "next_observations" in file else None
    size = arrays["actions"].shape[0] if arrays["actions"].ndim else 0
    for key in ("observations",) + (("next_observations",) if next_observations is not None else ()):
        array = arrays[key] if key == "observations" else next_observations
        if array.ndim < 1 or array.shape[0] != size:
            raise ValueError(f"{path}: {key!r} must be [{size}, ...] like the actions, got shape {array.shape}")
    reward, terminals, timeouts = (
        _per_step(arrays[key], size, key, path) for key in ("rewards", "terminals", "timeouts")
    )
    terminals, timeouts = terminals.astype(bool), timeouts.astype(bool)
    totals = _episode_totals(reward, terminals | timeouts)  # the file's episodes
    obs = arrays["observations"]
    if next_observations is not None:
        keep = np.arange(size)
        next_obs, terminated, truncated = next_observations, terminals, timeouts
    else:
        keep = np.flatnonzero(~timeouts[:-1]) if size else np.arange(0)
        next_obs = obs[keep + 1]
        terminated = terminals[keep]
        truncated = timeouts[keep + 1] & ~terminated
    # A dataset episode ends where its file episode does, or just before a dropped timeout
    # step of the same episode: either way with the file episode's return and length.
    dataset = Dataset(
        obs=_as_observation(obs[keep]),
        action=_as_action(arrays["actions"][keep]),
        reward=reward[keep].astype(np.float32),
        terminated=terminated,
        truncated=truncated,
        next_obs=_as_observation(next_obs),
        **_episode_fields((totals[0][keep], totals[1][keep]), terminated | truncated),
        env_id=env_id or "",
        metadata=_dump_metadata({"source": {"format": "d4rl", "path": os.path.abspath(path)}}),
    )
    return _to_device(dataset, path, env_id, env_kwargs, max_bytes)


def load_minari(
    path: str | os.PathLike, env_id: str | None = None, env_kwargs=None, max_bytes: int | None = None
) -> Dataset:
    """A dataset from a local Minari dataset (nothing is downloaded): its HDF5 file
    (``main_data.hdf5``), or a directory holding it (``DIR/data/main_data.hdf5`` or
    ``DIR/main_data.hdf5``). The file has one group per episode, ``episode_{id}`` (read
    in order of ``id``), each with ``observations`` (``T + 1`` entries: the first and
    the final observation included), ``actions``, ``rewards``, ``terminations`` and
    ``truncations`` (``T`` each). A Dict observation is a group of its keys, a Tuple one
    a group of ``_index_{i}``: they become dicts and tuples. Other entries (``infos``)
    are not read.

    Episode ``e``'s step ``t`` is the transition ``observations[t] -> observations[t +
    1]``; the episodes follow one another (``num_envs = 1``). An episode whose last
    step is neither terminated nor truncated (collection stopped in the middle) is
    marked ``truncated`` there, as a time limit would cut it, so that every episode
    ends with ``done``. ``episode_return`` / ``episode_length`` are each episode's sum of
    rewards and step count, set on its last step. Observations become float32 (bool
    leaves stay bool), integer actions int32, other actions float32; ``metadata``
    records the source. Given ``env_id``, the shapes are checked against that env and
    the dataset takes its id. ``ValueError`` naming a missing key and the file, or for
    a dataset larger than ``max_bytes`` (:func:`check_size`); ``FileNotFoundError`` for
    no file.
    """
    path = _existing(path)
    if os.path.isdir(path):
        candidates = [os.path.join(path, "data", "main_data.hdf5"), os.path.join(path, "main_data.hdf5")]
        found = [candidate for candidate in candidates if os.path.exists(candidate)]
        if not found:
            raise FileNotFoundError(f"{path!r} is not a Minari dataset: it has no data/main_data.hdf5")
        path = found[0]
    h5py = _h5py()
    episodes = []
    with h5py.File(path, "r") as file:
        names = sorted((name for name in file.keys() if re.fullmatch(r"episode_\d+", name)), key=lambda n: int(n[8:]))
        if not names:
            raise ValueError(f"{path}: no episode_{{id}} groups (not a Minari dataset file)")
        for name in names:
            group = file[name]
            where = f"{name}/"
            rewards = _read(group, "rewards", path, where)
            steps = rewards.shape[0] if rewards.ndim else 0
            if steps == 0:
                continue
            if "observations" not in group:
                raise ValueError(f"{path}: it has no {where + 'observations'!r}")
            observations = _read_tree(group["observations"], path, where + "observations")
            for leaf_path, leaf in jax.tree_util.tree_flatten_with_path(observations)[0]:
                if leaf.ndim < 1 or leaf.shape[0] != steps + 1:
                    raise ValueError(
                        f"{path}: {where}observations{jax.tree_util.keystr(leaf_path)} must hold {steps + 1} "
                        f"observations (the {steps} steps' and the final one), got shape {leaf.shape}"
                    )
            actions = _read(group, "actions", path, where)
            if actions.ndim < 1 or actions.shape[0] != steps:
                raise ValueError(f"{path}: {where}actions must hold {steps} actions, got shape {actions.shape}")
            terminations, truncations = (
                _per_step(_read(group, key, path, where), steps, where + key, path).astype(bool)
                for key in ("terminations", "truncations")
            )
            truncations = truncations.copy()
            truncations[-1] |= ~terminations[-1]  # every episode ends: a cut one as a time limit would
            episodes.append(
                {
                    "obs": jax.tree.map(lambda leaf: leaf[:-1], observations),
                    "next_obs": jax.tree.map(lambda leaf: leaf[1:], observations),
                    "action": actions,
                    "reward": _per_step(rewards, steps, where + "rewards", path),
                    "terminated": terminations,
                    "truncated": truncations,
                }
            )
    if not episodes:
        raise ValueError(f"{path}: every episode is empty (no steps)")
    fields = jax.tree.map(lambda *leaves: np.concatenate(leaves), *episodes)
    done = fields["terminated"] | fields["truncated"]
    dataset = Dataset(
        obs=jax.tree.map(_as_observation, fields["obs"]),
        action=_as_action(fields["action"]),
        reward=fields["reward"].astype(np.float32),
        terminated=fields["terminated"],
        truncated=fields["truncated"],
        next_obs=jax.tree.map(_as_observation, fields["next_obs"]),
        **_episode_fields(_episode_totals(fields["reward"], done), done),
        env_id=env_id or "",
        metadata=_dump_metadata(
            {"source": {"format": "minari", "path": os.path.abspath(path), "episodes": len(episodes)}}
        ),
    )
    return _to_device(dataset, path, env_id, env_kwargs, max_bytes)


def _read_tree(node, path: str, where: str):
    """An HDF5 dataset as an array, a group as a dict of its keys, or as a tuple where
    its keys are ``_index_0 .. _index_{n-1}`` (Minari's Tuple spaces)."""
    h5py = _h5py()
    if isinstance(node, h5py.Dataset):
        return node[()]
    keys = list(node.keys())
    if not keys:
        raise ValueError(f"{path}: {where} is an empty group")
    if all(re.fullmatch(r"_index_\d+", key) for key in keys):
        indices = sorted(int(key[7:]) for key in keys)
        if indices == list(range(len(keys))):
            return tuple(_read_tree(node[f"_index_{i}"], path, f"{where}/_index_{i}") for i in indices)
    return {key: _read_tree(node[key], path, f"{where}/{key}") for key in keys}
