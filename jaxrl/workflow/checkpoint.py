"""Save and restore whole training states with orbax-checkpoint.

A checkpoint directory holds numbered steps (the training iteration reached). Each step
stores three items: ``state`` (any pytree: parameters, optimiser state, replay buffer,
env states, normalisation statistics, counters, typed PRNG keys), ``history`` (a pytree
of NumPy arrays, e.g. the metrics logged so far) and ``meta`` (a JSON dict saying which
run this is). Orbax writes a step into a temporary directory and renames it only once
complete, so a crash mid-save leaves the previous step as the latest. ::

    checkpoints = Checkpoints("runs/ppo/checkpoints", keep=3)
    checkpoints.save(100, state, meta={"algorithm": "ppo", ...}, eval_return=480.0)
    state, history, meta = checkpoints.restore(template_state, expect_meta={...})

Needs the ``checkpoint`` extra: ``pip install "jaxrl[checkpoint]"``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import numpy as np


def _orbax():
    try:
        import orbax.checkpoint as ocp
    except ImportError as error:  # pragma: no cover - depends on the install
        raise ImportError('checkpoints need orbax-checkpoint: pip install "jaxrl[checkpoint]"') from error
    return ocp


def _is_key(leaf) -> bool:
    return hasattr(leaf, "dtype") and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def _unwrap_keys(tree):
    """Typed PRNG keys as their raw ``uint32`` data (what orbax can store)."""
    return jax.tree.map(lambda leaf: jax.random.key_data(leaf) if _is_key(leaf) else leaf, tree)


def _wrap_keys(tree, template):
    """Undo :func:`_unwrap_keys`, taking each key's implementation from ``template``."""
    return jax.tree.map(
        lambda leaf, like: jax.random.wrap_key_data(leaf, impl=jax.random.key_impl(like)) if _is_key(like) else leaf,
        tree,
        template,
    )


def _restore_target(leaf) -> jax.ShapeDtypeStruct:
    """A template leaf's shape, dtype and sharding, restored into. A leaf with no sharding
    (a NumPy array) goes to the default device: orbax would look for the devices it was
    saved from (a run whose lanes spanned a mesh)."""
    target = _orbax().utils.to_shape_dtype_struct(leaf)
    if not isinstance(target, jax.ShapeDtypeStruct) or target.sharding is not None:
        return target
    default_device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    return jax.ShapeDtypeStruct(target.shape, target.dtype, sharding=default_device)


def _jsonable(value):
    """``value`` as it reads back from JSON (tuples become lists, numbers stay numbers)."""
    return json.loads(json.dumps(value, default=str))


def check_meta(saved: dict, expected: dict, what: str) -> None:
    """Raise ValueError unless ``saved`` has every field of ``expected`` with the same
    value (compared as JSON), naming each field that differs."""
    differences = [
        f"{name}: saved {saved.get(name)!r}, this run {value!r}"
        for name, value in _jsonable(expected).items()
        if saved.get(name) != value
    ]
    if differences:
        raise ValueError(f"{what} is from a different run; " + "; ".join(differences))


