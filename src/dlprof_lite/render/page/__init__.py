"""``report.html``: one self-contained page (charts, tables, timeline) of a Report."""
