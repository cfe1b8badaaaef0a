"""``dlprof-lite whatif REPORT --scale KIND=WHAT:FACTOR ...``: what would the step take if
some work took longer or shorter? The steps' dependency graph replayed (docs/critical-path.md).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from dlprof_lite.rules.critical import SCALE_KINDS
from dlprof_lite.rules.names import PROG
from dlprof_lite.safe_text import printable


def build_whatif_parser() -> argparse.ArgumentParser:
    kinds = "; ".join(f"{k}: {d}" for k, d in SCALE_KINDS.items())
    parser = argparse.ArgumentParser(
        prog=f"{PROG} whatif",
        description="Predict the steady step time with some work scaled: the analysed steps' "
        "dependency graph replayed with the same edges (a report folder's profile is read "
        "again).",
    )
    parser.add_argument("target", type=Path, metavar="REPORT",
                        help="a report folder, or an nsys export (.sqlite, .nsys-rep)")  # fmt: skip
    parser.add_argument("--scale", action="append", default=[], metavar="KIND=WHAT:FACTOR",
                        required=True,
                        help=f"scale some work's duration by FACTOR (0 removes it, 0.5 halves "
                        f"it); repeat to combine. {kinds}")  # fmt: skip
    parser.add_argument("--key-range", metavar="NAME",
                        help="an export's NVTX range that delimits steps (a folder's own)")
    parser.add_argument("--iter-start", type=int, metavar="N", help="an export's first step")
    parser.add_argument("--iter-stop", type=int, metavar="N",
                        help="an export's step after the last")
    parser.add_argument("--nsys", metavar="PATH", help="the nsys that exports an .nsys-rep")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    return parser


def cmd_whatif(args: argparse.Namespace) -> int:
    from dlprof_lite.whatif import predict_from

    found = predict_from(args.target, args.scale, key_range=args.key_range,
                         iter_start=args.iter_start, iter_stop=args.iter_stop, nsys=args.nsys)
    for line in prediction_lines(found, printable(str(args.target))):
        print(line)
    return 0


def prediction_lines(found: object, target: str) -> list[str]:
    from dlprof_lite.report.critical.prediction import Prediction

    assert isinstance(found, Prediction)
    steps = found.observed.size
    lines = [f"what-if on {target}: {steps} analysed step{'s' if steps != 1 else ''}"]
    for scale, count in zip(found.scales, found.selected, strict=True):
        lines.append(f"  scaled {scale}: {count:,} pieces of work")
    med, p10, p90 = found.observed_stats
    lines.append(f"  step time, observed:  median {_ms(med)} (p10 {_ms(p10)}, p90 {_ms(p90)})")
    med, p10, p90 = found.predicted_stats
    change = found.change_pct
    sign = f"{change:+.1f} %" if math.isfinite(change) else "n/a"
    lines.append(f"  step time, predicted: median {_ms(med)} (p10 {_ms(p10)}, p90 {_ms(p90)})"
                 f"  {sign}")  # fmt: skip
    lines += [f"  note: {n}" for n in found.notes]
    return lines


def _ms(ns: float) -> str:
    return "n/a" if not math.isfinite(ns) else f"{ns / 1e6:,.3f} ms"
