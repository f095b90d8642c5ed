"""Remote data (fsspec URLs) downloaded once into a local cache.

``fetch_remote("https://host/train.csv", ...)`` returns local copies. Each URL has an index
entry (``downloads/<hash of the URL>.json``) naming its copy and the validator it was
downloaded under (size plus ETag or modification time, as the server reports them). A later
call asks the server for the validator only (``fs.info``: a HEAD request over HTTP) and
downloads again only when it changed; when the server cannot be reached, an existing copy is
used with a warning, so a second epoch or run never downloads the file again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from entrena.errors import DataError

__all__ = ["is_url", "has_magic", "fetch_remote", "default_cache_dir"]

log = logging.getLogger("entrena")


def default_cache_dir(configured: str | None = None) -> Path:
    """The cache root: ``configured``, else ``$ENTRENA_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/entrena``, else ``~/.cache/entrena``."""
    if configured:
        return Path(configured).expanduser()
    if os.environ.get("ENTRENA_CACHE_DIR"):
        return Path(os.environ["ENTRENA_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "entrena"


def is_url(spec: str) -> bool:
    """A URL with a scheme other than ``file://`` (``s3://``, ``https://``, ``memory://`` …)."""
    return "://" in spec and not spec.startswith("file://")


def has_magic(spec: str) -> bool:
    """Whether ``spec`` is a glob pattern (``*``, ``?`` or ``[``)."""
    return any(c in spec for c in "*?[")


def _validator(info: dict[str, Any]) -> str:
    """What identifies one version of a remote file: size + ETag (or modification time)."""
    parts = [str(info.get("size"))]
    for key in ("ETag", "etag", "md5Hash", "mtime", "LastModified", "last_modified", "updated",
                "created"):
        if info.get(key) is not None:
            parts.append(f"{key}={info[key]}")
    return "|".join(parts)


def _open_fs(url: str, key: str) -> tuple[Any, str, str]:
    import fsspec

    protocol = url.split("://", 1)[0]
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except ImportError as exc:
        raise DataError(f"{key}: reading {protocol}:// URLs needs a package that is not "
                        f"installed ({exc}); install it (s3fs for s3://, gcsfs for gs://, "
                        "adlfs for az://) or download the file and give its path") from None
    except ValueError as exc:
        raise DataError(f"{key}: {url}: unknown URL scheme {protocol!r} ({exc}); use a local "
                        "path or an fsspec URL such as https://, s3:// or gs://") from None
    return fs, path, protocol


def _http_probe(url: str) -> tuple[bool, str]:
    """``(missing, reason)`` for an HTTP(S) URL that fsspec could not stat: fsspec reports a
    refused connection and a 404 alike (``FileNotFoundError``); a plain ``HEAD`` tells them
    apart."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10):
            return False, "the server answered, but not to fsspec"
    except urllib.error.HTTPError as exc:
        return exc.code in (404, 410), f"HTTP {exc.code} {exc.reason}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return False, str(getattr(exc, "reason", exc))


def _not_found(key: str, url: str, reason: str = "") -> DataError:
    detail = f" ({reason})" if reason else ""
    return DataError(f"{key}: {url}: not found on the server{detail}; check the address")


def _unreachable(key: str, url: str, exc: BaseException | str) -> DataError:
    text = str(exc).strip()
    reason = text.splitlines()[0] if text else type(exc).__name__
    return DataError(f"{key}: cannot reach {url}: {reason}; check the address and the network, "
                     "or download the file and point the config at the local copy")


def fetch_remote(url: str, *, key: str, cache_dir: Path) -> list[tuple[str, Path]]:
    """Local copies of the file(s) at ``url`` (a glob pattern matches several).

    Args:
        url: An fsspec URL.
        key: The config key that named it (``data.train``), for messages.
        cache_dir: The cache root; copies go to ``cache_dir/downloads``.

    Returns:
        ``(url of one file, local path)`` pairs, sorted by URL.

    Raises:
        DataError: The scheme needs a package that is missing, nothing matches, or the server
            cannot be reached and no copy was downloaded before.
    """
    fs, path, protocol = _open_fs(url, key)
    downloads = cache_dir / "downloads"
    if has_magic(path):
        try:
            paths = sorted(fs.glob(path))
        except Exception as exc:  # noqa: BLE001 - network and protocol errors vary by backend
            raise _unreachable(key, url, exc) from None
        if not paths:
            raise DataError(f"{key}: no file matches {url}; check the pattern")
    else:
        paths = [path]
    out = []
    for one in paths:
        one_url = url if one == path else fs.unstrip_protocol(one)
        out.append((one_url, _fetch_one(fs, one, one_url, key=key, downloads=downloads)))
    return out


def _fetch_one(fs: Any, path: str, url: str, *, key: str, downloads: Path) -> Path:
    token = hashlib.sha256(url.encode("utf-8")).hexdigest()[:20]
    index_file = downloads / f"{token}.json"
    try:
        index = json.loads(index_file.read_text(encoding="utf-8"))
        copy = downloads / index["file"]
        if not copy.is_file():
            index = None
    except (OSError, ValueError, KeyError, TypeError):
        index = None
    try:
        info = fs.info(path)
    except Exception as exc:  # noqa: BLE001 - connection errors differ per backend
        if isinstance(exc, FileNotFoundError):
            missing, reason = (_http_probe(url) if url.startswith(("http://", "https://"))
                               else (True, ""))
            if missing:
                raise _not_found(key, url, reason) from None
            exc = ConnectionError(reason)
        if index is not None:
            log.warning("%s: cannot reach %s (%s); using the copy downloaded %s", key, url,
                        type(exc).__name__, time.strftime("%Y-%m-%d %H:%M",
                                                          time.localtime(index["time"])))
            return downloads / index["file"]
        raise _unreachable(key, url, exc) from None
    if info.get("type") == "directory":
        raise DataError(f"{key}: {url} is a folder; name a file or a glob pattern "
                        "(folder/*.csv)")
    validator = _validator(info)
    if index is not None and index.get("validator") == validator:
        return downloads / index["file"]
    name = f"{token}-{Path(path).name or 'data'}"
    downloads.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=downloads, prefix=f".{name}.", suffix=".tmp")
    os.close(fd)
    started = time.perf_counter()
    try:
        fs.get_file(path, tmp)
        os.replace(tmp, downloads / name)
    except FileNotFoundError:
        Path(tmp).unlink(missing_ok=True)
        raise _not_found(key, url) from None
    except Exception as exc:  # noqa: BLE001
        Path(tmp).unlink(missing_ok=True)
        raise _unreachable(key, url, exc) from None
    size = (downloads / name).stat().st_size
    log.info("downloaded %s (%d bytes) in %.1fs into %s", url, size,
             time.perf_counter() - started, downloads)
    record = {"url": url, "file": name, "validator": validator, "time": time.time()}
    tmp_index = index_file.with_name(f".{index_file.name}.{os.getpid()}.tmp")
    tmp_index.write_text(json.dumps(record), encoding="utf-8")
    os.replace(tmp_index, index_file)
    return downloads / name
