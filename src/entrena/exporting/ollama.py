"""Ollama's side of a GGUF bundle: how Ollama turns a chat into a prompt with a Modelfile's
``TEMPLATE`` (to check the Modelfile before it is written), and ``ollama create``.

Ollama's rules for a chat request (its ``server/routes.go`` ``ChatHandler`` and
``template/template.go`` ``Execute`` and ``collate``):

1. When the request's first message is not a system message and the Modelfile has a
   ``SYSTEM``, a system message with that text is put first.
2. Consecutive messages of one role (tool messages apart) are merged, joined by a blank line
   (``"\\n\\n"``); ``.System`` is every system message's content joined the same way.
3. A template that names ``.Messages`` is executed once with ``.System``, ``.Messages``
   (each with ``.Role`` and ``.Content``), ``.Tools`` and an empty ``.Response``, parsed
   with ``missingkey=zero``.
4. The runtime tokenizes the text with special tokens parsed and adds a BOS token when the
   GGUF file's ``tokenizer.ggml.add_bos_token`` is true.
"""

from __future__ import annotations

import logging
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from entrena.errors import ConfigError

__all__ = ["OLLAMA_NAME", "add_bundle_to_ollama", "check_ollama_name", "collate",
           "create_in_ollama", "gguf_adds_bos", "ollama_prompt"]

log = logging.getLogger("entrena")

OLLAMA_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*){0,2}"
                         r"(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?")
"""A model name ``ollama create`` takes: ``[host/][namespace/]model[:tag]`` of letters,
digits, ``.``, ``_`` and ``-`` (Ollama's ``types/model/name.go``)."""
CREATE_TIMEOUT_S = 600.0
"""How long ``ollama create`` may take (it copies the GGUF file into Ollama's store)."""


@dataclass
class Message:
    """A chat message as Ollama's templates see it (``api.Message``)."""

    Role: str
    Content: str
    Thinking: str = ""
    Images: Any = None
    ToolCalls: Any = None
    ToolName: str = ""


def collate(messages: list[dict[str, str]]) -> tuple[str, list[Message]]:
    """``(.System, .Messages)`` of a chat (rule 2 of the module docstring)."""
    system = [m["content"] for m in messages if m["role"] == "system"]
    out: list[Message] = []
    for m in messages:
        if out and out[-1].Role == m["role"] and m["role"] != "tool":
            out[-1].Content += "\n\n" + m["content"]
        else:
            out.append(Message(m["role"], m["content"]))
    return "\n\n".join(system), out


def ollama_prompt(template: str, messages: list[dict[str, str]], *,
                  system: str | None = None) -> str:
    """The prompt text Ollama renders for ``messages`` (rules 1–3 of the module docstring).

    Args:
        template: The Modelfile's ``TEMPLATE`` (one that names ``.Messages``).
        messages: ``{"role", "content"}`` dicts.
        system: The Modelfile's ``SYSTEM`` (``None``: none).

    Raises:
        GoTemplateError: The template uses Go-template features outside
            :mod:`entrena.exporting.gotemplate`'s subset, or does not name ``.Messages``.
    """
    from entrena.exporting.gotemplate import GoTemplateError, render_go_template

    if ".Messages" not in template:
        raise GoTemplateError("only templates over .Messages are mirrored")
    if system and (not messages or messages[0]["role"] != "system"):
        messages = [{"role": "system", "content": system}, *messages]
    joined, collated = collate(messages)
    return render_go_template(template, {"System": joined, "Messages": collated,
                                         "Tools": None, "Response": "", "Think": False,
                                         "IsThinkSet": False})


def check_ollama_name(name: str) -> str:
    """``name`` when ``ollama create`` takes it.

    Raises:
        ConfigError: It does not (the message gives the form).
    """
    if not OLLAMA_NAME.fullmatch(name or ""):
        raise ConfigError(f"--ollama {name!r}: not a model name Ollama takes; use "
                          f"[namespace/]model[:tag] of letters, digits, '.', '_' and '-', "
                          f"e.g. --ollama my-model:q8_0")
    return name


def create_in_ollama(bundle: Path, name: str, *, timeout_s: float = CREATE_TIMEOUT_S
                     ) -> dict[str, Any]:
    """Run ``ollama create NAME -f Modelfile`` in ``bundle`` when an ``ollama`` binary is on
    ``PATH``; say so (one log line with the command to run later) when it is not.

    A failed ``ollama create`` (no server running, say) is a warning, not an error: the
    bundle is complete and the command can be run again.

    Returns:
        ``export.json``'s ``ollama`` entries: ``name``, ``command`` (to run in the bundle),
        ``created`` and, when it ran, ``returncode`` and ``output`` (its last lines), else
        ``reason``.
    """
    command = ["ollama", "create", name, "-f", "Modelfile"]
    shown = f"cd {shlex.quote(str(bundle))} && {shlex.join(command)}"
    outcome: dict[str, Any] = {"name": name, "command": shown, "created": False}
    binary = shutil.which("ollama")
    if binary is None:
        outcome["reason"] = "no ollama binary on PATH"
        log.warning("ollama: no ollama binary on PATH; to add the model to Ollama later, "
                    "run: %s", shown)
        return outcome
    try:
        done = subprocess.run([binary, *command[1:]], cwd=bundle, capture_output=True,
                              text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        outcome["reason"] = f"{type(exc).__name__}: {exc}"
        log.warning("ollama: %s failed (%s); run it again: %s", shlex.join(command),
                    outcome["reason"], shown)
        return outcome
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
    outcome.update({"created": done.returncode == 0, "returncode": done.returncode,
                    "output": tail})
    if done.returncode == 0:
        log.info("ollama: created %s (try: ollama run %s)", name, name)
    else:
        log.warning("ollama: %s exited %d (%s); run it again: %s", shlex.join(command),
                    done.returncode, tail.splitlines()[-1] if tail else "no output", shown)
    return outcome


def gguf_adds_bos(path: Path) -> bool:
    """Whether the runtime adds a BOS token to prompts of this GGUF file (its
    ``tokenizer.ggml.add_bos_token``; rule 4 of the module docstring)."""
    from entrena.exporting.gguf_reader import read_gguf_header

    field = read_gguf_header(path).fields.get("tokenizer.ggml.add_bos_token")
    return bool(field is not None and field.value)


def add_bundle_to_ollama(bundle: Path, name: str, manifest: dict[str, Any]) -> dict[str, Any]:
    """``entrena export … --ollama NAME`` once the bundle is finished:
    :func:`create_in_ollama` (not when the parity check failed), its outcome merged into
    ``manifest["ollama"]`` and the bundle's ``export.json`` written again.

    Returns:
        ``manifest`` (changed in place).
    """
    from entrena.core.files import dumps_strict
    from entrena.exporting.bundle import MANIFEST_FILE

    if manifest.get("parity", {}).get("passed", True):
        outcome = create_in_ollama(bundle, name)
    else:
        outcome = {"name": name, "created": False, "reason": "the parity check failed",
                   "command": f"cd {shlex.quote(str(bundle))} && ollama create "
                              f"{shlex.quote(name)} -f Modelfile"}
        log.warning("ollama: %s not created: the parity check failed", name)
    manifest["ollama"] = {**(manifest.get("ollama") or {}), **outcome}
    (bundle / MANIFEST_FILE).write_text(dumps_strict(manifest, indent=2) + "\n",
                                        encoding="utf-8")
    return manifest
