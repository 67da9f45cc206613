"""Save and restore whole training states with orbax-checkpoint.

A checkpoint directory holds numbered steps (the training iteration reached). Each step
stores three items: ``state`` (any pytree: parameters, optimiser state, replay buffer,
env states, normalisation statistics, counters, typed PRNG keys), ``history`` (a pytree
of NumPy arrays, e.g. the metrics logged so far) and ``meta`` (a JSON dict saying which
run this is). Orbax writes a step into a temporary directory and renames it only once
complete, so a crash mid-save leaves the previous step as the latest. Each step also
holds ``jaxrl_checksums.json``, the size and SHA-256 of every file in it, checked before
the step is read: a step damaged after it was written (a truncated copy, a flipped bit)
is a :class:`DamagedCheckpoint`, and :meth:`Checkpoints.restore` of the latest step falls
back to the newest whole one, with a warning naming what it skipped. A save that fails
part-way (a full disk) is a :class:`CheckpointSaveError` and leaves the earlier steps as
they were. ::

    checkpoints = Checkpoints("runs/ppo/checkpoints", keep=3)
    checkpoints.save(100, state, meta={"algorithm": "ppo", ...}, eval_return=480.0)
    state, history, meta = checkpoints.restore(template_state, expect_meta={...})

Needs the ``checkpoint`` extra: ``pip install "jaxrl[checkpoint]"``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import threading
import time
import uuid
import warnings
from typing import Any

import jax
import numpy as np


def _orbax():
    try:
        import orbax.checkpoint as ocp
    except ImportError as error:  # pragma: no cover - depends on the install
        raise ImportError('checkpoints need orbax-checkpoint: pip install "jaxrl[checkpoint]"') from error
    return ocp


CHECKSUMS = "jaxrl_checksums.json"  # in each step's directory


class DamagedCheckpoint(ValueError):
    """A checkpoint step that cannot be read back whole (a file missing, cut short or
    changed since it was written, or one its reader refuses)."""


class CheckpointSaveError(OSError):
    """A save that failed part-way; the steps saved before it are intact."""


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
        self._failed: int | None = None  # the step whose save failed: CheckpointSaveError said so

    def _step_dir(self, step: int) -> str:
        return os.path.join(self.directory, str(int(step)))

    def steps(self) -> list[int]:
        """The complete steps in the directory, oldest first."""
        return sorted(self._manager.all_steps())

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def best_step(self) -> int | None:
        """The kept step with the highest finite ``eval_return`` (None if none has one)."""
        scored = []
        for step in self.steps():
            try:
                meta = self._meta(step)  # unchecked: the step chosen is checked as it is restored
            except DamagedCheckpoint as error:
                warnings.warn(f"{error}: not ranked for the best checkpoint", stacklevel=2)
                continue
            if meta.get("eval_return") is not None:
                scored.append((meta["eval_return"], step))
        return max(scored)[1] if scored else None

    def meta(self, step: int) -> dict:
        """The ``meta`` dict saved with ``step`` (a :class:`DamagedCheckpoint` if the
        step fails its checksums or its meta does not read)."""
        self.verify(step)
        return self._meta(step)

    def _meta(self, step: int) -> dict:
        ocp = _orbax()
        try:
            restored = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
            return dict(restored.meta)
        except Exception as error:  # noqa: BLE001 - whatever the reader raises, the step does not read
            raise DamagedCheckpoint(f"checkpoint {self._step_dir(step)}: its meta does not read ({error})") from None

    def verify(self, step: int) -> bool:
        """Check ``step``'s files against the checksums saved with it: a
        :class:`DamagedCheckpoint` naming the first file that differs; False for a step
        saved without checksums (by an older jaxrl, or a process that died between the
        two writes), which is read unchecked; True for a step that checks."""
        step_dir = self._step_dir(step)
        try:
            with open(os.path.join(step_dir, CHECKSUMS)) as f:
                expected = json.load(f)["files"]
        except FileNotFoundError:
            return False
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise DamagedCheckpoint(f"checkpoint {step_dir}: its {CHECKSUMS} does not read ({error})") from None
        for name, (size, digest) in sorted(expected.items()):
            path = os.path.join(step_dir, name)
            try:
                found = os.path.getsize(path)
                if found != size:
                    raise DamagedCheckpoint(f"checkpoint {step_dir}: {name} has {found} bytes, {size} were saved")
                if _sha256(path) != digest:
                    raise DamagedCheckpoint(f"checkpoint {step_dir}: {name} differs from what was saved (checksum)")
            except OSError as error:
                raise DamagedCheckpoint(f"checkpoint {step_dir}: {name} does not read ({error})") from None
        return True

    def _write_checksums(self, step: int) -> None:
        step_dir = self._step_dir(step)
        files = {}
        for folder, _, names in os.walk(step_dir):
            for name in names:
                path = os.path.join(folder, name)
                relative = os.path.relpath(path, step_dir)
                if relative != CHECKSUMS:
                    files[relative] = (os.path.getsize(path), _sha256(path))
        write_json(os.path.join(step_dir, CHECKSUMS), {"algorithm": "sha256", "files": files})

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
        step = int(step)
        if step in self.steps():  # a damaged step a resume skipped: this run writes it again
            self.remove(step)
        writers = set(threading.enumerate())
        try:
            with _orbax_errors_held():
                try:
                    self._manager.save(step, args=ocp.args.Composite(**items), metrics=metrics, force=True)
                    self._manager.wait_until_finished()
                except Exception:
                    # orbax raises at the first failed write while its other writers go on
                    # (and start others): wait for them all, so that nothing is written or
                    # logged after the cleanup below.
                    deadline = time.monotonic() + 60
                    while (running := set(threading.enumerate()) - writers) and time.monotonic() < deadline:
                        for thread in running:
                            thread.join(timeout=max(0.0, deadline - time.monotonic()))
                    raise
        except Exception as error:
            self._failed = step  # close() then holds back what orbax logs of it again, and cleans up again
            _drop_reports_of_abandoned_writers()
            self._discard(step)
            if not _failed_write(error):  # not the disk's doing: a bug to see whole
                raise
            earlier = [s for s in self.steps() if s != step]
            raise CheckpointSaveError(
                f"could not save checkpoint {step} in {self.directory} ({type(error).__name__}: {error}); "
                f"the checkpoints before it are intact (steps {earlier or 'none'})"
            ) from error
        try:
            self._write_checksums(step)
        except OSError as error:  # the step itself is whole: kept, to be read unchecked
            raise CheckpointSaveError(
                f"saved checkpoint {step} in {self.directory} but not its checksums ({error}); "
                f"it is kept and will be read unchecked"
            ) from error

    def remove(self, step: int) -> None:
        """Delete ``step`` (a damaged one a resume skipped, which the run writes again)."""
        self._manager.delete(step)

    def _discard(self, step: int, quiet: float = 1.0, timeout: float = 30.0) -> None:
        """Remove what a failed save of ``step`` left: its temporary directory. A write
        still in flight in tensorstore's own threads (no Python thread to wait for) can
        make it again after it is gone, so it is removed until it has stayed gone for
        ``quiet`` seconds (at most ``timeout``)."""
        with contextlib.suppress(Exception):
            self._manager.reload()
        deadline, gone_since = time.monotonic() + timeout, None
        while True:
            left = [name for name in os.listdir(self.directory) if name.startswith(f"{step}.orbax-checkpoint-tmp")]
            for name in left:
                shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)
            now = time.monotonic()
            if left or gone_since is None:
                gone_since = now
            elif now - gone_since >= quiet or now > deadline:
                return
            time.sleep(0.05)

    def restore(self, template, step: int | None = None, *, expect_meta: dict | None = None):
        """Load ``step`` as a pytree shaped like ``template``; by default the newest step
        that reads whole (each damaged step newer than it skipped with a warning naming it).

        ``expect_meta``: fields that must equal the saved meta (e.g. the algorithm and
        its config); a difference is a ValueError naming each differing field, raised
        before any array is read. Returns ``(state, history, meta)``; ``history`` is None
        if none was saved. A damaged ``step`` is a :class:`DamagedCheckpoint`; with no
        ``step``, so is a directory none of whose steps reads, naming each.
        """
        if step is not None:
            if step not in self.steps():
                raise FileNotFoundError(f"no checkpoint step {step} in {self.directory}; steps: {self.steps()}")
            return self._restore(template, step, expect_meta)
        steps = self.steps()
        if not steps:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        damaged = []
        for candidate in reversed(steps):
            try:
                return self._restore(template, candidate, expect_meta)
            except DamagedCheckpoint as error:
                damaged.append(str(error))
                older = "the one before it" if candidate != steps[0] else "none"
                warnings.warn(f"skipping a damaged checkpoint, {error}; trying {older}", stacklevel=2)
        raise DamagedCheckpoint(f"no checkpoint in {self.directory} reads whole: " + "; ".join(damaged))

    def _restore(self, template, step: int, expect_meta: dict | None):
        ocp = _orbax()
        verified = self.verify(step)  # before anything is read
        meta = self._meta(step)
        if expect_meta is not None:
            check_meta(meta, expect_meta, f"checkpoint {self.directory} step {step}")
        abstract = jax.tree.map(_restore_target, _unwrap_keys(template))
        items = {"state": ocp.args.StandardRestore(abstract)}
        try:
            has_history = "history" in self._manager.item_metadata(step)
            if has_history:
                items["history"] = ocp.args.StandardRestore()
            restored = self._manager.restore(step, args=ocp.args.Composite(**items))
        except Exception as error:  # noqa: BLE001 - sorted below
            if not verified:  # no checksums to tell a damaged step from another structure
                raise DamagedCheckpoint(
                    f"checkpoint {self._step_dir(step)} does not read: damaged, or saved from another "
                    f"state structure ({error})"
                ) from None
            if not isinstance(error, (ValueError, KeyError, TypeError)):
                raise
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
        if self._failed is None:
            self._manager.close()
            return
        with _orbax_errors_held(replay=False), contextlib.suppress(Exception):  # the failed save, told already
            self._manager.close()
        self._discard(self._failed, quiet=0.2)  # what its last writes made, now that orbax has stopped

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def write_json(path: str, value) -> None:
    """Write ``value`` as JSON atomically: a crash leaves the old file or the new one,
    whole and on disk."""
    temporary = f"{path}.{uuid.uuid4().hex}.tmp"
    with open(temporary, "w") as f:
        json.dump(value, f, indent=2, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)


def _failed_write(error: Exception) -> bool:
    """A writer's failure (a full disk, a quota, an I/O error), as Python's ``OSError`` or
    as the ``ValueError`` tensorstore raises for one (naming the OS error code)."""
    return isinstance(error, OSError) or "os_error_code" in str(error) or "Error writing" in str(error)


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


class _AbandonedWriters(logging.Filter):
    """orbax's report of a writer thread's failure (``_SignalingThread.run() raised an
    exception``), which can come after the save that started it failed and jaxrl said so."""

    def filter(self, record):
        return "_SignalingThread.run() raised an exception" not in record.getMessage()


def _drop_reports_of_abandoned_writers() -> None:
    """After a failed save: orbax's writer threads may report it later still, from threads
    no one can wait for; the one error is the :class:`CheckpointSaveError`."""
    logger = logging.getLogger("absl")
    if not any(isinstance(f, _AbandonedWriters) for f in logger.filters):
        logger.addFilter(_AbandonedWriters())


@contextlib.contextmanager
def _orbax_errors_held(replay: bool = True):
    """Hold back the tracebacks orbax logs from its writer threads while a save runs:
    a failed save is one :class:`CheckpointSaveError`; after a save that succeeds,
    whatever was held is logged as it would have been (unless not ``replay``)."""
    held = []

    class Hold(logging.Filter):
        def filter(self, record):
            held.append(record)
            return False

    hold, logger = Hold(), logging.getLogger("absl")
    logger.addFilter(hold)
    try:
        yield
    finally:
        logger.removeFilter(hold)
    for record in held if replay else ():  # reached only when the save succeeded
        logger.handle(record)
