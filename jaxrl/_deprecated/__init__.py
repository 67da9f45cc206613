"""Old import paths of modules that moved, kept working for one release.

``jaxrl/__init__.py`` adds this folder to ``jaxrl.__path__``, so ``import jaxrl.runner``
finds ``_deprecated/runner.py``: a module that warns once and serves every attribute of
the moved one (``from jaxrl.runner import run`` is ``jaxrl.workflow.runner.run``). No
module of the library imports an old path (``tests/test_layout.py`` checks it).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable

# old module -> new module
MOVED = {
    **{
        f"jaxrl.{name}": f"jaxrl.workflow.{name}"
        for name in (
            "checkpoint",
            "cli",
            "distributed",
            "logging",
            "metrics",
            "pbt",
            "plots",
            "program_cache",
            "rundir",
            "runner",
            "saved",
            "sweep",
        )
    },
    "jaxrl.onpolicy": "jaxrl.algorithms.onpolicy",
    "jaxrl.offpolicy": "jaxrl.algorithms.offpolicy",
}


def forward(old: str) -> Callable:
    """Warn that ``old`` moved (a DeprecationWarning at the caller's import) and return
    the ``__getattr__`` of the module at ``old``: every name is the moved module's."""
    new = MOVED[old]
    warnings.warn(f"{old} moved to {new}; the old path goes in the next release", DeprecationWarning, stacklevel=3)
    moved = importlib.import_module(new)

    def __getattr__(name: str):
        return getattr(moved, name)

    return __getattr__
