"""What a report folder and a comparison folder may hold, by ``--formats`` word.

``csv`` and ``json`` are the tables (one file per table and format); ``html`` is the page
beside them (``report.html``, ``compare.html``). ``layers.dot`` and ``trace.json`` are always
written with a report.
"""

from __future__ import annotations

FORMATS = ("csv", "json", "html")
TABLE_FORMATS = FORMATS[:2]
