"""MkDocs hooks of the documentation site (mkdocs.yml ``hooks:``).

The docstrings cross-reference in Sphinx's roles (``:class:`Report```, ``:func:`install```);
mkdocstrings renders them as Markdown, where the role stays as text in front of the code
span. The rendered page keeps the code span and drops the role.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):(?=<code>)")


def on_page_content(html: str, **_: Any) -> str:
    """The page's HTML without Sphinx role prefixes before code spans."""
    return _ROLE.sub("", html)
