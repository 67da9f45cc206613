"""The suite's guards on itself: under ``CI=true`` (``.ci/run`` sets it), a test that
would skip because a package of the ``test`` extra does not import fails instead."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

TESTS = pathlib.Path(__file__).parent


def collect_without_jumanji(tmp_path, ci: bool) -> subprocess.CompletedProcess:
    """Collect ``test_envs_jumanji.py`` (a module-level ``importorskip``) with jumanji,
    a package of the test extra, made to fail its import."""
    (tmp_path / "jumanji.py").write_text('raise ModuleNotFoundError("No module named jumanji", name="jumanji")\n')
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(PYTHONPATH=str(tmp_path), **({"CI": "true"} if ci else {}))
    command = [sys.executable, "-m", "pytest", "-q", "--co", "-p", "no:cacheprovider", "-p", "no:xdist"]
    command += ["-p", "no:randomly", str(TESTS / "test_envs_jumanji.py")]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=TESTS.parent)


@pytest.mark.slow
def test_a_missing_test_extra_package_fails_under_ci(tmp_path):
    failed = collect_without_jumanji(tmp_path, ci=True)
    assert failed.returncode != 0
    assert "could not import 'jumanji'" in failed.stdout
    assert "the test extra installs it, and under CI=true it must import" in failed.stdout

    skipped = collect_without_jumanji(tmp_path, ci=False)  # outside CI: a skip, as a user's partial install gets
    assert skipped.returncode == 5 and "must import" not in skipped.stdout  # 5: the module skipped, nothing collected
