"""The code stays clean under the linter and formatter configured in pyproject.toml."""

import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).parent.parent


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff_is_clean(command):
    ruff = shutil.which("ruff") or pytest.skip("ruff is not installed (pip install -e '.[test]')")
    result = subprocess.run([ruff, *command, "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
