"""Run the real ``nsys stats`` on an export and read its CSV: the independent oracle."""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path
from tempfile import mkdtemp

import pandas as pd


@cache
def nsys_report(nsys: str, export: Path, report: str) -> pd.DataFrame:
    """One ``nsys stats`` report as a DataFrame (empty when nsys skips it for lack of data)."""
    out = Path(mkdtemp(prefix="nsys-stats-")) / "r"
    proc = subprocess.run(
        [nsys, "stats", "-r", report, "--format", "csv", "-o", str(out), str(export)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"nsys stats -r {report} {export} failed: {proc.stderr[-500:]}")
    csv = out.parent / f"r_{report}.csv"
    if not csv.exists() or csv.stat().st_size == 0:
        return pd.DataFrame()
    return pd.read_csv(csv, keep_default_na=False, na_values=["None", ""])
