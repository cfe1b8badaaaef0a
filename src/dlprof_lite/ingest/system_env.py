"""The profiled system as nsys recorded it: host, OS, driver and CUDA driver versions.

Place in the pipeline: ingest (called by :mod:`.reader`). nsys writes one
``TARGET_INFO_SYSTEM_ENV`` row (``name``, ``value``) per property of the target system from
2021.3 on (the corpus's 2020.3 exports have no such table: every field is then None). Only
the rows named in :data:`SYSTEM_ENV_NAMES` are read, through bound parameters: the table
also holds ``DeviceEnvironment``, the profiled process's environment variables (tokens,
passwords), which must never reach a report.

Encodings seen in the corpus (2021.3-2026.2):

* ``NvDriverVersion``: dotted (``470.57.02``, ``580.95.05``) from 2023.2 on; before, the
  digits without dots (``5154304`` is 515.43.04, ``52512506`` is 525.125.06: a 3-digit
  major, a 2-digit patch, the minor between), which :func:`driver_version` puts back.
* ``CudaDriverVersion``: CUDA's integer ``1000 * major + 10 * minor`` (``12020`` is 12.2),
  as ``cudaDriverGetVersion`` returns it.
* ``Hostname`` is missing from some exports (2021.3-2021.5 captures); then None.
* Without a GPU (nsys 2022.4 on a VM) ``NvDriverVersion`` is ``0``: None here, while
  ``CudaDriverVersion`` is the installed ``libcuda``'s and is kept.
"""

from __future__ import annotations

import re
from pathlib import Path

from dlprof_lite.ingest.bad_input import driver_errors
from dlprof_lite.ingest.fetch import connect_readonly

SYSTEM_ENV_TABLE = "TARGET_INFO_SYSTEM_ENV"
# Property name in the table -> Meta field.
SYSTEM_ENV_NAMES = {
    "Hostname": "host",
    "OsDescription": "os",
    "NvDriverVersion": "driver_version",
    "CudaDriverVersion": "cuda_driver_version",
}
VALUE_CHARS = 200  # a longer value is not one nsys writes: cut, so a crafted file stays small
SYSTEM_ENV_QUERY = (
    f"SELECT name, substr(CAST(value AS TEXT), 1, {VALUE_CHARS}) FROM {SYSTEM_ENV_TABLE} "
    f"WHERE name IN ({', '.join('?' for _ in SYSTEM_ENV_NAMES)}) ORDER BY rowid"
)

_PACKED_DRIVER = re.compile(r"(\d{3})(\d{2,3})(\d{2})")


def driver_version(value: str) -> str | None:
    """``5154304`` -> ``515.43.04``; a dotted or unknown form as it is; ``0`` (no driver
    answered: nsys on a machine without a GPU writes it) is None."""
    if not value.strip("0."):
        return None
    packed = _PACKED_DRIVER.fullmatch(value)
    return ".".join(packed.groups()) if packed else value


def cuda_version(value: str) -> str:
    """``12020`` -> ``12.2`` (CUDA's 1000 * major + 10 * minor); another form as it is."""
    if not value.isdigit():
        return value
    number = int(value)
    return f"{number // 1000}.{number % 1000 // 10}"


def _decode(raw: bytes) -> str:
    return raw.decode(errors="replace")


def read_system_env(path: Path) -> tuple[dict[str, str], list[str]]:
    """The Meta fields found in ``path``'s system table (only those present and non-empty),
    and a warning when the table is there but could not be read (the analysis goes on: the
    system is context, not a measurement)."""
    try:
        conn = connect_readonly(path)
        try:
            conn.text_factory = _decode  # text that is not UTF-8: replacement characters
            rows = conn.execute(SYSTEM_ENV_QUERY, tuple(SYSTEM_ENV_NAMES)).fetchall()
        finally:
            conn.close()
    except driver_errors() as err:
        return {}, [f"{SYSTEM_ENV_TABLE} could not be read ({err}): host, OS and driver "
                    "versions are unknown"]  # fmt: skip
    found: dict[str, str] = {}
    for name, value in rows:
        field = SYSTEM_ENV_NAMES.get(str(name))
        text = str(value).strip() if value is not None else ""
        if field and text and field not in found:  # the first row of a name wins
            found[field] = text
    if "driver_version" in found:
        driver = driver_version(found.pop("driver_version"))
        found.update({"driver_version": driver} if driver else {})
    if "cuda_driver_version" in found:
        found["cuda_driver_version"] = cuda_version(found["cuda_driver_version"])
    return found, []
