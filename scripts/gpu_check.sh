#!/usr/bin/env bash
# The GPU check (docs/gpu-validation.md): dlprof-lite's figures against CUDA events, Kineto
# and ncu on a real GPU, in one prepared run.
#
#   bash scripts/gpu_check.sh prepare          # here: fetch what the GPU machine lacks into .gpu/
#   bash scripts/gpu_check.sh run [--dry-run]  # there: probe, profile, oracles, bundle to $OUT
#   python scripts/gpu_check/compare.py PARTS_DIR  # here again: import, analyse, compare
#
# prepare downloads Debian's nsight-systems-target 2022.4 (the nsys target binary, whose
# .qdstrm files this machine's QdstrmImporter reads) and the nvtx 0.2.11 wheel for Python 3.12
# (nsys 2022.4 records no ranges from newer nvtx releases; the GPU machine has none). The
# device tool carries .gpu/ (git-ignored) with the working tree: carry=[".gpu"].
# run needs nothing but python3 with torch (transformers for the GPT) and dpkg; it writes
# results.tgz.NN and summary.txt to $OUT (default $GPU_CHECK_WORK/out, /tmp/gpu_check/out).
set -euo pipefail
cd "$(dirname "$0")/.."
CARRIED=.gpu
NVTX_WHEEL="nvtx==0.2.11"

prepare() {
    mkdir -p "$CARRIED"
    (cd "$CARRIED" && apt-get download nsight-systems-target)
    local python=python3
    [ -x .venv/bin/python ] && python=.venv/bin/python  # the project's venv has pip
    "$python" -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$CARRIED" "$NVTX_WHEEL"
    ls -la "$CARRIED"
}

run() {
    local work="${GPU_CHECK_WORK:-/tmp/gpu_check}" python="${PYTHON:-python3}"
    # a dry run here uses the project's venv (torch, transformers) unless PYTHON says otherwise
    if [[ -z "${PYTHON:-}" && " $* " == *" --dry-run "* && -x .venv/bin/python ]]; then
        python=.venv/bin/python
    fi
    mkdir -p "$work"
    local nsys="${NSYS_TARGET:-}" deb
    if [ -z "$nsys" ]; then  # the carried target binary (NSYS_TARGET: another, e.g. a dry run's)
        deb=$(ls "$CARRIED"/nsight-systems-target_*.deb 2>/dev/null | head -1 || true)
        [ -n "$deb" ] || { echo "gpu_check: no $CARRIED/nsight-systems-target_*.deb: run prepare here and carry $CARRIED" >&2; exit 2; }
        rm -rf "$work/nsys" && mkdir -p "$work/nsys" && dpkg -x "$deb" "$work/nsys"
        nsys="$work/nsys/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys"
    fi
    local site="$work/site"
    if [[ " $* " != *" --dry-run "* ]]; then
        "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
            --upgrade --target "$site" "$CARRIED"/nvtx-*.whl
    fi
    export PYTHONPATH="$site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
    "$python" scripts/gpu_check/device.py \
        --nsys "$nsys" \
        --out "${OUT:-$work/out}" --work "$work/work" "$@"
}

case "${1:-}" in
    prepare) prepare ;;
    run) shift; run "$@" ;;
    *) echo "usage: bash scripts/gpu_check.sh prepare | run [--dry-run] [--budget S]" >&2; exit 2 ;;
esac
