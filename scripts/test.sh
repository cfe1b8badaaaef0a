#!/usr/bin/env bash
# The test command of the README and of CI: set up, lint, then the whole test suite.
# pytest's exit code 5 (no test collected) is a failure here, never a silent pass.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check src tests scripts examples
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "test.sh: pytest collected no tests: failing" >&2
    exit 1
fi
exit "$rc"
