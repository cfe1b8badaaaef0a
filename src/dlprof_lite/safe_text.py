"""Text from a profile or the command line made safe to print on a terminal.

Kernel, layer, range and GPU names come from an export that may be hostile, and paths from
the command line. Printed raw, an ESC/CSI/OSC sequence in a name could retitle the terminal,
hide lines or forge a hyperlink, and a BEL rings it. :func:`printable` shows every control
character as a visible escape instead (``\\x1b``, ``\\u202e``), so the name is still readable
and nothing reaches the terminal as a command. Rich markup is a separate matter: the console
summary hands names to rich as ``Text`` objects, never as markup (render/console.py).

This module imports nothing heavy: the CLI's error line uses it before anything else loads.
"""

from __future__ import annotations

import re

# C0 controls (tab and newline included: a name must not forge a new line), DEL, C1 controls
# (0x9b is a one-byte CSI on some terminals), and the bidirectional overrides and isolates,
# which reorder what follows them on screen ("Trojan Source").
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(value: object) -> str:
    """``str(value)`` with every control character replaced by a visible escape."""
    text = str(value)
    return _CONTROL.sub(_visible, text) if _CONTROL.search(text) else text
