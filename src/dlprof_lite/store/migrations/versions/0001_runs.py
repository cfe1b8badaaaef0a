"""The first run store schema: runs and their iterations, layers, kernels and phases.

Written out here, not imported from ``store/schema.py``: a revision is frozen once released,
while the schema module follows the newest revision.

Revision ID: 0001
Revises:
Create Date: 2026-11-24
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_CHILDREN = ("run_phases", "run_kernels", "run_layers", "run_iterations")


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tag", sa.Text),
        sa.Column("run_group", sa.Text),
        sa.Column("repeat_index", sa.Integer),
        sa.Column("command", sa.JSON, nullable=False),
        *(sa.Column(name, sa.Text) for name in (
            "cwd", "script", "host", "gpus", "driver_version", "nsys_version",
            "torch_version", "cuda_version", "python_version", "tool_version", "git_commit",
        )),
        sa.Column("git_dirty", sa.Boolean),
        sa.Column("source", sa.Text),
        sa.Column("report_dir", sa.Text),
        sa.Column("steps", sa.Integer, nullable=False),
        sa.Column("step_mean_ns", sa.Float),
        sa.Column("step_median_ns", sa.Float),
        sa.Column("summary", sa.JSON, nullable=False),
        sa.Column("tables", sa.JSON, nullable=False),
    )  # fmt: skip
    for column in ("created_at", "tag", "run_group", "script"):
        op.create_index(f"ix_runs_{column}", "runs", [column])
    op.create_table(
        "run_iterations",
        *_keys(),
        sa.Column("iteration", sa.BigInteger),
        sa.Column("wall_ns", sa.Float),
        sa.Column("warmup", sa.Boolean),
        sa.Column("in_window", sa.Boolean),
        sa.Column("data", sa.JSON, nullable=False),
    )
    op.create_table(
        "run_layers",
        *_keys(),
        sa.Column("layer", sa.Text),
        *(sa.Column(name, sa.Float) for name in (
            "forward_gpu_ns", "backward_gpu_ns", "forward_wall_ns", "backward_wall_ns",
        )),
        sa.Column("data", sa.JSON, nullable=False),
    )  # fmt: skip
    op.create_table(
        "run_kernels",
        *_keys(),
        sa.Column("name", sa.Text),
        sa.Column("instances", sa.BigInteger),
        sa.Column("total_ns", sa.Float),
        sa.Column("data", sa.JSON, nullable=False),
    )
    op.create_table(
        "run_phases",
        *_keys("phase", sa.Text),
        sa.Column("gpu_ns", sa.Float),
        sa.Column("wall_ns", sa.Float),
        sa.Column("host_gap_ns", sa.Float),
    )


def _keys(
    second: str = "position", kind: type[sa.types.TypeEngine[Any]] = sa.Integer
) -> list[sa.Column[Any]]:
    return [
        sa.Column(
            "run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column(second, kind, primary_key=True),
    ]


def downgrade() -> None:
    for name in _CHILDREN:
        op.drop_table(name)
    op.drop_table("runs")
