#!/usr/bin/env bash
# The test command of the README and of CI: set up, lint, type-check, then the whole test suite.
# pytest's exit code 5 (no test collected) is a failure here, never a silent pass.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check src tests scripts examples
# Types: mypy --strict over src/dlprof_lite ([tool.mypy]); any type error fails the run.
.venv/bin/mypy
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "test.sh: pytest collected no tests: failing" >&2
    exit 1
fi
exit "$rc"
