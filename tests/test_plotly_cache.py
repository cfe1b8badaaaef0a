"""The packed plotly.js cached on disk (render/page/plotly_cache.py): the payload is the one the
page always carried, read back instead of packed again, and a bad entry is never used.

Oracles: ``plotly.offline.get_plotlyjs()`` (what the payload must decompress to), and
``gzip.compress`` made to fail (a read from the cache never packs).
"""

from __future__ import annotations

import base64
import gzip
from collections.abc import Callable
from pathlib import Path

import pytest

from dlprof_lite import user_dirs
from dlprof_lite.render.page import plotly_cache
from dlprof_lite.render.page.plotly_cache import cache_dir, cached_payload, pack, plotly_js


def unpacked(payload: str) -> bytes:
    return gzip.decompress(base64.b64decode(payload))


def no_packing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("packed again instead of read from the cache")

    monkeypatch.setattr(plotly_cache.gzip, "compress", refuse)


def entry(folder: Path) -> Path:
    (found,) = folder.iterdir()
    return found


def test_the_payload_is_plotly_js_and_is_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from plotly.offline import get_plotlyjs

    first = cached_payload(plotly_js(), tmp_path)
    assert unpacked(first) == get_plotlyjs().encode("utf-8")
    assert entry(tmp_path).name.startswith("plotly-")
    no_packing(monkeypatch)
    assert cached_payload(plotly_js(), tmp_path) == first


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[: len(b) // 2],  # cut short
        lambda b: b[:-10] + b"AAAAAAAAAA",  # payload edited, header intact
        lambda b: b"",  # empty
        lambda b: b"not a cache entry at all\n" + b[200:],  # someone else's file
        lambda b: b.replace(b"dlprof-lite-plotly-v1", b"dlprof-lite-plotly-v9", 1),
    ],
    ids=["truncated", "edited", "empty", "foreign", "other-version"],
)
def test_a_bad_entry_is_ignored_and_rewritten(
    tmp_path: Path, damage: Callable[[bytes], bytes]
) -> None:
    js = tmp_path / "plotly.min.js"
    js.write_bytes(b"var Plotly = {};" * 1000)
    folder = tmp_path / "cache"
    good = cached_payload(js, folder)
    path = entry(folder)
    path.write_bytes(damage(path.read_bytes()))
    assert cached_payload(js, folder) == good == pack(js.read_bytes())
    assert path.read_bytes().endswith(good.encode("ascii"))  # rewritten whole


def test_a_symlinked_entry_is_never_followed(tmp_path: Path) -> None:
    js = tmp_path / "plotly.min.js"
    js.write_bytes(b"var Plotly = 1;")
    folder = tmp_path / "cache"
    good = cached_payload(js, folder)
    path = entry(folder)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(elsewhere)
    assert cached_payload(js, folder) == good
    assert not path.is_symlink()  # replaced by a file of ours
    assert elsewhere.read_bytes().endswith(good.encode("ascii"))  # the target untouched


def test_another_plotly_js_gets_its_own_entry(tmp_path: Path) -> None:
    one, two = tmp_path / "one.js", tmp_path / "two.js"
    one.write_bytes(b"var Plotly = 1;")
    two.write_bytes(b"var Plotly = 2;")
    folder = tmp_path / "cache"
    assert unpacked(cached_payload(one, folder)) == b"var Plotly = 1;"
    assert unpacked(cached_payload(two, folder)) == b"var Plotly = 2;"
    assert len(list(folder.iterdir())) == 2


def test_an_unwritable_cache_only_costs_the_packing(tmp_path: Path) -> None:
    js = tmp_path / "plotly.min.js"
    js.write_bytes(b"var Plotly = 1;")
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder should be")
    assert unpacked(cached_payload(js, blocked / "cache")) == b"var Plotly = 1;"
    assert blocked.read_text().startswith("a file")


def test_the_cache_folder_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(user_dirs.sys, "platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "dlprof-lite"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "dlprof-lite"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # not absolute: ignored
    assert cache_dir() == Path.home() / ".cache" / "dlprof-lite"


def test_no_home_folder_only_costs_the_packing(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(user_dirs.sys, "platform", "linux")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setattr(plotly_cache.Path, "home", no_home)
    assert plotly_cache.payload() == pack(plotly_js().read_bytes())
