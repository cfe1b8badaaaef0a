"""Stage 4, report: the analyses that turn one Profile into one typed Report.

The model every later stage reads is :mod:`.model` (``Report``), :mod:`.summary_types`,
:mod:`.metrics` (the registry) and :mod:`.units`; :func:`.build.build_report` runs the
analyses (layers, steps, ranks, timeline, summary, advice) in order. Pure: no files.
"""
