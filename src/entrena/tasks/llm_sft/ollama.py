"""``model.name: ollama:NAME[:TAG]``: the GGUF file of a model pulled into the user's Ollama
store, so the model a user runs is the model they adapt.

Ollama's store (``OLLAMA_MODELS``, else ``~/.ollama/models``; a Linux service install keeps
it in ``/usr/share/ollama/.ollama/models``) is content-addressed as an OCI registry is:
``manifests/<host>/<namespace>/<model>/<tag>`` is a JSON manifest whose ``layers`` each have a
``mediaType``, a ``digest`` (``sha256:<hex>``) and a ``size``, and each layer's bytes are
``blobs/sha256-<hex>`` (``sha256:<hex>`` in stores written before Ollama 0.1.33). The layer of
media type ``application/vnd.ollama.image.model`` is the GGUF file; ``…image.template`` (a Go
template), ``…image.params`` (JSON: ``stop`` …), ``…image.system`` and ``…image.license`` are
text. A name is ``[host/][namespace/]model[:tag]`` with ``registry.ollama.ai``, ``library``
and ``latest`` filled in (Ollama's ``types/model/name.go``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from entrena.errors import ConfigError

__all__ = ["OLLAMA_PREFIX", "OllamaModel", "OllamaName", "ollama_stores", "parse_ollama_name",
           "resolve_ollama"]

OLLAMA_PREFIX = "ollama:"
DEFAULT_HOST, DEFAULT_NAMESPACE, DEFAULT_TAG = "registry.ollama.ai", "library", "latest"
MODEL_MEDIA_TYPE = "application/vnd.ollama.image.model"
_TEXT_LAYERS = {"template": "application/vnd.ollama.image.template",
                "system": "application/vnd.ollama.image.system",
                "params": "application/vnd.ollama.image.params"}
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}(:[0-9]{1,5})?")
_DIGEST = re.compile(r"sha256[:-]([0-9a-f]{64})")
_TEXT_LIMIT_BYTES = 1 << 20
"""A text layer larger than this is not read (a template or params file is a few KB)."""


@dataclass(frozen=True)
class OllamaName:
    """A model name as Ollama reads it.

    Attributes:
        host: Registry host (``registry.ollama.ai``).
        namespace: ``library`` for Ollama's own models, else the user or organisation.
        model: The model (``qwen2.5``).
        tag: The tag (``0.5b``; ``latest`` when none is given).
    """

    host: str
    namespace: str
    model: str
    tag: str

    def __str__(self) -> str:
        """The shortest form Ollama shows (``qwen2.5:0.5b``, ``me/mine:v1``)."""
        prefix = "" if self.host == DEFAULT_HOST else f"{self.host}/"
        if prefix or self.namespace != DEFAULT_NAMESPACE:
            prefix += f"{self.namespace}/"
        return f"{prefix}{self.model}:{self.tag}"


@dataclass(frozen=True)
class OllamaModel:
    """A pulled model: its GGUF blob and what its manifest says.

    Attributes:
        name: The parsed name.
        store: The store folder it was found in.
        manifest: The manifest file.
        blob: The GGUF file (the model layer's blob).
        digest: The model layer's digest, ``sha256:<hex>``.
        size_bytes: The model layer's size as the manifest gives it.
        texts: The template, system and params layers' text, where present.
        other_layers: Media types of the layers not used (adapter, projector, license …).
    """

    name: OllamaName
    store: Path
    manifest: Path
    blob: Path
    digest: str
    size_bytes: int | None
    texts: dict[str, str] = field(default_factory=dict)
    other_layers: tuple[str, ...] = ()

    def record(self) -> dict[str, Any]:
        """Where the base model came from, for the run's metadata and card."""
        return {"kind": "ollama", "name": str(self.name), "digest": self.digest,
                "blob": str(self.blob), "store": str(self.store),
                "template": self.texts.get("template"), "params": self.texts.get("params")}


def parse_ollama_name(text: str, key: str = "model.name") -> OllamaName:
    """Parse ``[ollama:][host/][namespace/]model[:tag]``.

    Raises:
        ConfigError: Empty, more than three ``/`` parts, or a part with characters Ollama
            does not allow (letters, digits, ``_``, ``-`` and ``.``).
    """
    name = text.removeprefix(OLLAMA_PREFIX).strip()
    parts = name.split("/")
    model, _, tag = parts[-1].partition(":")
    parts = parts[:-1]
    host = parts[0] if len(parts) == 2 else DEFAULT_HOST
    namespace = parts[-1] if parts else DEFAULT_NAMESPACE
    tag = tag or DEFAULT_TAG
    if len(parts) > 2 or not all(_PART.fullmatch(p) for p in (namespace, model, tag)) \
            or not _HOST.fullmatch(host) or "." in namespace:
        raise ConfigError(f"{key} = {text!r} is not an Ollama model name; write "
                          f"ollama:NAME[:TAG] as `ollama list` shows it, e.g. ollama:qwen2.5:0.5b "
                          f"or ollama:NAMESPACE/NAME:TAG")
    return OllamaName(host, namespace, model, tag)


def ollama_stores() -> list[Path]:
    """Where Ollama keeps models: ``OLLAMA_MODELS`` when set (then nothing else, as Ollama
    itself), else the user's ``~/.ollama/models`` and, on Linux, that of the service user
    the install script creates, ``/usr/share/ollama/.ollama/models``."""
    configured = os.environ.get("OLLAMA_MODELS", "").strip()
    if configured:
        return [Path(configured).expanduser()]
    stores = [Path.home() / ".ollama" / "models"]
    if os.name == "posix":
        stores.append(Path("/usr/share/ollama/.ollama/models"))
    return stores


def _manifest_in(store: Path, name: OllamaName) -> Path | None:
    """The manifest of ``name`` in one store (Ollama matches names case-insensitively)."""
    exact = store / "manifests" / name.host / name.namespace / name.model / name.tag
    if exact.is_file():
        return exact
    folder = store / "manifests"
    for part in (name.host, name.namespace, name.model, name.tag):
        found = [p for p in folder.iterdir() if p.name.lower() == part.lower()] \
            if folder.is_dir() else []
        if not found:
            return None
        folder = found[0]
    return folder if folder.is_file() else None


def _blob(store: Path, digest: str) -> Path:
    """A layer's blob file (``sha256-<hex>``, or the older ``sha256:<hex>``)."""
    hex_digest = digest.split(":", 1)[-1].split("-", 1)[-1]
    modern = store / "blobs" / f"sha256-{hex_digest}"
    older = store / "blobs" / f"sha256:{hex_digest}"
    return older if not modern.exists() and older.exists() else modern


def resolve_ollama(text: str, key: str = "model.name") -> OllamaModel:
    """Find a pulled model's GGUF blob and read its manifest (no model data is read).

    Args:
        text: ``ollama:NAME[:TAG]``.
        key: The config key, for messages.

    Returns:
        The :class:`OllamaModel`.

    Raises:
        ConfigError: No store where Ollama keeps models (the folders looked in), the model
            is not pulled (``ollama pull NAME``), its manifest is unreadable or has no GGUF
            model layer, or the blob is missing.
    """
    name = parse_ollama_name(text, key)
    stores = ollama_stores()
    present = [s for s in stores if (s / "manifests").is_dir() or (s / "blobs").is_dir()]
    if not present:
        looked = " and ".join(str(s) for s in stores)
        raise ConfigError(f"{key} = {text!r}: no Ollama model store found (looked in {looked}"
                          f"); install Ollama and run `ollama pull {name}`, or set "
                          f"OLLAMA_MODELS to the folder that holds its manifests/ and blobs/")
    for store in present:
        manifest = _manifest_in(store, name)
        if manifest is not None:
            return _read_manifest(store, manifest, name, text, key)
    looked = " and ".join(str(s / "manifests") for s in present)
    raise ConfigError(f"{key} = {text!r}: Ollama has no model {str(name)!r} (looked in "
                      f"{looked}); run `ollama pull {name}` (or check the name with "
                      f"`ollama list`)")


def _read_manifest(store: Path, manifest: Path, name: OllamaName, text: str,
                   key: str) -> OllamaModel:
    """The model layer's blob and the text layers of one manifest."""
    where = f"{key} = {text!r}: the Ollama manifest {manifest}"
    try:
        layers = json.loads(manifest.read_text(encoding="utf-8"))["layers"]
        by_type = [(str(layer["mediaType"]), str(layer["digest"]), layer.get("size"))
                   for layer in layers]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ConfigError(f"{where} cannot be read ({type(error).__name__}: {error}); run "
                          f"`ollama pull {name}` again") from None
    models = [(d, s) for t, d, s in by_type if t == MODEL_MEDIA_TYPE]
    checked = _DIGEST.fullmatch(models[0][0]) if models else None
    if checked is None:
        kinds = ", ".join(sorted({t.rsplit(".", 1)[-1] for t, _, _ in by_type})) or "none"
        raise ConfigError(f"{where} has no GGUF model layer ({MODEL_MEDIA_TYPE}; its layers: "
                          f"{kinds}), so there is no GGUF file to adapt; use the model's Hugging "
                          f"Face folder as {key}")
    digest, size = models[0]
    blob = _blob(store, digest)
    if not blob.is_file():
        raise ConfigError(f"{where} names the blob {blob.name}, which is missing from "
                          f"{store / 'blobs'}; run `ollama pull {name}` again")
    texts = {}
    for label, media in _TEXT_LAYERS.items():
        for kind, layer_digest, _ in by_type:
            path = _blob(store, layer_digest)
            if kind == media and path.is_file() and path.stat().st_size <= _TEXT_LIMIT_BYTES:
                texts[label] = path.read_text(encoding="utf-8", errors="replace")
    others = tuple(t for t, _, _ in by_type
                   if t != MODEL_MEDIA_TYPE and t not in _TEXT_LAYERS.values())
    return OllamaModel(name=name, store=store, manifest=manifest, blob=blob,
                       digest="sha256:" + checked.group(1),
                       size_bytes=size if isinstance(size, int) else None, texts=texts,
                       other_layers=others)
