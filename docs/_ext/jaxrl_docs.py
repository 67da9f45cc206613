"""Sphinx helpers for jaxrl's docs, so that generated parts can never go stale.

* ``.. jaxrl-config-fields:: jaxrl.algorithms.ppo.Config`` renders a table of a Config's
  fields, read from the class at build time: name, default, static or traced (from
  :func:`jaxrl.config.static_fields`) and the field's trailing source comment. Every
  ``Config`` dataclass that autodoc documents gets this table appended to its docstring.
* ``.. jaxrl-algorithm:: ppo`` renders an algorithm's record
  (:func:`jaxrl.algorithms.get`): its summary, where each function of the contract comes
  from, its presets and named variants.
* ``.. jaxrl-cli-help:: train ppo`` renders ``python -m jaxrl train ppo --help`` from
  :func:`jaxrl.workflow.cli.build_parser`.
* The notebooks in ``notebooks/`` are copied into ``docs/_notebooks`` (ignored by git)
  when the build starts, since a toctree cannot point outside the docs directory.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import filecmp
import functools
import importlib
import inspect
import io
import os
import pathlib
import re
import shutil
import textwrap
import tokenize

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

NOTEBOOKS_DIR = "_notebooks"


# -- Config tables -------------------------------------------------------------------


def _import(path: str):
    module_name, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module_name), name)


def _is_config(obj) -> bool:
    return inspect.isclass(obj) and obj.__name__ == "Config" and dataclasses.is_dataclass(obj)


def _field_comments(cls) -> dict[str, str]:
    """``{field: trailing comment}`` from the source of ``cls`` and its bases; a subclass's
    comment wins, a base's fills in where the subclass has none."""
    comments: dict[str, str] = {}
    for klass in cls.__mro__:
        try:
            lines, _ = inspect.getsourcelines(klass)
        except (OSError, TypeError):
            continue
        source = textwrap.dedent("".join(lines))
        by_row: dict[int, str] = {}
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                by_row[token.start[0]] = token.string.lstrip("#").strip()
        tree = ast.parse(source)
        for node in tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else ():
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                rows = range(node.lineno, (node.end_lineno or node.lineno) + 1)
                text = " ".join(by_row[row] for row in rows if row in by_row)
                if text and node.target.id not in comments:
                    comments[node.target.id] = text
    return comments


def _default(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        return repr(field.default)
    if field.default_factory is not dataclasses.MISSING:
        return repr(field.default_factory())
    return "(required)"


_CODE = re.compile(r"``?([^`]+)``?")


def _inline(text: str) -> list[nodes.Node]:
    """Plain text with ``code`` or `code` spans as literals."""
    parts: list[nodes.Node] = []
    position = 0
    for match in _CODE.finditer(text):
        if match.start() > position:
            parts.append(nodes.Text(text[position : match.start()]))
        parts.append(nodes.literal(match.group(1), match.group(1)))
        position = match.end()
    if position < len(text):
        parts.append(nodes.Text(text[position:]))
    return parts


def config_table(cls) -> nodes.table:
    from jaxrl.config import static_fields

    static = set(static_fields(cls))
    comments = _field_comments(cls)
    headers = ("Field", "Default", "Kind", "Notes")
    table = nodes.table(classes=["jaxrl-config-fields"])
    group = nodes.tgroup(cols=len(headers))
    table += group
    for width in (22, 22, 10, 46):
        group += nodes.colspec(colwidth=width)

    def row(cells: list[list[nodes.Node]]) -> nodes.row:
        result = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            entry += nodes.paragraph("", "", *cell)
            result += entry
        return result

    head = nodes.thead()
    head += row([[nodes.Text(header)] for header in headers])
    group += head
    body = nodes.tbody()
    for field in dataclasses.fields(cls):
        default = _default(field)
        body += row(
            [
                [nodes.literal(field.name, field.name)],
                [nodes.literal(default, default)],
                [nodes.Text("static" if field.name in static else "traced")],
                _inline(comments.get(field.name, "")),
            ]
        )
    group += body
    return table


class ConfigFields(SphinxDirective):
    """The field table of the Config class named by the argument."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        cls = _import(self.arguments[0])
        for klass in cls.__mro__:  # rebuild the page when any class the fields come from changes
            module = inspect.getmodule(klass)
            if module is not None and getattr(module, "__file__", None) and module.__name__.startswith("jaxrl"):
                self.env.note_dependency(module.__file__)
        intro = nodes.paragraph(
            "",
            "Fields, read from the code when these docs were built. ",
            nodes.emphasis("", "static"),
            nodes.Text(" fields fix shapes and program structure (changing one recompiles); "),
            nodes.emphasis("", "traced"),
            nodes.Text(" fields are pytree leaves that can be passed as arrays and vmapped over in one compile."),
        )
        return [intro, config_table(cls)]


def _append_config_table(app, what, name, obj, options, lines) -> None:
    if what == "class" and _is_config(obj):
        lines.extend(["", f".. jaxrl-config-fields:: {obj.__module__}.{obj.__qualname__}", ""])


def _drop_config_signature(app, what, name, obj, options, signature, return_annotation):
    if what == "class" and _is_config(obj):
        return "", None  # every field as a keyword: the table below lists them
    return None


def _skip_foreign_docstring(app, what, name, obj, skip, options):
    """Hide methods that only inherit a docstring from outside jaxrl (flax's ``setup``),
    and NamedTuple fields' generated "Alias for field number i" (the class docstring's
    ``Attributes:`` section describes them)."""
    if skip or what != "class":
        return None
    if (getattr(obj, "__doc__", None) or "").startswith("Alias for field number"):
        return True
    if not inspect.isfunction(obj) or obj.__doc__ is not None:
        return None
    owner = getattr(importlib.import_module(obj.__module__), obj.__qualname__.split(".")[0], None)
    for base in getattr(owner, "__mro__", ())[1:]:
        inherited = base.__dict__.get(name)
        if getattr(inherited, "__doc__", None):
            return True if not base.__module__.startswith("jaxrl") else None
    return None


# -- Algorithm records ---------------------------------------------------------------


def _origin(function) -> str:
    """``module.qualname`` of the code behind a record's function (through partials and
    bound methods)."""
    while isinstance(function, functools.partial):
        function = function.func
    owner = getattr(function, "__self__", None)
    if owner is not None and not inspect.ismodule(owner):  # a bound method: its class's
        return f"{type(owner).__module__}.{type(owner).__qualname__}.{function.__name__}"
    return f"{function.__module__}.{function.__qualname__.split('.<locals>')[0]}"  # a closure: its maker


def _xref(target: str) -> list[nodes.Node]:
    """A reference to a documented Python object (plain code where it is not documented)."""
    from sphinx.addnodes import pending_xref

    ref = pending_xref("", refdomain="py", reftype="obj", reftarget=target, refexplicit=False)
    ref += nodes.literal(target, target)
    return [ref]


class AlgorithmRecord(SphinxDirective):
    """The record of the algorithm named by the argument: summary, the contract's
    functions and where their code is, presets and variants."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        from jaxrl import algorithms
        from jaxrl.algorithms.contract import FUNCTIONS

        record = algorithms.get(self.arguments[0])
        module = importlib.import_module(algorithms.BUILT_IN[record.name])
        self.env.note_dependency(module.__file__)
        result: list[nodes.Node] = [
            nodes.paragraph("", "", nodes.strong("", record.summary)),
            nodes.paragraph(
                "",
                "",
                nodes.Text("The record "),
                nodes.literal("", f'jaxrl.algorithms.get("{record.name}")'),
                nodes.Text(" (also "),
                nodes.literal("", f"{module.__name__}.algorithm"),
                nodes.Text(f"): the command line's {record.name}, and "),
                nodes.literal("", f"{record.name}.<function>"),
                nodes.Text(" for each function of the contract, whose code is:"),
            ),
        ]
        functions = nodes.bullet_list()
        for name in FUNCTIONS:
            item = nodes.list_item()
            item += nodes.paragraph(
                "", "", nodes.literal("", name), nodes.Text(": "), *_xref(_origin(getattr(record, name)))
            )
            functions += item
        result.append(functions)
        for title, table in (("Presets", record.presets), ("Variants", record.variants)):
            if not table:
                continue
            result.append(
                nodes.rubric(
                    "", f"{title} ({record.name}.preset(env_id) starts from these)" if title == "Presets" else title
                )
            )
            entries = nodes.bullet_list()
            for key, settings in table.items():
                shown = ", ".join(f"{field}={value!r}" for field, value in settings.items()) or "the defaults"
                item = nodes.list_item()
                item += nodes.paragraph("", "", nodes.literal("", key), nodes.Text(": "), nodes.literal("", shown))
                entries += item
            result.append(entries)
        return result


