#!/usr/bin/env bash
# arm64_run.sh [--cpu NAME] ARGS...: runs the cross-compiled build/arm64/shardlm (`make arm64`)
# under qemu-aarch64 (Debian's qemu-user), with the AArch64 loader and C/C++ runtime from
# /usr/aarch64-linux-gnu (g++-aarch64-linux-gnu) and the other libraries from the arm64
# multiarch packages. --cpu picks the emulated core (`qemu-aarch64 -cpu help`; QEMU 7.2:
# cortex-a72 = no dotprod, cortex-a76 = dotprod, max = dotprod + i8mm). SHARDLM_ARM64_BIN
# runs another ARM binary (e.g. build/arm64/tests/kernels_test).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cpu=max
if [ "${1:-}" = "--cpu" ]; then cpu="${2:?--cpu needs a name}"; shift 2; fi
bin="${SHARDLM_ARM64_BIN:-$root/build/arm64/shardlm}"
command -v qemu-aarch64 >/dev/null || { echo "arm64_run.sh: qemu-aarch64 is missing: apt-get install qemu-user" >&2; exit 1; }
[ -d /usr/aarch64-linux-gnu ] || { echo "arm64_run.sh: /usr/aarch64-linux-gnu is missing: apt-get install g++-aarch64-linux-gnu" >&2; exit 1; }
[ -x "$bin" ] || { echo "arm64_run.sh: $bin is missing: run make arm64" >&2; exit 1; }
exec qemu-aarch64 -cpu "$cpu" -L /usr/aarch64-linux-gnu "$bin" "$@"
