"""plotly.js packed once per plotly.js release and kept in the user's cache folder.

Place in the pipeline: report (rendering; render/page/plotly_bundle.py inlines the payload in every
page). Packing plotly.min.js (4.8 MB: gzip level 9, then base64) costs about 0.15 s, a fifth
of a small report, and its result depends only on plotly.js's bytes. So it is packed once and
written to the cache folder (``$XDG_CACHE_HOME/dlprof-lite``, else ``~/.cache/dlprof-lite``;
``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows); later processes read it back
and check it in a few milliseconds.

An entry is one file named after the SHA-256 of the plotly.js it packs; its first line holds
that digest again and the SHA-256 of the payload after it. An entry failing either check (cut
short, edited, a symlink, anything not ours) is ignored and replaced. Entries are written to a
temporary name and renamed into place, so no reader sees half of one; no fsync is needed, as
a file torn by a crash fails its check. A cache that cannot be read or written (a read-only
home) only costs the packing.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import importlib.util
import os
import uuid
from pathlib import Path

from dlprof_lite.user_dirs import user_dir

_MAGIC = "dlprof-lite-plotly-v1"
_MAX_ENTRY = 64 << 20  # bytes: far above any plotly.js (~2 MB packed); a bigger file is not ours


def package_data(name: str) -> Path:
    """A file of the installed ``plotly`` package's data folder, found without importing
    plotly (0.1 s and more with its figure classes)."""
    spec = importlib.util.find_spec("plotly")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    if not folders:
        raise ModuleNotFoundError("plotly is not installed (a dependency of dlprof-lite)")
    return Path(folders[0]) / "package_data" / name


def plotly_js() -> Path:
    """plotly.min.js, what ``plotly.offline.get_plotlyjs()`` reads."""
    return package_data("plotly.min.js")


def cache_dir() -> Path:
    """The per-user cache folder of dlprof-lite (see the module docstring). A relative
    ``XDG_CACHE_HOME`` is ignored, as the XDG specification says."""
    return user_dir("cache")


def payload() -> str:
    """The installed plotly.js packed, through the cache; packed here when no home folder
    can be found (a service account without one)."""
    try:
        folder = cache_dir()
    except (RuntimeError, KeyError):  # Path.home() without HOME or a passwd entry
        return pack(plotly_js().read_bytes())
    return cached_payload(plotly_js(), folder)


def pack(js: bytes) -> str:
    """plotly.js as the page carries it: gzip level 9 (no timestamp), then base64."""
    return base64.b64encode(gzip.compress(js, compresslevel=9, mtime=0)).decode("ascii")


def cached_payload(js_path: Path, folder: Path) -> str:
    """``pack`` of the file ``js_path``, from the entry in ``folder`` when a valid one is there,
    else packed now and written there for the next process."""
    js = js_path.read_bytes()
    key = hashlib.sha256(js).hexdigest()
    entry = folder / f"plotly-{key[:32]}.b64"
    found = _read(entry, key)
    if found is not None:
        return found
    payload = pack(js)
    _write(entry, key, payload)
    return payload


def _read(entry: Path, key: str) -> str | None:
    """The payload of a valid entry for ``key``; None when there is none (a cache miss)."""
    try:
        fd = os.open(entry, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(_MAX_ENTRY + 1)
    except OSError:
        return None
    header, _, payload = data.partition(b"\n")
    try:
        magic, entry_key, digest = header.decode("ascii").split(" ")
    except (UnicodeDecodeError, ValueError):
        return None
    valid = (
        len(data) <= _MAX_ENTRY
        and magic == _MAGIC
        and entry_key == key
        and hashlib.sha256(payload).hexdigest() == digest
    )
    return payload.decode("ascii") if valid else None


def _write(entry: Path, key: str, payload: str) -> None:
    """Write the entry through a temporary file in its folder; any failure leaves no file."""
    body = payload.encode("ascii")
    header = f"{_MAGIC} {key} {hashlib.sha256(body).hexdigest()}\n".encode("ascii")
    tmp = entry.with_name(f".{entry.name}.{uuid.uuid4().hex[:10]}.tmp")
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "xb") as fh:
            fh.write(header + body)
        os.replace(tmp, entry)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
