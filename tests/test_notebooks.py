"""Every notebook in notebooks/ runs top to bottom (code cells executed in order in one
namespace, as a kernel would) and passes the assertions on its key results."""

import json
import pathlib

import pytest

pytestmark = pytest.mark.slow  # compiles or runs whole training programs: see pyproject.toml

NOTEBOOKS = sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
# Those whose training runs outweigh their compiles: compiled at XLA's default level.
LONG_RUNS = {"custom_networks.ipynb", "memory.ipynb", "offline_to_online.ipynb"}


def test_there_are_notebooks():
    assert NOTEBOOKS and LONG_RUNS <= {path.name for path in NOTEBOOKS}


@pytest.mark.learns
@pytest.mark.parametrize(
    "path",
    [pytest.param(path, marks=[pytest.mark.optimised] if path.name in LONG_RUNS else []) for path in NOTEBOOKS],
    ids=lambda p: p.name,
)
def test_notebook_runs(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # files a notebook writes (plots) land here
    notebook = json.loads(path.read_text())
    namespace = {"__name__": "__main__"}
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        exec(compile(source, f"{path.name}[cell {index}]", "exec"), namespace)
