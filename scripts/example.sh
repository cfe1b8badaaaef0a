#!/usr/bin/env bash
# Set up, then profile the bundled LeNet example under nsys and write its report to
# lenet-report/ (replaced on each run): docs/getting-started.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/dlprof-lite -o lenet-report --force examples/lenet.py --steps 20
