"""A run's directory: ``run.json`` (which run this is), the loggers' files and
``checkpoints/``, with the checks that keep a saved run from being overwritten or
resumed by a different one. ::

    directory = RunDir("runs/ppo", meta, resume=True, checkpoint_every=2)
    restored = directory.restore(template)      # None: nothing to resume
    directory.save(iteration, tree, history, eval_return)
"""

from __future__ import annotations

import json
import os
from typing import Any

from jaxrl.config import fields_to_json

# Config fields a run does not depend on: the runner leaves progress reports out of its
# programs and shows progress between chunks instead.
NOT_IN_META = ("num_reports",)


def meta(algorithm: str, config, **run) -> dict:
    """What identifies a run: the algorithm, its config's fields (except
    :data:`NOT_IN_META`) and ``run``'s settings (seeds, chunking, ...)."""
    fields = {k: v for k, v in fields_to_json(config).items() if k not in NOT_IN_META}
    return {"algorithm": algorithm, "config": fields, **run}


class RunDir:
    """``logdir`` opened for a run described by ``meta``.

    Without ``resume``, a ``logdir`` that already holds a run is a ValueError (nothing
    saved is overwritten). With it, the saved ``run.json`` and checkpoints must match
    ``meta`` (a ValueError names each differing field). Checkpoints (orbax, the
    ``checkpoint`` extra) are opened when ``checkpoint_every`` is set, or to resume.
    """

    def __init__(
        self,
        logdir: str,
        meta: dict,
        *,
        resume: bool = False,
        checkpoint_every: int | None = None,
        keep_checkpoints: int = 3,
    ):
        if checkpoint_every is not None and (not isinstance(checkpoint_every, int) or checkpoint_every < 1):
            raise ValueError(
                f"checkpoint_every must be an int >= 1 (chunks between checkpoints), got {checkpoint_every!r}"
            )
        self.logdir, self.meta, self.checkpoint_every = logdir, meta, checkpoint_every
        run_json = os.path.join(logdir, "run.json")
        holds_run = os.path.exists(run_json)
        if holds_run and not resume:
            raise ValueError(
                f"logdir {logdir!r} already holds a run: pass resume=True (--resume) to continue it, "
                f"or choose another logdir"
            )
        if holds_run:
            from jaxrl.workflow.checkpoint import check_meta

            with open(run_json) as f:
                check_meta(json.load(f), meta, f"the run in {logdir!r}")
        checkpoint_dir = os.path.join(logdir, "checkpoints")
        self.checkpoints = None
        if checkpoint_every is not None or (resume and os.path.isdir(checkpoint_dir)):
            from jaxrl.workflow.checkpoint import Checkpoints

            self.checkpoints = Checkpoints(checkpoint_dir, keep=keep_checkpoints)
        self.resume = resume
        os.makedirs(logdir, exist_ok=True)
        if not holds_run:
            from jaxrl.workflow.checkpoint import write_json

            write_json(run_json, {**meta, "jaxrl_version": _version()})

    def restore(self, template) -> tuple[Any, int, dict | None, bytes | None] | None:
        """``(tree, iterations, history, host_envs)`` from the newest checkpoint that
        reads whole (:meth:`jaxrl.workflow.checkpoint.Checkpoints.restore`), shaped like
        ``template``, or None where there is nothing to resume (``host_envs``: the pickled
        host envs saved with it, or None)."""
        if not self.resume or self.checkpoints is None or self.checkpoints.latest_step() is None:
            return None
        tree, history, saved = self.checkpoints.restore(template, expect_meta=self.meta)  # the newest whole one
        step = int(saved["step"])
        for damaged in [s for s in self.checkpoints.steps() if s > step]:  # skipped: the run writes them anew
            self.checkpoints.remove(damaged)
        return tree, step, history, self.checkpoints.host_envs(step)

    def wants_checkpoint(self, chunks_run: int, last: bool) -> bool:
        return self.checkpoint_every is not None and (chunks_run % self.checkpoint_every == 0 or last)

    def save(self, iterations: int, tree, history: dict, eval_return: float, host_envs: bytes | None = None) -> None:
        """Checkpoint ``tree`` after ``iterations``; ``eval_return`` ranks it for the
        best-kept checkpoint; ``host_envs``: the pickled host envs ``tree`` refers to."""
        self.checkpoints.save(
            iterations, tree, meta=self.meta, history=history, eval_return=eval_return, host_envs=host_envs
        )

    def path(self, name: str) -> str:
        return os.path.join(self.logdir, name)

    def close(self) -> None:
        if self.checkpoints is not None:
            self.checkpoints.close()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("jaxrl")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"
