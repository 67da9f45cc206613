"""Kill a training process right after its n-th checkpoint, for the resume tests."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap

TESTS = pathlib.Path(__file__).parent

SCRIPT = """
import os, sys
sys.path.insert(0, {tests!r})
from jaxrl.workflow import rundir
import {module} as t

save = rundir.RunDir.save

def save_then_die(self, *args, **kwargs):
    save(self, *args, **kwargs)
    if len(self.checkpoints.steps()) == {checkpoints}:
        os._exit(9)

if __name__ == "__main__":  # an async vector env's spawned processes import this script
    rundir.RunDir.save = save_then_die
    {call}
"""


def kill_after_checkpoints(module: str, call: str, tmp_path, checkpoints: int = 2) -> None:
    """Run ``call`` (Python, with the test module ``module`` imported as ``t``) in a
    fresh process that dies (exit status 9) as soon as its run directory holds
    ``checkpoints`` checkpoints."""
    script = tmp_path / "killed.py"
    fill = dict(tests=str(TESTS), module=module, checkpoints=checkpoints, call=call)
    script.write_text(textwrap.dedent(SCRIPT.format(**fill)))
    killed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert killed.returncode == 9, killed.stderr[-3000:]
