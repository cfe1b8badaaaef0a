#!/usr/bin/env bash
# Install Nsight Systems (Debian non-free, 2022.4) on a Debian machine, the way
# ../shared/NSYS.md describes, and make `nsys profile` find its importer.
# Idempotent: does nothing when a working nsys is already there.
set -euo pipefail

have_importer() {
    [ -x /usr/lib/nsight-systems/host-linux-x64/QdstrmImporter ] &&
        [ -e /usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64 ]
}

if command -v nsys >/dev/null 2>&1 && have_importer; then
    echo "install_nsys: $(nsys --version) already installed"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_nsys: no apt-get here; install Nsight Systems from NVIDIA and put nsys on PATH" >&2
    exit 1
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

sources=/etc/apt/sources.list.d/debian.sources
if [ -f "$sources" ] && ! grep -q 'non-free' "$sources"; then
    $SUDO sed -i 's/^Components: main$/Components: main contrib non-free non-free-firmware/' "$sources"
elif [ -f /etc/apt/sources.list ] && ! grep -q 'non-free' /etc/apt/sources.list; then
    $SUDO sed -i -E 's/^(deb .* main)$/\1 contrib non-free non-free-firmware/' /etc/apt/sources.list
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends nsight-systems >/dev/null

# Debian splits nsys over two folders; the profiler looks for its importer
# beside the target binaries, so link the host folder there.
target_dir=/usr/lib/x86_64-linux-gnu/nsight-systems
if [ -d /usr/lib/nsight-systems/host-linux-x64 ] && [ -d "$target_dir" ] &&
    [ ! -e "$target_dir/host-linux-x64" ]; then
    $SUDO ln -s /usr/lib/nsight-systems/host-linux-x64 "$target_dir/host-linux-x64"
fi

echo "install_nsys: $(nsys --version)"
