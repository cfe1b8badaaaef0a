#!/usr/bin/env bash
# The GPU check (docs/gpu-validation.md): dlprof-lite's figures against CUDA events, Kineto
# and ncu on a real GPU, in one prepared run.
#
#   bash scripts/gpu_check.sh prepare          # here: fetch what the GPU machine lacks into .gpu/
#   bash scripts/gpu_check.sh host             # here: the matching importer into .gpu-host/
#   bash scripts/gpu_check.sh run [--dry-run]  # there: probe, profile, oracles, bundle to $OUT
#   python scripts/gpu_check/compare.py PARTS_DIR --nsys "$(bash scripts/gpu_check.sh host)"
#
# The GPU machine runs CUDA 13; Nsight Systems 2022.4 (Debian stable) traces it but cannot
# import its trace (it has no names for CUDA 12's newer calls). Debian experimental packages
# 2024.2.3, which knows them: prepare downloads its nsight-systems-target (the nsys target
# binary, 42 MB) and the nvtx 0.2.11 wheel for Python 3.12 (the GPU machine has none) into
# .gpu/, which the device tool carries with the working tree: carry=[".gpu"]. host downloads
# the same release's host side (QdstrmImporter, nsys export) here into .gpu-host/ (git-ignored,
# never carried) and prints the nsys to pass to compare.py. Every download is pinned by SHA-256.
# run needs nothing but python3 with torch (transformers for the GPT) and dpkg; it writes
# results.tgz.NN and summary.txt to $OUT (default $GPU_CHECK_WORK/out, /tmp/gpu_check/out).
set -euo pipefail
cd "$(dirname "$0")/.."
CARRIED=.gpu
HOST=.gpu-host
NVTX_WHEEL="nvtx==0.2.11"
POOL=http://deb.debian.org/debian/pool/non-free/n/nvidia-cuda-toolkit
RELEASE="2024.2.3.38~12.5.0-2+b1"
TARGET_DEB="nsight-systems-target_${RELEASE}_amd64.deb"
HOST_DEBS=("$TARGET_DEB" "nsight-systems_${RELEASE}_amd64.deb"
           "libarrow500_0~~12.5.0-2+b1_amd64.deb" "libparquet500_0~~12.5.0-2+b1_amd64.deb")
declare -A SHA256=(
    [${HOST_DEBS[0]}]=87b96111e6699581cf031981204a5027446580802673b09cebb82f358b95b7d0
    [${HOST_DEBS[1]}]=e81a8a5ffa1bde826e34f54d5f1b36c7f5f420d89682f73816e30cf16095005f
    [${HOST_DEBS[2]}]=c29299270ef1283d3909f3a92ff3c02c447218f04af860240f1622fd1666b2dc
    [${HOST_DEBS[3]}]=f19f75fe51a2a30f740c5ab46d73591a25ee063d2a75b0bf009c06b5f0455763
)

fetch() {  # fetch DEB DIR: download a pinned package into DIR once, checked by its SHA-256
    local deb=$1 dir=$2
    mkdir -p "$dir"
    if [ ! -f "$dir/$deb" ] || ! echo "${SHA256[$deb]}  $dir/$deb" | sha256sum -c --status; then
        curl -fsS -o "$dir/$deb.part" "$POOL/${deb//\~/%7E}"
        echo "${SHA256[$deb]}  $dir/$deb.part" | sha256sum -c --status ||
            { echo "gpu_check: $deb does not match its pinned SHA-256" >&2; rm -f "$dir/$deb.part"; exit 1; }
        mv "$dir/$deb.part" "$dir/$deb"
    fi
}

prepare() {
    mkdir -p "$CARRIED"
    rm -f "$CARRIED"/nsight-systems-target_*.deb.part
    find "$CARRIED" -name 'nsight-systems-target_*.deb' ! -name "*${RELEASE}*" -delete
    fetch "$TARGET_DEB" "$CARRIED"
    local python=python3
    [ -x .venv/bin/python ] && python=.venv/bin/python  # the project's venv has pip
    "$python" -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$CARRIED" "$NVTX_WHEEL"
    ls -la "$CARRIED"
}

host() {  # the importer and export of the carried target's release, here; prints its nsys
    local root="$HOST/$RELEASE" deb
    local nsys="$root/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys"
    local hostdir="$root/usr/lib/nsight-systems/host-linux-x64"
    if [ ! -x "$hostdir/QdstrmImporter" ]; then
        for deb in "${HOST_DEBS[@]}"; do
            fetch "$deb" "$HOST/debs" >&2
            dpkg -x "$HOST/debs/$deb" "$root"
        done
        # Debian splits nsys over two folders and links arrow, parquet and ssh as system
        # libraries; the binaries look beside themselves ($ORIGIN), so put all of it there.
        ln -sfn "$PWD/$hostdir" "$(dirname "$(dirname "$nsys")")/host-linux-x64"
        cp -P "$root"/usr/lib/x86_64-linux-gnu/lib{arrow,parquet}.so.500* "$hostdir/"
        local ssh
        libssh() { ldconfig -p | awk '/libssh\.so\.4 /{print $NF; exit}'; }
        ssh=$(libssh)
        if [ -z "$ssh" ] && command -v apt-get >/dev/null 2>&1; then  # Debian's, as setup.sh
            $([ "$(id -u)" -eq 0 ] || echo sudo) apt-get install -y -qq libssh-4 >&2
            ssh=$(libssh)
        fi
        [ -n "$ssh" ] || { echo "gpu_check: QdstrmImporter needs libssh 4 (Debian: libssh-4)" >&2; exit 1; }
        ln -sfn "$ssh" "$hostdir/libssh.so"
    fi
    "$hostdir/QdstrmImporter" --version >&2
    echo "$PWD/$nsys"
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
    host) host ;;
    run) shift; run "$@" ;;
    *) echo "usage: bash scripts/gpu_check.sh prepare | host | run [--dry-run] [--budget S]" >&2; exit 2 ;;
esac
