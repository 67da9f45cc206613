"""Lines of a jaxrl tree's package, split into code, docstrings and the rest (comments,
blank lines), to compare two commits:

    python benchmarks/investigations/code_lines.py TREE [TREE ...]

A tree is a jaxrl checkout (``git worktree add /tmp/old COMMIT``); only the ``.py``
files git tracks under ``jaxrl/`` count. A line is code where a token other than a
comment or a docstring stands on it.
"""

from __future__ import annotations

import argparse
import ast
import io
import pathlib
import subprocess
import tokenize

LAYOUT_TOKENS = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


def docstring_lines(tree: ast.Module) -> set[int]:
    """The line numbers of the module's, classes' and functions' docstrings."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            value = getattr(first, "value", None)
            if isinstance(first, ast.Expr) and isinstance(value, ast.Constant) and isinstance(value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def count(source: str) -> tuple[int, int, int]:
    """``(all lines, code lines, docstring lines)`` of one file's source."""
    docs = docstring_lines(ast.parse(source))
    code = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in LAYOUT_TOKENS:
            code.update(line for line in range(token.start[0], token.end[0] + 1) if line not in docs)
    return len(source.splitlines()), len(code), len(docs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="+")
    args = parser.parse_args(argv)
    print("| tree | lines | code | docstrings |\n|---|---|---|---|")
    for tree in args.trees:
        listed = subprocess.run(["git", "-C", tree, "ls-files", "jaxrl"], capture_output=True, text=True, check=True)
        paths = [pathlib.Path(tree, name) for name in listed.stdout.split() if name.endswith(".py")]
        totals = [sum(column) for column in zip(*(count(path.read_text()) for path in paths))]
        print(f"| {tree} | {totals[0]:,} | {totals[1]:,} | {totals[2]:,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
