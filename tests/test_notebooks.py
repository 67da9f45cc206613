"""Every notebook in notebooks/ runs top to bottom (code cells executed in order in one
namespace, as a kernel would)."""

import json
import pathlib

import pytest

NOTEBOOKS = sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
# Notebooks that train to a stated return (learning tests, minutes each): marked slow.
LEARNING = {"custom_networks.ipynb"}


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=pytest.mark.slow) if p.name in LEARNING else p for p in NOTEBOOKS],
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
