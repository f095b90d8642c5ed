"""A small renderer of the part of Go's ``text/template`` that Ollama's chat templates use,
so that a ``Modelfile``'s ``TEMPLATE`` can be checked in Python before it is written.

Supported, with Go's semantics (``text/template`` package documentation):

- text and actions ``{{ … }}``; ``{{-`` trims all white space (space, tab, CR, LF) before the
  action, ``-}}`` all white space after it; comments ``{{/* … */}}``;
- ``if`` / ``else if`` / ``else`` / ``end``, ``range PIPE`` and ``range $i, $x := PIPE`` (the
  dot is the element inside), ``with``; an empty value (false, 0, nil, "", empty list or map)
  is false;
- variables: ``$`` (the data), ``$x := …`` declares (its scope ends at the enclosing
  ``end``), ``$x = …`` assigns (Go 1.11), ``$x.Field``, ``$.Field``, ``.Field.Field``, ``.``;
- literals: "double-quoted" (Go escapes), `raw`, integers, ``true``, ``false``, ``nil``;
- functions ``and``, ``or`` (first false / true argument, short-circuit as Go 1.18),
  ``not``, ``eq`` (``eq a b c`` is a == b or a == c), ``ne``, ``lt``, ``le``, ``gt``,
  ``ge``, ``len``, ``index``, ``slice``, and parenthesised calls.

Ollama parses templates with ``missingkey=zero``: a missing key of the data is nil (its
``template/template.go``). Anything else (pipelines with ``|``, ``define``/``template``,
methods) raises :class:`GoTemplateError`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GoTemplateError", "render_go_template"]


class GoTemplateError(ValueError):
    """The template uses something outside the supported subset, or fails as Go would."""


_ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.S)
_TOKEN = re.compile(r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<raw>`[^`]*`)|(?P<decl>:=)|'
                    r'(?P<assign>=)|(?P<punct>[(),|])|(?P<var>\$[A-Za-z0-9_]*)'
                    r'(?P<varfields>(?:\.[A-Za-z_][A-Za-z0-9_]*)*)|'
                    r'(?P<field>(?:\.[A-Za-z_][A-Za-z0-9_]*)+|\.)|(?P<num>-?\d+)|'
                    r'(?P<ident>[A-Za-z_][A-Za-z0-9_]*))')
_WHITE = " \t\r\n"


@dataclass
class _Node:
    kind: str  # text, action, if, range, with
    text: str = ""
    tokens: list[tuple[str, str]] = field(default_factory=list)
    branches: list[tuple[list[tuple[str, str]], list[_Node]]] = field(default_factory=list)
    otherwise: list[_Node] | None = None


def _lex(source: str) -> list[tuple[str, Any]]:
    """Text pieces and actions, with the trim markers applied to the text."""
    items: list[tuple[str, Any]] = []
    position = 0
    for match in _ACTION.finditer(source):
        text = source[position:match.start()]
        if match.group(1):
            text = text.rstrip(_WHITE)
        items.append(("text", text))
        if match.group(3):
            items.append(("trim_next", None))
        body = match.group(2).strip()
        if not (body.startswith("/*") and body.endswith("*/")):
            items.append(("action", body))
        position = match.end()
    items.append(("text", source[position:]))
    out: list[tuple[str, Any]] = []
    trim = False
    for kind, value in items:
        if kind == "trim_next":
            trim = True
            continue
        if kind == "text" and trim:
            value = value.lstrip(_WHITE)
        if kind == "text":
            trim = False
        out.append((kind, value))
    return out


def _tokens(body: str) -> list[tuple[str, str]]:
    out, position = [], 0
    body = body.rstrip()
    while position < len(body):
        match = _TOKEN.match(body, position)
        if match is None or match.end() == position:
            raise GoTemplateError(f"cannot read {body[position:]!r} in {{{{ {body} }}}}")
        kind = match.lastgroup if match.lastgroup != "varfields" else "var"
        if match.group("var") is not None:
            out.append(("var", match.group("var") + (match.group("varfields") or "")))
        else:
            out.append((kind, match.group(kind)))
        position = match.end()
    return out


def _parse(items: list[tuple[str, Any]]) -> list[_Node]:
    stack: list[tuple[_Node | None, list[_Node]]] = [(None, [])]
    for kind, value in items:
        nodes = stack[-1][1]
        if kind == "text":
            if value:
                nodes.append(_Node("text", text=value))
            continue
        words = value.split(None, 1)
        head = words[0] if words else ""
        rest = words[1] if len(words) > 1 else ""
        if head in ("if", "range", "with"):
            node = _Node(head)
            node.branches.append((_tokens(rest), []))
            nodes.append(node)
            stack.append((node, node.branches[-1][1]))
        elif head == "else":
            node = stack[-1][0]
            if node is None:
                raise GoTemplateError("{{ else }} outside if/range/with")
            stack.pop()
            if rest.startswith("if "):
                node.branches.append((_tokens(rest[3:]), []))
                stack.append((node, node.branches[-1][1]))
            else:
                node.otherwise = []
                stack.append((node, node.otherwise))
        elif head == "end":
            if stack[-1][0] is None:
                raise GoTemplateError("{{ end }} without if/range/with")
            stack.pop()
        elif head in ("define", "template", "block", "break", "continue"):
            raise GoTemplateError(f"{{{{ {head} }}}} is outside the supported subset")
        else:
            nodes.append(_Node("action", tokens=_tokens(value)))
    if len(stack) != 1:
        raise GoTemplateError("unexpected end of template: an if/range/with has no {{ end }}")
    return stack[0][1]


def _truth(value: Any) -> bool:
    """Go's truth: false, 0, nil and empty strings, lists and maps are false."""
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, (int, float)):
        return value != 0
    if isinstance(value, (str, list, tuple, dict)):
        return len(value) > 0
    return True


