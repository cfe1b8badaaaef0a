"""Which NVTX range names name a training step, and which name one op call.

Read by ingest (finding the key range, :mod:`dlprof_lite.ingest.key_ranges`) and by report
(the ``--key-range`` regex the summary suggests). Pure ``re`` on names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Words that name a training step in a range name (compared lower-case, whole words;
# camelCase and snake_case are split, so ``ProfilerStep`` and ``train_step`` count).
STEP_WORDS = frozenset({"iter", "iteration", "step", "batch"})
NUMBER = "#"  # what each number of a numbered name becomes in its key

WORD_RE = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
DIGITS_RE = re.compile(r"\d+")
# A cheap pre-filter: names that may be numbered steps (step_key decides).
MAYBE_STEP_RE = re.compile(r"(?is)(?:iter|step|batch).*\d|\d.*(?:iter|step|batch)")
# Names that mark one op call, never a training step: PyProf/DLProf payloads ("{'mod': ...}"),
# emit_nvtx op and backward-node ranges ("aten::addmm, seq = 8", "autograd::engine::..."),
# our module ranges ("fwd:conv1:Conv2d", "rec:...").
OP_MARKER_RE = re.compile(
    r"^\{|^(?:aten|autograd|torch|c10d)::|, (?:stashed )?seq ?=|, op_id ?=|^(?:fwd|bwd|rec):"
)


def step_key(name: str) -> str | None:
    """``name`` with each number written ``#`` when it names a numbered step, else None."""
    if not DIGITS_RE.search(name) or OP_MARKER_RE.search(name):
        return None
    words = {w.lower() for w in WORD_RE.findall(name)}
    return DIGITS_RE.sub(NUMBER, name) if words & STEP_WORDS else None


def key_regex(names: Iterable[object], key: str) -> str:
    """A ``--key-range`` regex matching the names of numbered key ``key`` (from an example
    among ``names``: a ``#`` in the key may be a literal one, as in ``Step#12`` ->
    ``Step##``); a name's own anchored regex when no name has that key."""
    for name in names:
        if isinstance(name, str) and step_key(name) == key:
            parts = DIGITS_RE.split(name)
            return "^" + r"\d+".join(re.escape(p) for p in parts) + "$"
    return "^" + re.escape(key) + "$"
