"""The config reference: Markdown tables generated from the pydantic schema.

Every config key is documented once, by its attribute docstring in
:mod:`entrena.config.schema`; this module renders those docstrings (with each key's type,
allowed values and default) as one Markdown table per section. ``docs/reference/config.md``
holds the output between two marker comments, and ``tests/test_docs.py`` checks that it is up
to date. ``python -m entrena.cli.docs_reference`` regenerates it with the other reference pages.

Command line::

    python -m entrena.config.reference                                  # print the reference
    python -m entrena.config.reference --write docs/reference/config.md  # refresh that page

Standard library and pydantic only: importing this module never imports torch.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from entrena.config.schema import Config

__all__ = [
    "START_MARKER",
    "END_MARKER",
    "REGENERATE",
    "CONFIG_PAGE",
    "markers",
    "ReferenceRow",
    "ReferenceSection",
    "config_reference_sections",
    "config_reference_markdown",
    "task_reference_sections",
    "replace_reference",
    "main",
]

REGENERATE = "python -m entrena.cli.docs_reference"
"""The one command that regenerates every reference page under ``docs/reference/``."""
CONFIG_PAGE = "docs/reference/config.md"
"""The page, relative to the repository root, that holds the config reference."""


def markers(name: str) -> tuple[str, str]:
    """The comments that fence a generated block: ``markers("config")`` gives
    ``<!-- config-reference:start -->`` and ``<!-- config-reference:end -->``."""
    return f"<!-- {name}-reference:start -->", f"<!-- {name}-reference:end -->"


START_MARKER, END_MARKER = markers("config")

_BASE_NAMES = {str: "string", int: "integer", float: "number", bool: "`true` or `false`"}


@dataclass(frozen=True)
class ReferenceRow:
    """One config key.

    Attributes:
        key: Dotted key, e.g. ``train.learning_rate``.
        type: Type and allowed values, in words (``integer ≥ 1 or `null` ``).
        default: The default as it is written in YAML, or ``required``.
        description: The field's docstring on one line.
    """

    key: str
    type: str
    default: str
    description: str


@dataclass(frozen=True)
class ReferenceSection:
    """One section of the config (``""`` for the top level) and its keys.

    Attributes:
        key: Dotted key of the section (``train.early_stopping``); ``""`` for the top level.
        summary: The section model's docstring on one line.
        rows: The section's keys, in schema order.
    """

    key: str
    summary: str
    rows: tuple[ReferenceRow, ...]


def _one_line(text: str | None) -> str:
    """Collapse a docstring's newlines and indentation into single spaces."""
    return " ".join((text or "").split())