# -- CLI help ------------------------------------------------------------------------


def _subparsers(parser) -> dict:
    """``{name: parser}`` of an argparse parser's subcommands (argparse keeps no public view)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help(parser, words: list[str], width: int) -> nodes.literal_block:
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)  # argparse wraps to the terminal's width
    try:
        text = parser.format_help()
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    command = " ".join(["$ python -m jaxrl", *words, "--help"])
    block = nodes.literal_block("", f"{command}\n{text.rstrip()}")
    block["language"] = "text"
    return block


class CliHelp(SphinxDirective):
    """``python -m jaxrl <words> --help``, rendered from the CLI's own parser; with
    ``:subcommands:``, followed by the help of each of its subcommands."""

    optional_arguments = 8
    option_spec = {"width": directives.positive_int, "subcommands": directives.flag}

    def run(self) -> list[nodes.Node]:
        from jaxrl.workflow import cli

        width = self.options.get("width", 100)
        parser = cli.build_parser()
        for word in self.arguments:
            parser = _subparsers(parser)[word]
        result: list[nodes.Node] = [_help(parser, self.arguments, width)]
        if "subcommands" in self.options:
            for name, sub in _subparsers(parser).items():
                words = [*self.arguments, name]
                result.append(nodes.rubric("", " ".join(["python -m jaxrl", *words])))
                result.append(_help(sub, words, width))
        return result


# -- Notebooks -----------------------------------------------------------------------


def copy_notebooks(app, config) -> None:
    """Mirror ``notebooks/*.ipynb`` into ``docs/_notebooks`` (only files that changed, so
    incremental builds reread only those)."""
    source = pathlib.Path(app.srcdir).parent / "notebooks"
    target = pathlib.Path(app.srcdir) / NOTEBOOKS_DIR
    target.mkdir(exist_ok=True)
    wanted = {path.name for path in source.glob("*.ipynb")}
    for stale in target.glob("*.ipynb"):
        if stale.name not in wanted:
            stale.unlink()
    for name in sorted(wanted):
        destination = target / name
        if not destination.exists() or not filecmp.cmp(source / name, destination, shallow=False):
            shutil.copyfile(source / name, destination)


def setup(app):
    app.add_directive("jaxrl-config-fields", ConfigFields)
    app.add_directive("jaxrl-cli-help", CliHelp)
    app.add_directive("jaxrl-algorithm", AlgorithmRecord)
    app.connect("config-inited", copy_notebooks)
    app.connect("autodoc-process-docstring", _append_config_table)
    app.connect("autodoc-process-signature", _drop_config_signature)
    app.connect("autodoc-skip-member", _skip_foreign_docstring)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
