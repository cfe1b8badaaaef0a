"""Stage 5, render: a Report as files, console text and a page, and report folders read back.

It imports only the report's model (:mod:`dlprof_lite.report.model`, ``summary_types``,
``metrics``, ``units``), never an analysis. :mod:`.output` writes a report folder through
:mod:`.staging` (staged and renamed into place, locks, sweeping); :mod:`.reader` reads one
back; :mod:`.console` prints the summary; :mod:`.page` is ``report.html``; :mod:`.trace` and
:mod:`.graph` are ``trace.json`` and ``layers.dot``.
"""