class Checkpoints:
    """A directory of checkpoints: keeps the latest ``keep`` steps and, with
    ``keep_best``, the step with the highest ``eval_return`` given to :meth:`save`."""

    def __init__(self, directory: str | os.PathLike, keep: int = 3, keep_best: bool = True):
        if not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be an int >= 1 (checkpoints to keep), got {keep!r}")
        ocp = _orbax()
        self.directory = os.path.abspath(os.fspath(directory))
        policies = [ocp.checkpoint_managers.LatestN(n=keep)]
        if keep_best:
            policies.append(
                ocp.checkpoint_managers.BestN(
                    get_metric_fn=lambda metrics: metrics["eval_return"], n=1, keep_checkpoints_without_metrics=False
                )
            )
        options = ocp.CheckpointManagerOptions(
            preservation_policy=ocp.checkpoint_managers.AnyPreservationPolicy(policies),
            # Saves are synchronous: when save returns, the step is on disk and complete.
            enable_async_checkpointing=False,
            create=True,
        )
        # The items' handlers named up front: a manager that has not saved yet (one
        # opened to resume or to read a finished run) otherwise warns, when asked about
        # a step, that it cannot restore the items it has no handler for.
        handlers = {
            "state": ocp.StandardCheckpointHandler(),
            "history": ocp.StandardCheckpointHandler(),
            "meta": ocp.JsonCheckpointHandler(),
            "host_envs": ocp.StandardCheckpointHandler(),
        }
        self._manager = ocp.CheckpointManager(self.directory, options=options, item_handlers=handlers)

    def steps(self) -> list[int]:
        """The complete steps in the directory, oldest first."""
        return sorted(self._manager.all_steps())

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def best_step(self) -> int | None:
        """The kept step with the highest finite ``eval_return`` (None if none has one)."""
        scored = [
            (meta["eval_return"], step)
            for step in self.steps()
            if (meta := self.meta(step)).get("eval_return") is not None
        ]
        return max(scored)[1] if scored else None

    def meta(self, step: int) -> dict:
        """The ``meta`` dict saved with ``step``."""
        ocp = _orbax()
        return dict(self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta)

    def save(
        self,
        step: int,
        state,
        *,
        meta: dict,
        history: Any = None,
        eval_return: float | None = None,
        host_envs: bytes | None = None,
    ) -> None:
        """Write ``state`` (and ``history``, ``meta``) as ``step``, then drop old steps.

        ``eval_return`` (finite, or None) ranks the step for ``keep_best``; it is also
        stored in the meta. ``host_envs``: the pickled host envs the state's env states
        refer to (:func:`jaxrl.envs.gymnasium.snapshot`), read back by :meth:`host_envs`."""
        ocp = _orbax()
        if eval_return is not None and not np.isfinite(eval_return):
            eval_return = None
        meta = {**_jsonable(meta), "step": int(step), "eval_return": eval_return}
        items = {"state": ocp.args.StandardSave(_unwrap_keys(state)), "meta": ocp.args.JsonSave(meta)}
        if history is not None:
            items["history"] = ocp.args.StandardSave(jax.tree.map(np.asarray, history))
        if host_envs is not None:
            items["host_envs"] = ocp.args.StandardSave({"pickle": np.frombuffer(host_envs, np.uint8)})
        metrics = None if eval_return is None else {"eval_return": float(eval_return)}
        self._manager.save(int(step), args=ocp.args.Composite(**items), metrics=metrics, force=True)
        self._manager.wait_until_finished()

    def restore(self, template, step: int | None = None, *, expect_meta: dict | None = None):
        """Load ``step`` (default: the latest) as a pytree shaped like ``template``.

        ``expect_meta``: fields that must equal the saved meta (e.g. the algorithm and
        its config); a difference is a ValueError naming each differing field, raised
        before any array is read. Returns ``(state, history, meta)``; ``history`` is None
        if none was saved.
        """
        ocp = _orbax()
        if step is None:
            step = self.latest_step()
            if step is None:
                raise FileNotFoundError(f"no checkpoint in {self.directory}")
        elif step not in self.steps():
            raise FileNotFoundError(f"no checkpoint step {step} in {self.directory}; steps: {self.steps()}")
        meta = self.meta(step)
        if expect_meta is not None:
            check_meta(meta, expect_meta, f"checkpoint {self.directory} step {step}")
        abstract = jax.tree.map(_restore_target, _unwrap_keys(template))
        items = {"state": ocp.args.StandardRestore(abstract)}
        has_history = "history" in self._manager.item_metadata(step)
        if has_history:
            items["history"] = ocp.args.StandardRestore()
        try:
            restored = self._manager.restore(step, args=ocp.args.Composite(**items))
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(
                f"checkpoint {self.directory} step {step} does not match this run's state structure: {error}"
            ) from error
        state = _wrap_keys(restored.state, template)
        history = jax.tree.map(np.asarray, restored.history) if has_history else None
        return state, history, meta

    def host_envs(self, step: int) -> bytes | None:
        """The pickled host envs saved with ``step``, or None if none were."""
        ocp = _orbax()
        if "host_envs" not in self._manager.item_metadata(step):
            return None
        restored = self._manager.restore(step, args=ocp.args.Composite(host_envs=ocp.args.StandardRestore()))
        return np.asarray(restored.host_envs["pickle"]).tobytes()

    def close(self) -> None:
        self._manager.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