def _number(value: Any) -> str:
    """A bound as people write it: ``0.0`` → ``0``; integers unchanged."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def _constraints(metadata: Sequence[Any]) -> str:
    """Bounds, length and pattern constraints in words: ``≥ 1``, ``0 < x < 1``, ``non-empty``.

    Reads the ``annotated_types`` objects pydantic keeps in ``FieldInfo.metadata`` by their
    attributes (``gt``, ``ge``, ``lt``, ``le``, ``min_length``, ``pattern``).
    """
    lower = upper = None  # (operator as written left of x, bound), (operator right of x, bound)
    words = []
    for item in metadata:
        if getattr(item, "gt", None) is not None:
            lower = ("<", item.gt)
        elif getattr(item, "ge", None) is not None:
            lower = ("≤", item.ge)
        elif getattr(item, "lt", None) is not None:
            upper = ("<", item.lt)
        elif getattr(item, "le", None) is not None:
            upper = ("≤", item.le)
        elif getattr(item, "min_length", None) is not None:
            words.append("non-empty" if item.min_length == 1
                         else f"at least {item.min_length} long")
        elif getattr(item, "pattern", None):
            words.append(f"matching `{item.pattern}`")
    if lower and upper:
        words.insert(0, f"{_number(lower[1])} {lower[0]} x {upper[0]} {_number(upper[1])}")
    elif lower:
        words.insert(0, f"{'>' if lower[0] == '<' else '≥'} {_number(lower[1])}")
    elif upper:
        words.insert(0, f"{upper[0]} {_number(upper[1])}")
    return ", ".join(words)


def _alternatives(annotation: Any, metadata: Sequence[Any], key: str) -> list[str]:
    """The values a field accepts, one phrase per alternative (``null`` last)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        base, *extras = get_args(annotation)
        inner = [m for e in extras for m in (e.metadata if isinstance(e, FieldInfo) else [e])]
        return _alternatives(base, [*metadata, *inner], key)
    if origin in (Union, types.UnionType):
        args = get_args(annotation)
        phrases = [p for a in args if a is not type(None) for p in _alternatives(a, metadata, key)]
        return phrases + (["`null`"] if type(None) in args else [])
    if origin is Literal:
        return [f"`{value}`" for value in get_args(annotation)]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [f"section `{key}` (table below)"]
    if origin is list:
        items = get_args(annotation)
        return [f"list of {' or '.join(_alternatives(items[0], [], key))}" if items else "list"]
    name = _BASE_NAMES.get(annotation, f"`{getattr(annotation, '__name__', annotation)}`")
    constraint = _constraints(metadata)
    if not constraint:
        return [name]
    return [f"{name} {constraint}" if constraint[0] in "<>≤≥" else f"{name}, {constraint}"]


def _type_text(field: FieldInfo, key: str) -> str:
    """``a``; ``a or b``; ``a, b or c``."""
    phrases = _alternatives(field.annotation, field.metadata, key)
    if len(phrases) == 1:
        return phrases[0]
    return f"{', '.join(phrases[:-1])} or {phrases[-1]}"


def _default_text(field: FieldInfo) -> str:
    """The default as a user writes it in YAML."""
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "its section's defaults"
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _section_model(field: FieldInfo) -> type[BaseModel] | None:
    """The config section model a field holds (``X`` or ``X | None``), else ``None``."""
    candidates = [field.annotation, *get_args(field.annotation)]
    return next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)


def config_reference_sections(model: type[BaseModel] = Config,
                              prefix: str = "") -> list[ReferenceSection]:
    """Walk a config model and its nested sections, depth first, in schema order.

    Args:
        model: The pydantic model of the section to start from.
        prefix: Dotted key of ``model`` (``""`` for the whole config).

    Returns:
        The section of ``model`` followed by those of its nested sections.
    """
    rows = []
    nested: list[ReferenceSection] = []
    for name, field in model.model_fields.items():
        key = f"{prefix}.{name}" if prefix else name
        rows.append(ReferenceRow(key, _type_text(field, key), _default_text(field),
                                 _one_line(field.description)))
        sub = _section_model(field)
        if sub is not None:
            nested.extend(config_reference_sections(sub, key))
    summary = _one_line(inspect.cleandoc(model.__doc__ or ""))
    return [ReferenceSection(prefix, summary, tuple(rows)), *nested]


def _cell(text: str) -> str:
    """Escape what would break a Markdown table cell."""
    return text.replace("|", "\\|")


def task_reference_sections(schema: type[BaseModel]) -> list[ReferenceSection]:
    """The keys a task's config class adds to the common :class:`Config`, or gives another
    type, default or description (its own rows of each section, and its own nested sections),
    in schema order; its ``task`` row first."""
    common = {row.key: row for section in config_reference_sections() for row in section.rows}
    out = []
    for section in config_reference_sections(schema):
        rows = tuple(r for r in section.rows if common.get(r.key) != r or r.key == "task")
        if rows:
            out.append(ReferenceSection(section.key, section.summary, rows))
    return out