def _field(value: Any, name: str) -> Any:
    if isinstance(value, dict):
        return value.get(name)  # missingkey=zero
    if value is None:
        raise GoTemplateError(f"nil pointer evaluating .{name}")
    if not hasattr(value, name):
        raise GoTemplateError(f"can't evaluate field {name} in {type(value).__name__}")
    return getattr(value, name)


def _fields(value: Any, chain: str) -> Any:
    for name in chain.strip(".").split(".") if chain.strip(".") else []:
        value = _field(value, name)
    return value


def _printed(value: Any) -> str:
    if value is None:
        return "<no value>"
    if value is True or value is False:
        return "true" if value else "false"
    return str(value)


class _Scope:
    def __init__(self, root: Any):
        self.frames: list[dict[str, Any]] = [{"$": root}]

    def get(self, name: str) -> Any:
        for frame in reversed(self.frames):
            if name in frame:
                return frame[name]
        raise GoTemplateError(f"undefined variable: {name}")

    def set(self, name: str, value: Any) -> None:
        for frame in reversed(self.frames):
            if name in frame:
                frame[name] = value
                return
        raise GoTemplateError(f"undefined variable: {name}")


_COMPARE = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
            "ge": lambda a, b: a >= b}


class _Evaluator:
    def __init__(self, scope: _Scope):
        self.scope = scope

    def pipeline(self, tokens: list[tuple[str, str]], dot: Any) -> Any:
        if any(k == "punct" and v == "|" for k, v in tokens):
            raise GoTemplateError("pipelines with | are outside the supported subset")
        value, rest = self.command(tokens, dot)
        if rest:
            raise GoTemplateError(f"unexpected {rest[0][1]!r}")
        return value

    def command(self, tokens: list[tuple[str, str]], dot: Any) -> tuple[Any, list]:
        """Evaluate one command (a function call or an operand) up to a ``)`` or the end."""
        args: list[Any] = []
        position = 0
        while position < len(tokens) and tokens[position] != ("punct", ")"):
            kind, text = tokens[position]
            if kind == "punct" and text == "(":
                value, rest = self.command(tokens[position + 1:], dot)
                if not rest or rest[0] != ("punct", ")"):
                    raise GoTemplateError("unclosed (")
                args.append(("value", value))
                position = len(tokens) - len(rest) + 1
                continue
            args.append((kind, text))
            position += 1
        rest = tokens[position:]
        if not args:
            raise GoTemplateError("empty command")
        kind, text = args[0]
        if kind == "ident" and text not in ("true", "false", "nil"):
            return self.call(text, args[1:], dot), rest
        if len(args) > 1:
            raise GoTemplateError(f"{text!r} is not a function")
        return self.operand(args[0], dot), rest

    def operand(self, arg: tuple[str, Any], dot: Any) -> Any:
        kind, text = arg
        if kind == "value":
            return text
        if kind == "str":
            return json.loads(text)  # Go's escapes, as far as Ollama's templates use them
        if kind == "raw":
            return text[1:-1]
        if kind == "num":
            return int(text)
        if kind == "ident":
            return {"true": True, "false": False, "nil": None}[text]
        if kind == "field":
            return dot if text == "." else _fields(dot, text)
        if kind == "var":
            name, _, chain = text.partition(".")
            return _fields(self.scope.get(name), chain)
        raise GoTemplateError(f"unexpected {text!r}")

    def call(self, name: str, raw: list[tuple[str, Any]], dot: Any) -> Any:
        if name in ("and", "or"):
            value = None
            for arg in raw:
                value = self.operand(arg, dot)
                if _truth(value) != (name == "and"):
                    return value
            return value
        args = [self.operand(a, dot) for a in raw]
        if name == "not":
            return not _truth(args[0])
        if name == "eq":
            return any(args[0] == other for other in args[1:])
        if name == "ne":
            return args[0] != args[1]
        if name in _COMPARE:
            return _COMPARE[name](args[0], args[1])
        if name == "len":
            return len(args[0] or ())
        if name == "index":
            value = args[0]
            for key in args[1:]:
                value = value[key]
            return value
        if name == "slice":
            items = args[0] if isinstance(args[0], str) else list(args[0])
            bounds = (args[1:] + [None, None])[:2] if len(args) > 1 else [None, None]
            return items[bounds[0]:bounds[1]]  # slice x 1 2 is x[1:2], slice x 1 is x[1:]
        raise GoTemplateError(f"function {name!r} is outside the supported subset")


