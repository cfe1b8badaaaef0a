"""Numbered range names that are one thing: ``iteration 17``, ``aten::to, seq = 47575``.

Place in the pipeline: rules (ingest applies it to the ranges' paths, ingest/templates.py).
Scripts name each step's range by its number (``iteration 17``, ``step_3``) and PyTorch's
``emit_nvtx`` puts per-call counters in every op's name (``aten::addmm, seq = 47575, op_id =
999172``): a table keyed by such names grows with the run, one row per step or call. Other
numbers name distinct things and must stay apart: module paths (``layer1.0.conv1``,
``blocks.3``), shapes and code lines in payloads.

**The rule.** A name's *template* replaces each run of digits by ``#``. Ranges whose names share
a template, a domain, a depth and their parent's template are *siblings*; they are counted under
their template when, in every process, each of their names is used by one range only, on every
thread the names' numbers (the digit runs, compared as a tuple of integers) grow with the
ranges' start times, and on one thread at least two of them follow each other: a counter, which
a module index or a shape is not (a module range repeats every step; shapes do not grow with
time; ranges numbered by their thread count nothing). Ranges of dlprof-lite's own domain never
are (their numbers are module paths and bucket ids), nor PyProf/DLProf payloads (a dict's text,
rules/payloads.py: their numbers are shapes and source lines, which may grow with time in a
model's constructor). Per-step detail stays in the iterations and timeline tables; ``name``
keeps each range's own text.

A profile of a single step whose foreign module ranges are numbered in call order (``blocks.0``
… ``blocks.11``, once each) reads as a counter: profile two steps.
"""

from __future__ import annotations

from dlprof_lite.rules.steps import DIGITS_RE, NUMBER

MIN_SIBLINGS = 2  # distinct names that make a counter (one name is just a name)


def may_count(name: str) -> bool:
    """Whether ``name`` may be a counter's: it has a digit and is no payload (a dict's text)."""
    return not name.startswith("{") and any(ch.isdigit() for ch in name)


def template(name: str) -> str:
    """``name`` with each run of digits replaced by ``#``."""
    return DIGITS_RE.sub(NUMBER, name)


def counter_key(name: str) -> tuple[int, ...]:
    """The numbers of ``name`` in order, by which siblings' names must grow."""
    return tuple(int(d) for d in DIGITS_RE.findall(name))
