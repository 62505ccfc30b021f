#!/usr/bin/env bash
# arm64_run.sh [--cpu NAME] ARGS...: runs the cross-compiled build/arm64/shardlm (`make arm64`)
# under qemu-aarch64 (Debian's qemu-user), with the AArch64 loader, C/C++ runtime and other
# libraries from the arm64 multiarch packages (/lib/aarch64-linux-gnu). --cpu picks the emulated core (`qemu-aarch64 -cpu help`; QEMU 7.2:
# cortex-a72 = no dotprod, cortex-a76 = dotprod, max = dotprod + i8mm). SHARDLM_ARM64_BIN
# runs another ARM binary (e.g. build/arm64/tests/kernels_test).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cpu=max
if [ "${1:-}" = "--cpu" ]; then cpu="${2:?--cpu needs a name}"; shift 2; fi
bin="${SHARDLM_ARM64_BIN:-$root/build/arm64/shardlm}"
command -v qemu-aarch64 >/dev/null || { echo "arm64_run.sh: qemu-aarch64 is missing: apt-get install qemu-user" >&2; exit 1; }
[ -x "$bin" ] || { echo "arm64_run.sh: $bin is missing: run make arm64" >&2; exit 1; }
# The loader must come from the same glibc build as libc.so.6. With the arm64 multiarch
# libc (libc6:arm64, which the -dev packages pull in) both are under /lib; the cross
# toolchain's /usr/aarch64-linux-gnu holds another build's loader, and that loader with the
# multiarch libc.so.6 corrupts glibc's thread-stack list: the first pthread_create spins
# forever. So /usr/aarch64-linux-gnu only when the multiarch one is absent.
prefix=()
if [ ! -e /lib/ld-linux-aarch64.so.1 ]; then
  [ -d /usr/aarch64-linux-gnu ] || { echo "arm64_run.sh: no AArch64 C library: apt-get install libc6:arm64" >&2; exit 1; }
  prefix=(-L /usr/aarch64-linux-gnu)
fi
exec qemu-aarch64 -cpu "$cpu" "${prefix[@]}" "$bin" "$@"