def _run(nodes: list[_Node], dot: Any, evaluator: _Evaluator, out: list[str]) -> None:
    scope = evaluator.scope
    for node in nodes:
        if node.kind == "text":
            out.append(node.text)
        elif node.kind == "action":
            tokens = node.tokens
            if len(tokens) > 2 and tokens[0][0] == "var" and tokens[1][0] in ("decl", "assign"):
                value = evaluator.pipeline(tokens[2:], dot)
                if tokens[1][0] == "decl":
                    scope.frames[-1][tokens[0][1]] = value
                else:
                    scope.set(tokens[0][1], value)
            else:
                out.append(_printed(evaluator.pipeline(tokens, dot)))
        elif node.kind in ("if", "with"):
            for tokens, body in node.branches:
                scope.frames.append({})
                value = evaluator.pipeline(tokens, dot)
                if _truth(value):
                    _run(body, value if node.kind == "with" else dot, evaluator, out)
                    scope.frames.pop()
                    break
                scope.frames.pop()
            else:
                if node.otherwise is not None:
                    scope.frames.append({})
                    _run(node.otherwise, dot, evaluator, out)
                    scope.frames.pop()
        else:
            _range(node, dot, evaluator, out)


def _range(node: _Node, dot: Any, evaluator: _Evaluator, out: list[str]) -> None:
    tokens = node.branches[0][0]
    names: list[str] = []
    if any(k == "decl" for k, _ in tokens):
        split = next(i for i, (k, _) in enumerate(tokens) if k == "decl")
        names = [t for k, t in tokens[:split] if k == "var"]
        tokens = tokens[split + 1:]
    items = evaluator.pipeline(tokens, dot)
    pairs = list(items.items()) if isinstance(items, dict) else list(enumerate(items or []))
    scope = evaluator.scope
    for key, item in pairs:
        frame: dict[str, Any] = {}
        if len(names) == 1:
            frame[names[0]] = item
        elif len(names) == 2:
            frame[names[0]], frame[names[1]] = key, item
        scope.frames.append(frame)
        _run(node.branches[0][1], item, evaluator, out)
        scope.frames.pop()
    if not pairs and node.otherwise is not None:
        _run(node.otherwise, dot, evaluator, out)


def render_go_template(template: str, data: Any) -> str:
    """``template`` executed on ``data`` (dicts and objects with attributes) as Go's
    ``text/template`` with ``missingkey=zero`` would.

    Raises:
        GoTemplateError: Outside the supported subset (module docstring), or Go's own
            execution errors (an undefined variable, a field of nil).
    """
    nodes = _parse(_lex(template))
    out: list[str] = []
    _run(nodes, data, _Evaluator(_Scope(data)), out)
    return "".join(out)
