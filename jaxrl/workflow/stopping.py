"""Stopping a run cleanly when it is asked to: SIGTERM (a cluster's preemption, ``kill``)
or SIGINT (Ctrl-C in a terminal, "interrupt" in a notebook).

While :func:`jaxrl.workflow.runner.drive` runs (single runs, sweeps, PBT, the command
line), the first of these signals is only noted: the chunk in flight finishes, a
checkpoint of it is written (with ``checkpoint_every`` set), one line on stderr says
so, and the run raises :class:`Interrupted` (SIGINT, a ``KeyboardInterrupt``) or
:class:`Terminated` (SIGTERM, a ``SystemExit``), whose ``exit_status`` the command line
exits with: :data:`EXIT_STOPPED` (75) when a checkpoint holds everything the run did,
so that ``--resume`` continues it exactly, ``128 + signal`` when nothing was kept. A
second signal gets the handler the process had before (for SIGTERM the default: the
process ends at once); a save it cuts short leaves the checkpoints before it whole.
Signals are handled only in the main thread (Python delivers them there), and a
signal the process ignores stays ignored.
"""

from __future__ import annotations

import signal
import sys
import threading

import numpy as np

# sysexits' EX_TEMPFAIL ("try again later"): the run stopped with a checkpoint and resumes.
EXIT_STOPPED = 75
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stopped(BaseException):
    """What a run stopped by a signal raises: :class:`Interrupted` or :class:`Terminated`.

    Attributes:
      signal: the signal's number.
      iteration: the iterations the run completed.
      checkpoint: the iteration of the checkpoint that holds the run's progress (equal
        to ``iteration``), or None where the run keeps no checkpoints or nothing had run.
      exit_status: :data:`EXIT_STOPPED` where a resume continues the run (it keeps
        checkpoints), ``128 + signal`` where nothing was kept.
    """

    def __init__(self, message: str, signum: int, iteration: int, checkpoint: int | None, resumable: bool):
        super().__init__(message)
        self.signal, self.iteration, self.checkpoint = signum, iteration, checkpoint
        self.exit_status = EXIT_STOPPED if resumable else 128 + signum


class Interrupted(Stopped, KeyboardInterrupt):
    """SIGINT (Ctrl-C) stopped the run after its chunk in flight."""


class Terminated(Stopped, SystemExit):
    """SIGTERM stopped the run after its chunk in flight; uncaught, the process exits
    with ``exit_status``."""

    def __init__(self, *args):
        super().__init__(*args)
        self.code = self.exit_status  # what SystemExit exits with


class StopSignals:
    """A context that notes SIGTERM and SIGINT instead of acting on them: ``received``
    is the first one's number (None until then). The first restores the handlers the
    process had before, so that a second signal acts at once."""

    def __init__(self):
        self.received: int | None = None
        self._previous = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                previous = signal.getsignal(signum)
                if previous not in (signal.SIG_IGN, None):  # None: installed outside Python
                    self._previous[signum] = previous
                    signal.signal(signum, self._note)
        return self

    def _note(self, signum, frame) -> None:
        self.received = signum
        self._restore()

    def _restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}

    def __exit__(self, *exc) -> None:
        self._restore()

    def stop(self, name: str, iteration: int, total: int, checkpoint_dir: str | None) -> Stopped:
        """The exception for a run stopped at ``iteration`` of ``total``, its progress
        checkpointed in ``checkpoint_dir`` (None: not kept), after one line on stderr."""
        signame = signal.Signals(self.received).name
        if checkpoint_dir is None:
            kept = "no checkpoint kept (checkpoint_every / --checkpoint-every keeps one)"
        elif iteration == 0:
            kept = "nothing had run yet: --resume (resume=True) starts afresh"
        elif iteration == total:
            kept = f"the run had finished; its last checkpoint is in {checkpoint_dir}"
        else:
            kept = f"checkpoint in {checkpoint_dir}: continue with --resume (resume=True)"
        message = f"{name} stopped by {signame} after iteration {iteration:,} of {total:,}; {kept}"
        print(f"jaxrl: {message}", file=sys.stderr, flush=True)
        cls = Interrupted if self.received == signal.SIGINT else Terminated
        kept_at = iteration if checkpoint_dir is not None and iteration > 0 else None
        return cls(message, self.received, iteration, kept_at, checkpoint_dir is not None)

    def agree(self) -> None:
        """In a run of several processes, stop all of them if any got a signal (each
        chunk is a collective: one process stopping alone would leave the others waiting)."""
        import jax

        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            received = int(np.max(multihost_utils.process_allgather(np.int32(self.received or 0))))
            self.received = received or None
