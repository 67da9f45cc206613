"""The documentation builds with Sphinx, warnings as errors, and its generated parts are there.

The notebooks are rendered without being run (their execution is tested in
test_notebooks.py), so this takes seconds, not minutes.
"""

import os
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # compiles or runs whole training programs: see pyproject.toml

ROOT = pathlib.Path(__file__).parent.parent

pytest.importorskip("sphinx", reason="the docs extra is not installed (Sphinx 9 needs Python >= 3.11)")
pytest.importorskip("myst_nb")
pytest.importorskip("furo")


def test_docs_build_without_warnings(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("JAXRL_DOCS_EXECUTE", "JAXRL_DOCS_INTERSPHINX")}
    html = tmp_path / "html"
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html"]
    command += ["-d", str(tmp_path / "doctrees"), "docs", str(html)]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"sphinx failed:\n{result.stdout[-6000:]}\n{result.stderr[-6000:]}"

    # The parts generated at build time: Config tables, CLI help, the notebooks.
    ppo = (html / "algorithms" / "ppo.html").read_text()
    assert "jaxrl-config-fields" in ppo and "learning_rate" in ppo and "traced" in ppo
    assert "usage: python -m jaxrl train ppo" in (html / "cli.html").read_text()
    for notebook in (ROOT / "notebooks").glob("*.ipynb"):
        assert (html / "_notebooks" / f"{notebook.stem}.html").exists(), notebook.name
