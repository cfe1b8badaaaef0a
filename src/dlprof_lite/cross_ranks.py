"""One cross-rank view over several inputs: the multi-node recipe's merge.

A job on several nodes is profiled into one nsys report per node; ``dlprof-lite analyze
node*.nsys-rep`` analyses each (its all-ranks report and one report per rank, as
:mod:`dlprof_lite.ranks_run` does for one input) and, when two or more inputs hold ranks,
merges them here: the batch folder gets ``ranks_summary`` (every rank's summary row, naming
its folder inside its node's) and ``ranks`` (every node's ranks table, one row per (process,
device) timeline, the straggler found again across all ranks: ranks wait for the slowest
rank of the job, not of their node). Ranks are the global ``RANK`` each process recorded;
inputs whose ranks repeat are not one job: their rows are kept, with a warning and no
straggler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from dlprof_lite.report.summary_types import Scalar

RANKS_TABLE = "ranks"  # ranks.csv / .json: every node's ranks table


@dataclass(frozen=True)
class NodeRanks:
    """What one input's analysis hands back for the merge (picklable: a worker returns it).

    ``rank_rows``: its per-rank summary rows, ``report_dir`` relative to its report folder
    (``.``: a one-rank input's own report), ``rank`` the recorded rank; ``table``: its ranks
    table."""

    rank_rows: tuple[dict[str, Scalar], ...] = ()
    table: pd.DataFrame | None = None
    # its processes' collective calls on its own clock (report/collectives/calls.py), and its
    # report's window (the analysed steps' first start and last end) on that clock
    calls: pd.DataFrame | None = None
    window: tuple[int, int] | None = None


@dataclass(frozen=True)
class CrossRanks:
    """The merged view: rank summary rows, the ranks table, and what was not certain."""

    rows: tuple[dict[str, Scalar], ...]
    table: pd.DataFrame
    nodes: int
    warnings: tuple[str, ...] = field(default=())
    # the collectives matched across every input's ranks, on the first input's clock, and
    # each input's clock offset (report/collectives/clocks.py); empty without collectives
    collectives: pd.DataFrame | None = None
    clocks: pd.DataFrame | None = None


def merge(nodes: Sequence[tuple[Path, NodeRanks]]) -> CrossRanks | None:
    """The cross-rank view of ``(report folder, its ranks)`` per input; ``None`` unless two
    or more inputs hold ranks (one input's view is already in its own folder)."""
    import pandas as pd

    from dlprof_lite.report.ranks.table import straggler

    held = [(folder, node) for folder, node in nodes if node.rank_rows]
    if len(held) < 2:
        return None
    rows = tuple(
        {**row, "report_dir": str(folder / str(row["report_dir"]))}
        for folder, node in held
        for row in node.rank_rows
    )
    tables = [node.table for _, node in held if node.table is not None and len(node.table)]
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    warnings: list[str] = []
    collectives: pd.DataFrame | None = None
    clocks: pd.DataFrame | None = None
    if not table.empty:
        seen: dict[int, int] = {}  # rank -> inputs holding it
        for _, node in held:
            if node.table is not None:
                for rank in {int(r) for r in node.table["rank"].dropna()}:
                    seen[rank] = seen.get(rank, 0) + 1
        repeated = sorted(r for r, count in seen.items() if count > 1)
        if repeated:
            warnings.append(
                f"rank(s) {', '.join(map(str, repeated))} appear in several inputs: they are "
                "not the nodes of one job, so no straggler is named across them"
            )
            found = None
        else:
            collectives, clocks = _matched(held, table)
            found = straggler(table)
        table = table.assign(straggler=table["rank"] == (found if found is not None else -1))
        table = table.sort_values(["rank", "device_id"], kind="stable").reset_index(drop=True)
    return CrossRanks(rows, table, len(held), tuple(warnings), collectives, clocks)


def _matched(held: Sequence[tuple[Path, NodeRanks]],
             table: pd.DataFrame) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:  # fmt: skip
    """The inputs' collective calls on one clock, matched across all ranks; the waits per
    rank set into ``table`` (in place), so that the straggler is the rank the others wait for
    across the nodes. Nothing without calls on two inputs."""
    from dlprof_lite.report.collectives.clocks import align
    from dlprof_lite.report.collectives.instances import match, rank_waits

    called = [(folder.name, node.calls) for folder, node in held
              if node.calls is not None and len(node.calls)]  # fmt: skip
    if len(called) < 2:
        return None, None
    # calls found from NCCL kernels name their input's ranks as the group: across inputs
    # they are the job's (every rank runs a communicator's collectives in one order)
    called = [(name, _job_wide(calls)) for name, calls in called]
    calls, clocks = align(called)
    instances = match(calls)
    # the analysed steps: the window of the input that holds the lowest rank (the clock the
    # others were moved onto), an instance counting where its last call ends inside it
    first = min((node for _, node in held if node.calls is not None and len(node.calls)),
                key=lambda node: int(node.calls["rank"].min()))  # type: ignore[index]
    if first.window is not None and len(instances):
        ends = instances.groupby(["group", "seq"])["end_ns"].transform("max")
        inside = (ends > first.window[0]) & (ends <= first.window[1])
        instances = instances[inside.to_numpy(dtype=bool)].reset_index(drop=True)
    steps = int(table["steps"].median()) if table["steps"].notna().any() else 1
    waits = rank_waits(instances, steps)
    for col in ("step_coll_wait_ns", "step_waited_for_ns"):
        table[col] = table["rank"].map(waits[col]) if len(waits) else float("nan")
    return instances, clocks


def write(cross: CrossRanks, folder: Path, formats: Sequence[str]) -> None:
    """``ranks_summary`` and ``ranks`` tables in ``folder`` (the batch's staging folder)."""
    from dlprof_lite.ranks_run import ranks_summary_table
    from dlprof_lite.render import output as files
    from dlprof_lite.render.writers import Table

    out = [ranks_summary_table(cross.rows)]
    if not cross.table.empty:
        out.append(Table(RANKS_TABLE, cross.table))
    if cross.collectives is not None and len(cross.collectives):
        out.append(Table("collectives", cross.collectives))
    if cross.clocks is not None and len(cross.clocks):
        out.append(Table("clock_offsets", cross.clocks))
    files.write_tables(out, folder, files.summary_formats(formats))


def lines(cross: CrossRanks) -> list[str]:
    """The console's cross-node view: per rank its node folder, steps, median step, data
    time per step, and the straggler across all ranks."""
    from dlprof_lite.ranks_run import as_ms

    out = []
    for row in sorted(cross.rows, key=lambda r: (r.get("rank") is None, r.get("rank") or 0)):
        folder = Path(str(row["report_dir"]))
        node = folder.parent.name if folder.name.startswith(("rank", "pid")) else folder.name
        who = f"rank {row['rank']}" if row.get("rank") is not None else folder.name
        out.append(
            f"  {who} ({node}): {row.get('iterations_count') or 0} steps, median step "
            f"{as_ms(row.get('iterations_median_ns'))}, data "
            f"{as_ms(row.get('step_data_wall_ns'))}/step"
        )
    if cross.clocks is not None:
        for clock in cross.clocks.to_dict("records"):
            offset, error = float(clock["offset_ns"]), float(clock["error_ns"])
            if offset != offset:
                out.append(f"  clock of {clock['node']}: no collective shared with the first "
                           "input, left as it was")
            elif offset or error:
                out.append(f"  clock of {clock['node']}: {offset / 1e6:+.3f} ms ± "
                           f"{error / 1e3:.1f} µs from the first input's "
                           f"({clock['instances']} collectives)")
    if len(cross.table):
        hit = cross.table.loc[cross.table["straggler"].astype(bool), "rank"]
        if len(hit):
            waited = cross.table.loc[cross.table["straggler"].astype(bool),
                                     "step_waited_for_ns"] if "step_waited_for_ns" in cross.table \
                else None  # fmt: skip
            more = (f": the others wait {float(waited.iloc[0]) / 1e6:.2f} ms per step for it"
                    if waited is not None and waited.notna().any() else "")
            out.append(f"  straggler across the {cross.nodes} inputs: rank "
                       f"{int(hit.iloc[0])}{more}")
    return out


def _job_wide(calls: pd.DataFrame) -> pd.DataFrame:
    if "from_kernels" not in calls or not calls["from_kernels"].any():
        return calls
    found = calls["from_kernels"].astype(bool).to_numpy()
    stream = calls["group"].astype(str).str.partition("#")[2]
    job = calls["group"].where(~found, "job" + stream.where(stream == "", "#" + stream))
    return calls.assign(group=job)