def _table(section: ReferenceSection, title: str, level: str = "###") -> list[str]:
    lines = [f"{level} {title}", ""]
    if section.summary:
        lines += [section.summary, ""]
    lines += ["| key | type / allowed values | default | description |", "|---|---|---|---|"]
    lines += [f"| `{r.key}` | {_cell(r.type)} | {_cell(r.default)} | {_cell(r.description)} |"
              for r in section.rows]
    return [*lines, ""]


def config_reference_markdown(task_schemas: Mapping[str, type[BaseModel]] | None = None) -> str:
    """Render the config reference: one Markdown table per section.

    Columns: key (dotted), type / allowed values, default, description (the field's
    attribute docstring on one line). The output depends only on the schema, so it is the same
    on every call and every machine.

    Args:
        task_schemas: Task name → its config class; each gets a part with the keys it adds
            (``docs/reference/config.md`` passes the built-in tasks). ``None``: the common
            keys only.

    Returns:
        Markdown text ending with a newline.
    """
    lines = [
        "_Generated from the field docstrings in `src/entrena/config/schema.py` and each "
        f"task's `config.py` by `{REGENERATE}`; edit the docstrings, not this text._",
        "",
    ]
    for section in config_reference_sections():
        lines += _table(section, f"`{section.key}`" if section.key else "Top-level keys")
    for name, schema in (task_schemas or {}).items():
        lines += [f"### `task: {name}`", "",
                  _one_line(inspect.cleandoc(schema.__doc__ or "")) + " Its own keys:", ""]
        for section in task_reference_sections(schema):
            where = f"`{section.key}`" if section.key else "top level"
            lines += _table(section, f"{where} ({name})", "####")
    return "\n".join(lines).rstrip("\n") + "\n"


def replace_reference(text: str, reference: str, start_marker: str = START_MARKER,
                      end_marker: str = END_MARKER) -> str:
    """Put ``reference`` between the markers of ``text``, replacing what was there.

    The block becomes the start marker, a blank line, the reference, a blank line and the
    end marker, so ``replace_reference`` of an up-to-date file returns it unchanged. The
    text outside the markers (a page's hand-written introduction) is kept as it is.

    Args:
        text: The page.
        reference: The generated Markdown.
        start_marker: The comment opening the generated block (default: the config's).
        end_marker: The comment closing it.

    Raises:
        ValueError: The markers are missing, repeated, or the end comes before the start.
    """
    starts, ends = text.count(start_marker), text.count(end_marker)
    start, end = text.find(start_marker), text.find(end_marker)
    if starts != 1 or ends != 1 or end < start:
        raise ValueError(
            f"expected the markers {start_marker} and {end_marker} once each, in that order; "
            f"found {starts} start and {ends} end marker(s); put them on their own lines "
            "where the generated reference belongs"
        )
    head = text[:start + len(start_marker)]
    return f"{head}\n\n{reference.rstrip(chr(10))}\n\n{text[end:]}"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m entrena.config.reference [--write FILE]``.

    Returns:
        The exit code: 0, or 2 when FILE is missing or lacks the markers.
    """
    parser = argparse.ArgumentParser(
        prog="python -m entrena.config.reference",
        description="Print the config reference (Markdown), or refresh it in a file "
                    f"({CONFIG_PAGE}; {REGENERATE} refreshes every reference page).")
    parser.add_argument("--write", metavar="FILE", type=Path,
                        help=f"replace the text between {START_MARKER} and {END_MARKER} in FILE")
    args = parser.parse_args(argv)
    reference = config_reference_markdown()
    if args.write is None:
        sys.stdout.write(reference)
        return 0
    path: Path = args.write
    try:
        text = path.read_text(encoding="utf-8")
        updated = replace_reference(text, reference)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"error: {path}: {exc}\n")
        return 2
    if updated != text:
        path.write_text(updated, encoding="utf-8")
        sys.stderr.write(f"updated the config reference in {path}\n")
    else:
        sys.stderr.write(f"{path}: the config reference is already up to date\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
