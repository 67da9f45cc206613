"""The package's layout: three levels with imports pointing down only, and no import
cycle anywhere in ``jaxrl/``, imports inside functions included.

The graph is built from the source (``ast``), not by importing, so a cycle hidden in a
function body that only runs late is found as surely as one at the top of a module.
An edge is every ``import`` / ``from ... import`` of a ``jaxrl`` module and every
``importlib.import_module`` of a string literal. The shims in ``jaxrl/_deprecated``
forward old import paths to new ones and are not part of the graph; no module of the
library may import them (a test below checks it).
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).parent.parent / "jaxrl"
DEPRECATED = "_deprecated"


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, pathlib.Path]:
    found = {module_name(path): path for path in ROOT.rglob("*.py")}
    return {name: path for name, path in found.items() if f".{DEPRECATED}" not in name}


def imported(name: str, path: pathlib.Path, known: set) -> set:
    """The jaxrl modules ``name`` imports: ``from a.b import c`` is ``a.b.c`` where that
    is a module, else ``a.b``; relative imports are resolved against the package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.add(full if full in known else base)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            targets.add(node.args[0].value)
    return {t for t in targets if t in known and t != name}


def graph() -> dict[str, set]:
    found = modules()
    known = set(found)
    return {name: imported(name, path, known) for name, path in found.items()}


def find_cycle(edges: dict[str, set]) -> list | None:
    """One cycle of ``edges`` as a list of modules, or None (depth-first search)."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for target in sorted(edges[node]):
            if state.get(target) == "open":
                return stack[stack.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle():
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


# Everything else in jaxrl/ is the function library (0); ``python -m jaxrl`` is the CLI's.
LEVELS = {"workflow": 2, "__main__": 2, "algorithms": 1}


def level(module: str) -> int:
    parts = module.split(".")
    return LEVELS.get(parts[1], 0) if len(parts) > 1 else 0


@pytest.mark.parametrize("lower", ["library", "algorithms"])
def test_imports_point_down(lower):
    """The function library knows no algorithm and no workflow; algorithms know no workflow."""
    bound = 0 if lower == "library" else 1
    upward = sorted(
        f"{source} -> {target}"
        for source, targets in graph().items()
        if level(source) == bound
        for target in targets
        if level(target) > bound
    )
    assert not upward, upward


# The workflow modules that build on one another, lowest first: a single run, a sweep and
# a population are lanes of the runner's one chunk loop, so sweep and pbt build on the
# runner and never the other way round.
WORKFLOW_ORDER = ["options", "distributed", "runner", "sweep", "pbt", "cli"]


def test_workflow_modules_build_on_the_runner():
    rank = {f"jaxrl.workflow.{name}": index for index, name in enumerate(WORKFLOW_ORDER)}
    edges = graph()
    upward = sorted(
        f"{source} -> {target}"
        for source in rank
        for target in edges[source]
        if target in rank and rank[target] >= rank[source]
    )
    assert not upward, upward
    assert "jaxrl.workflow.runner" in edges["jaxrl.workflow.sweep"] & edges["jaxrl.workflow.pbt"]


def test_no_module_imports_a_deprecated_path():
    moved = {p.stem for p in (ROOT / DEPRECATED).glob("*.py") if p.stem != "__init__"}
    offenders = sorted(
        f"{source} -> {target}"
        for source, path in modules().items()
        for target in imported(source, path, {f"jaxrl.{m}" for m in moved})
    )
    assert not offenders, offenders


# Modules that import by a computed name, each a lookup by design; any other computed
# import would hide an edge from the graph above.
COMPUTED_IMPORTS = {
    "jaxrl": "the lazy submodules of jaxrl/__init__.py",
    "jaxrl.algorithms": "get() imports a built-in algorithm's module by its registry name",
    "jaxrl.config": "from_json imports a part's jaxrl module by the name a run.json gives",
    "jaxrl.envs": "the deprecated names that moved to jaxrl.algorithms.requirements",
    "jaxrl.envs.registry": "a suite's adapter module, imported when its prefix is first used",
}
# Modules that reach their own package, and why; no other module may.
OWN_PACKAGE = {
    "jaxrl.algorithms.dqn": "the deprecated dqn.r2d2 finds R2D2 through the registry (r2d2 imports dqn)",
}


def test_computed_imports_are_the_known_lookups():
    found = set()
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
                and node.args
                and not isinstance(node.args[0], ast.Constant)
            ):
                found.add(name)
    assert found == set(COMPUTED_IMPORTS), found ^ set(COMPUTED_IMPORTS)


def test_no_module_imports_its_own_package():
    offenders = {
        name
        for name, targets in graph().items()
        if name.rpartition(".")[0] in targets and name.rpartition(".")[0] != "jaxrl"
    }
    assert offenders == set(OWN_PACKAGE), offenders ^ set(OWN_PACKAGE)
