"""Run options: where a run, a sweep or a population keeps its records and which
devices its lanes span, shared by :func:`jaxrl.workflow.runner.run`,
:func:`jaxrl.workflow.sweep.run`, :func:`jaxrl.workflow.pbt.train` and the command line. ::

    from jaxrl.workflow import distributed
    from jaxrl.workflow.options import RunOptions

    options = RunOptions(logdir="runs/ppo", loggers=("csv", "tensorboard"), checkpoint_every=1,
                         progress=True, mesh=distributed.make_mesh())
    runner.run("ppo", ppo.Config(), seeds=8, options=options)
    runner.run("ppo", ppo.Config(), seeds=8, options=dataclasses.replace(options, resume=True))

Bad values are a ``ValueError`` naming the field, raised when the options are built.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Sequence

from jax.sharding import Mesh

from jaxrl.workflow.logging import LOGGER_NAMES


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How a run is recorded, resumed and spread over devices.

    Attributes:
      logdir: directory for ``run.json``, the loggers' files and ``checkpoints/``
        (:class:`jaxrl.workflow.rundir.RunDir`); None keeps nothing on disk.
      loggers: names from :data:`jaxrl.workflow.logging.LOGGER_NAMES` (file loggers
        write into ``logdir`` and are skipped without one) or objects with ``write`` /
        ``truncate`` / ``close``.
      checkpoint_every: save the whole state every this many chunks, at the end and at
        an early stop (needs ``logdir`` and the ``checkpoint`` extra); None: never.
      keep_checkpoints: the latest checkpoints kept (the best by evaluation return is
        kept besides).
      resume: continue from the latest checkpoint in ``logdir`` if there is one (start
        afresh if there is none). Without it, a ``logdir`` holding a run is an error.
      progress: show a progress bar of the program's counter, advanced after each chunk.
      mesh: a ``jax.sharding.Mesh`` whose devices (of every process, after
        :func:`jaxrl.workflow.distributed.initialize`) the lanes (seeds, settings x seeds,
        members) are split over, each device running its share; the lanes must divide
        over them. None: the default device.
    """

    logdir: str | None = None
    loggers: Sequence = ("csv",)
    checkpoint_every: int | None = None
    keep_checkpoints: int = 3
    resume: bool = False
    progress: bool = False
    mesh: Mesh | None = None

    def __post_init__(self):
        if self.logdir is not None:
            if not isinstance(self.logdir, (str, os.PathLike)):
                raise ValueError(f"logdir must be a path or None, got {self.logdir!r}")
            object.__setattr__(self, "logdir", os.fspath(self.logdir))
        if isinstance(self.loggers, str) or not isinstance(self.loggers, Sequence):
            raise ValueError(f"loggers must be a sequence of logger names or objects, got {self.loggers!r}")
        object.__setattr__(self, "loggers", tuple(self.loggers))
        for logger in self.loggers:
            if isinstance(logger, str) and logger not in LOGGER_NAMES:
                choices = ", ".join(LOGGER_NAMES)
                raise ValueError(f"unknown logger {logger!r} in loggers; choose from {choices} or pass a logger object")
            if not isinstance(logger, str) and not all(hasattr(logger, m) for m in ("write", "truncate", "close")):
                raise ValueError(f"loggers: {logger!r} is neither a logger name nor has write / truncate / close")
        if self.checkpoint_every is not None and (not _is_int(self.checkpoint_every) or self.checkpoint_every < 1):
            raise ValueError(
                f"checkpoint_every must be an int >= 1 (chunks between checkpoints) or None, "
                f"got {self.checkpoint_every!r}"
            )
        if not _is_int(self.keep_checkpoints) or self.keep_checkpoints < 1:
            raise ValueError(f"keep_checkpoints must be an int >= 1, got {self.keep_checkpoints!r}")
        for name in ("resume", "progress"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if (self.checkpoint_every is not None or self.resume) and self.logdir is None:
            raise ValueError("checkpoint_every and resume need a logdir to keep checkpoints in")
        if self.mesh is not None and not isinstance(self.mesh, Mesh):
            raise ValueError(f"mesh must be a jax.sharding.Mesh or None, got {type(self.mesh).__name__}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


FIELDS = tuple(field.name for field in dataclasses.fields(RunOptions))
# The default of every entry point's ``options``.
DEFAULTS = RunOptions()


def with_keywords(options: RunOptions, keywords: dict, caller: str) -> RunOptions:
    """``options`` with run options given the old way, as keywords of ``caller``
    (deprecated for one release, with a ``DeprecationWarning``); a keyword that is
    no run option is a ``TypeError``, as Python's own."""
    if not keywords:
        return options
    unknown = sorted(set(keywords) - set(FIELDS))
    if unknown:
        raise TypeError(f"{caller}() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}")
    warnings.warn(
        f"{caller}({', '.join(f'{k}=...' for k in keywords)}) is deprecated: pass "
        f"options=RunOptions({', '.join(f'{k}=...' for k in keywords)}) (jaxrl.workflow.options.RunOptions)",
        DeprecationWarning,
        stacklevel=3,
    )
    return dataclasses.replace(options, **keywords)
