"""Old import paths of modules that moved, kept working for one release.

``jaxrl/__init__.py`` adds this folder to ``jaxrl.__path__``, so ``import jaxrl.runner``
finds ``_deprecated/runner.py``, which warns and puts the moved module in its place:
``jaxrl.runner`` *is* ``jaxrl.workflow.runner`` afterwards. No module of the library
imports an old path (``tests/test_layout.py`` checks it).
"""

from __future__ import annotations

import importlib
import sys
import warnings

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


def forward(old: str) -> None:
    """Make the module being imported as ``old`` the moved one, with a DeprecationWarning
    pointing at the caller's import."""
    new = MOVED[old]
    warnings.warn(f"{old} moved to {new}; the old path goes in the next release", DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)
