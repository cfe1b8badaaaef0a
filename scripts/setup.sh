#!/usr/bin/env bash
# Everything a fresh Debian machine needs to run and test dlprof-lite, idempotent:
# Nsight Systems (scripts/install_nsys.sh) and a virtual environment in .venv with the
# package, its extras, and the CPU build of PyTorch for the examples.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
# nvtx 0.2.12+ records no ranges under nsys 2022.4 (it asks nvtxDomainIsEnabled and
# nsys 2022.4 answers no), so the Debian nsys needs an older nvtx.
NVTX_SPEC=${NVTX_SPEC:-nvtx<=0.2.11}
# The CPU wheel of PyTorch; set TORCH_SPEC to install another build.
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}

bash scripts/install_nsys.sh
# torch.compile's default backend (Inductor) compiles C++ on the CPU: the compiled-model
# tests and users' compiled scripts need a C++ compiler.
if ! command -v g++ >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get install -y -qq --no-install-recommends g++ >/dev/null
fi

# The run store's tests start a real PostgreSQL server (Debian's package: initdb, pg_ctl).
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        postgresql >/dev/null
fi

# The HTML page tests open report.html in a real headless Chromium (Debian's package).
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        chromium >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    .venv/bin/python -m pip install -q "$TORCH_SPEC"
fi
# frameworks: transformers, Lightning and accelerate for tests/test_frameworks.py; torch is
# installed above, so pip keeps that (CPU) build and pulls no CUDA wheels.
# docs: MkDocs and its theme, for tests/test_docs.py's build of the documentation site.
.venv/bin/python -m pip install -q -e ".[dev,fast,dask,postgres,frameworks,docs]" "$NVTX_SPEC"
# An editable install leaves src/ uncompiled, and where PYTHONDONTWRITEBYTECODE is set (CI
# images, sandboxes) Python never caches it: every run compiled ~80 modules (0.2 s).
# Compiling here does what pip does for a regular install (py_compile writes regardless).
.venv/bin/python -m compileall -q src/dlprof_lite >/dev/null
echo "setup: ready ($(.venv/bin/dlprof-lite --version))"
