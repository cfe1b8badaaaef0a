"""PyProf/DLProf NVTX payloads: range names that are a Python dict's text.

DLProf (and PyProf before it) pushes one range per op whose name is the ``repr`` of a dict:
``{'traceMarker': ['train.py:41', ...], 'funcStack': '/<module>/Net::_call_impl/
Net::forward/Conv2d::_call_impl(2)/Conv2d::forward/...'}`` around ``{'mod': 'Conv2d', 'op':
'conv2d', 'args': [...]}``. Ingest reads the layer from ``funcStack``; the console shows such a
range by that layer, never by its raw text. Payloads are read with regular expressions, never
evaluated. Read by ingest (layers) and report (display names); imports nothing heavy.
"""

from __future__ import annotations

import re

FUNCSTACK_RE = re.compile(r"""['"]funcStack['"]:\s*['"](?P<stack>[^'"]*)['"]""")
FRAME_RE = re.compile(r"^(?:(?P<cls>[^:]+)::)?(?P<fn>.+?)(?P<suffix>\(\d+\))?$")
_FIELD_RE = r"""['"]{key}['"]:\s*['"](?P<value>[^'"]*)['"]"""
_MOD_RE = re.compile(_FIELD_RE.format(key="mod"))
_OP_RE = re.compile(_FIELD_RE.format(key="op"))
_MARKER_RE = re.compile(r"""['"]traceMarker['"]:\s*\[\s*['"](?P<value>[^'"]*)['"]""")


def layer_from_funcstack(stack: str) -> tuple[str, str] | None:
    """DLProf funcStack -> (layer, type) of the innermost module ``forward``, else None.

    The layer is the chain of module ``forward`` frames, each named by its class and the
    ``(n)`` that DLProf appends to the n-th distinct call site of a frame
    (``Net/Conv2d(2)``); the type is the innermost class."""
    labels: list[str] = []
    since: list[tuple[str | None, str]] = []  # frames since the previous module forward
    for frame in stack.split("/"):
        m = FRAME_RE.match(frame)
        if m is None or frame == "<module>":
            continue
        cls, suffix = m["cls"], m["suffix"] or ""
        if cls is not None and m["fn"] == "forward":
            # The module's own call frame (Conv2d::_call_impl(2)) carries the call-site index.
            labels.append(cls + next((s for c, s in since if c == cls), suffix))
            since = []
        else:
            since.append((cls, suffix))
    if not labels:
        return None
    return "/".join(labels), labels[-1].split("(")[0]


def payload_layer(name: str) -> tuple[str, str] | None:
    """(layer, type) of a payload range with a ``funcStack``, else None."""
    stack = FUNCSTACK_RE.search(name) if name.startswith("{") else None
    return layer_from_funcstack(stack["stack"]) if stack else None


def display_name(name: str) -> str:
    """How a range name is shown: a payload by what it says in words (its layer, its module
    and op, or its source line); any other name as it is."""
    if not name.startswith("{"):
        return name
    layer = payload_layer(name)
    if layer is not None:
        return layer[0]
    mod, op = _MOD_RE.search(name), _OP_RE.search(name)
    if mod or op:
        return ".".join(m["value"] for m in (mod, op) if m)
    marker = _MARKER_RE.search(name)
    return f"@{marker['value']}" if marker else name
