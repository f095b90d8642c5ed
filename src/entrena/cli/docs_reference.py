"""The reference pages of ``docs/reference/``, generated from the code.

Four pages, each a hand-written introduction followed by a generated block between two
marker comments (``<!-- NAME-reference:start -->`` … ``end``):

- ``cli.md`` from the Typer app of :mod:`entrena.cli` (every command, its arguments and options
  with their help text);
- ``config.md`` from the pydantic schema (:mod:`entrena.config.reference`);
- ``metrics.md`` from ``METRIC_KEYS`` (:mod:`entrena.core.metrics`);
- ``catalog.md`` from ``catalog.yaml`` (:mod:`entrena.hardware.catalog_reference`).

It sits in the CLI package because it reads the CLI: the layer rules let only ``entrena.cli``
import ``entrena.cli``. ``tests/test_docs.py`` regenerates the pages in memory and fails with
a diff when a committed page differs.

Command line (from the repository root)::

    python -m entrena.cli.docs_reference           # rewrite the pages that are out of date
    python -m entrena.cli.docs_reference --check   # exit 1 with a diff when one is
"""

from __future__ import annotations

import argparse
import difflib
import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from entrena.config.reference import (
    CONFIG_PAGE,
    REGENERATE,
    config_reference_markdown,
    markers,
    replace_reference,
)
from entrena.core.metrics import metrics_reference_markdown
from entrena.hardware.catalog_reference import catalog_reference_markdown
from entrena.tasks.registry import builtin_config_schemas

__all__ = ["ReferencePage", "PAGES", "cli_reference_markdown", "expected_page",
           "stale_pages", "page_diff", "main"]


def _one_paragraph(text: str) -> str:
    return " ".join(text.split())


def _paragraphs(text: str | None) -> list[str]:
    """A docstring's paragraphs, each on one line."""
    blocks = inspect.cleandoc(text or "").split("\n\n")
    return [_one_paragraph(b) for b in blocks if b.strip()]


def _cell(text: str) -> str:
    """One table cell on one line; ``|`` escaped, ``<`` too (``runs/<name>`` is no HTML tag)."""
    return _one_paragraph(text).replace("|", "\\|").replace("<", "&lt;")


def _params_table(command: Any, context: Any) -> list[str]:
    """The command's arguments and options as ``--help`` shows them: names with their metavar,
    then the help text with its ``[default: …]`` or ``[required]``."""
    records = [r for r in (p.get_help_record(context) for p in command.params) if r]
    if not records:
        return []
    return ["| argument / option | description |", "|---|---|",
            *(f"| `{_one_paragraph(names)}` | {_cell(text)} |" for names, text in records), ""]


def cli_reference_markdown(app: Any = None) -> str:
    """Render every command of a Typer app: usage, help text, arguments and options.

    Args:
        app: The Typer app (default: ``entrena.cli.app``).

    Returns:
        Markdown text ending with a newline; it depends only on the app's definition.
    """
    import typer

    if app is None:
        from entrena.cli import app
    group = typer.main.get_command(app)
    root = group.context_class(group, info_name="entrena")
    lines = ["_Generated from the Typer app in `src/entrena/cli/__init__.py` by "
             f"`{REGENERATE}`; edit the commands' help texts, not this text._", "",
             "### `entrena`", "", *(p + "\n" for p in _paragraphs(group.help)),
             "```", f"entrena {' '.join(group.collect_usage_pieces(root))}", "```", "",
             *_params_table(group, root)]
    for name in group.list_commands(root):
        command = group.get_command(root, name)
        if command is None or command.hidden:
            continue
        context = command.context_class(command, info_name=name, parent=root)
        lines += [f"### `entrena {name}`", "", "```",
                  f"entrena {name} {' '.join(command.collect_usage_pieces(context))}", "```",
                  ""]
        lines += [p + "\n" for p in _paragraphs(command.help)]
        lines += _params_table(command, context)
    text = "\n".join(line.rstrip() for line in "\n".join(lines).split("\n"))
    return text.rstrip("\n") + "\n"


@dataclass(frozen=True)
class ReferencePage:
    """One generated page.

    Attributes:
        path: The page, relative to the repository root.
        name: Its marker name: the block sits between ``markers(name)``.
        render: Returns the generated Markdown.
        source: What the page is generated from (for messages).
    """

    path: str
    name: str
    render: Callable[[], str]
    source: str


PAGES = (
    ReferencePage("docs/reference/cli.md", "cli", cli_reference_markdown,
                  "the Typer app in src/entrena/cli/__init__.py"),
    ReferencePage(CONFIG_PAGE, "config",
                  lambda: config_reference_markdown(builtin_config_schemas()),
                  "the field docstrings in src/entrena/config/schema.py and the tasks' "
                  "config.py"),
    ReferencePage("docs/reference/metrics.md", "metrics", metrics_reference_markdown,
                  "METRIC_KEYS in src/entrena/core/metrics.py"),
    ReferencePage("docs/reference/catalog.md", "catalog", catalog_reference_markdown,
                  "src/entrena/hardware/catalog.yaml"),
)
"""Every reference page, in the order of the docs' navigation."""


def expected_page(page: ReferencePage, text: str) -> str:
    """``text`` (the page as it is) with its generated block regenerated.

    Raises:
        ValueError: The page lacks its markers.
    """
    return replace_reference(text, page.render(), *markers(page.name))


def stale_pages(root: Path) -> list[tuple[ReferencePage, str, str]]:
    """The pages under ``root`` whose generated block is out of date.

    Returns:
        ``(page, current text, expected text)`` for each stale page.

    Raises:
        OSError: A page cannot be read.
        ValueError: A page lacks its markers.
    """
    stale = []
    for page in PAGES:
        current = (root / page.path).read_text(encoding="utf-8")
        expected = expected_page(page, current)
        if expected != current:
            stale.append((page, current, expected))
    return stale


def page_diff(page: ReferencePage, current: str, expected: str, max_lines: int = 60) -> str:
    """A unified diff, committed page → generated, cut to ``max_lines`` lines."""
    diff = list(difflib.unified_diff(current.splitlines(keepends=True),
                                     expected.splitlines(keepends=True),
                                     f"{page.path} (committed)", f"{page.path} (generated)",
                                     n=1))
    cut = len(diff) - max_lines
    return "".join(diff[:max_lines]) + (f"... {cut} more diff lines\n" if cut > 0 else "")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m entrena.cli.docs_reference [--check] [--root DIR]``.

    Returns:
        The exit code: 0; 1 with ``--check`` when a page is out of date; 2 when a page cannot
        be read or lacks its markers.
    """
    parser = argparse.ArgumentParser(
        prog="python -m entrena.cli.docs_reference",
        description="Regenerate the reference pages of docs/reference/ from the code.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 and print a diff when a page is stale")
    parser.add_argument("--root", type=Path, default=Path("."),
                        help="the repository root (default: the current folder)")
    args = parser.parse_args(argv)
    try:
        stale = stale_pages(args.root)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"error: {exc}; run this from the repository root or give --root\n")
        return 2
    for page, current, expected in stale:
        if args.check:
            sys.stderr.write(f"{page.path} is out of date with {page.source}\n"
                             f"{page_diff(page, current, expected)}")
        else:
            (args.root / page.path).write_text(expected, encoding="utf-8")
            sys.stderr.write(f"regenerated {page.path} from {page.source}\n")
    if not stale:
        sys.stderr.write(f"the {len(PAGES)} reference pages are up to date\n")
    elif args.check:
        sys.stderr.write(f"regenerate them with: {REGENERATE}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
