#!/usr/bin/env bash
# arm64_ci.sh COMMAND: the 64-bit ARM build and tests under qemu-user (issue 29), for the
# Makefile's `arm64` / `test-arm64` and for `make test`:
#   build [--optional]  installs what is missing (g++-aarch64-linux-gnu, qemu-user, the arm64
#                       multiarch -dev packages), configures build/arm64 with
#                       cmake/aarch64-linux-gnu.cmake and builds shardlm and the kernel tests.
#                       --optional: a failed install prints one line and skips (exit 0).
#   start               `build --optional` in the background at nice 19 (it soaks up the cores
#                       the x86 tests leave idle), holding build/arm64/ci.lock.
#   finish              waits for `start`'s build, then `test` (or says why it skipped).
#   test                under qemu-aarch64 at each level QEMU 7.2 emulates (cortex-a72: plain
#                       NEON as a Pi 4; cortex-a76: dotprod as a Pi 5; max: dotprod + i8mm as a
#                       Neoverse V1): `devices` names the table the AT_HWCAP choice gives; a
#                       table the core lacks, forced by SHARDLM_ISA, exits 2 with a message;
#                       kernels_test and kernels_order_test (the NEON kernels against the scalar
#                       reference and, bit for bit, against the x86 arithmetic); then
#                       tests/arm64/test_arm64_text.py (the ARM binary's text = the x86 binary's,
#                       alone and as a worker of an x86 root).
# Each step says what it does in one line; the logs are in build/arm64/.
set -uo pipefail
cd "$(dirname "$0")/.."
out=build/arm64
jobs="${JOBS:-$(nproc)}"
pkgs=(g++-aarch64-linux-gnu qemu-user libgtest-dev:arm64 libgmock-dev:arm64 libpcre2-dev:arm64 libssl-dev:arm64
      libcpp-httplib-dev:arm64 libedit-dev:arm64)
targets=(shardlm kernels_test kernels_order_test)
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo

installed() { dpkg-query -W -f='${db:Status-Abbrev}\n' "$1" 2>/dev/null | grep -q '^ii'; }

install() {
  local missing=() p
  for p in "${pkgs[@]}"; do installed "$p" || missing+=("$p"); done
  [ ${#missing[@]} = 0 ] && return 0
  echo "arm64: installing ${missing[*]}"
  $sudo dpkg --add-architecture arm64 && $sudo apt-get update -qq && $sudo apt-get install -y -qq "${missing[@]}"
}

build() {
  mkdir -p "$out"
  [ "${1:-}" = --optional ] && [ -n "$sudo" ] && sudo="sudo -n"  # never wait for a password
  if ! install >"$out/install.log" 2>&1; then
    if [ "${1:-}" = --optional ]; then
      echo "test-arm64: skipped: the ARM cross toolchain could not be installed (see $out/install.log)" | tee "$out/ci.skip"
      return 0
    fi
    cat "$out/install.log" >&2; return 1
  fi
  rm -f "$out/ci.skip"
  cmake -S . -B "$out" -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DCMAKE_BUILD_TYPE=Release \
    -DSHARDLM_MPI=OFF -DSHARDLM_VULKAN=OFF >"$out/configure.log" 2>&1 || { cat "$out/configure.log" >&2; return 1; }
  cmake --build "$out" -j "$jobs" --target "${targets[@]}"
}

run() { tools/arm64_run.sh "$@"; }

# The kernel tests of one "cpu:table" pair; prints one summary line, the log on failure.
kernel_tests() {
  local cpu="${1%%:*}" isa="${1##*:}" log="$out/test-${1%%:*}.log" t
  for t in kernels_test kernels_order_test; do
    if ! SHARDLM_ARM64_BIN="$out/tests/$t" run --cpu "$cpu" --gtest_brief=1 >>"$log" 2>&1; then
      cat "$log"; echo "FAIL $t --cpu $cpu ($isa)"; return 1
    fi
  done
  echo "ok   kernels_test, kernels_order_test --cpu $cpu ($isa): $(grep -h 'PASSED' "$log" | tr -s ' ' | paste -sd ' ')"
}

test_all() {
  [ -f "$out/ci.skip" ] && { cat "$out/ci.skip"; return 0; }
  local pair cpu isa rc=0
  rm -f "$out"/test-*.log
  for pair in cortex-a72:neon cortex-a76:dotprod max:i8mm; do
    cpu="${pair%%:*}"; isa="${pair##*:}"
    run --cpu "$cpu" devices | grep -q "^cpu  $isa kernels" ||
      { echo "FAIL --cpu $cpu does not choose the $isa table"; rc=1; }
  done
  # A table the core lacks, forced: a message and exit status 2, not SIGILL.
  local msg st
  msg="$(SHARDLM_ISA=dotprod run --cpu cortex-a72 devices 2>&1)"; st=$?
  if [ $st = 2 ] && grep -q "SHARDLM_ISA=dotprod: this CPU lacks that kernel table" <<<"$msg"; then
    echo "ok   SHARDLM_ISA=dotprod on cortex-a72: exit 2, \"${msg%%$'\n'*}\""
  else
    echo "FAIL SHARDLM_ISA=dotprod on cortex-a72: exit $st: $msg"; rc=1
  fi
  export -f kernel_tests run; export out
  printf '%s\n' cortex-a72:neon cortex-a76:dotprod max:i8mm | xargs -P "$jobs" -I{} bash -c 'kernel_tests {}' || rc=1
  python3 tests/arm64/test_arm64_text.py || rc=1
  return $rc
}

case "${1:-}" in
  build) shift; build "$@" ;;
  start)
    mkdir -p "$out"
    rm -f "$out/ci.rc"
    echo "arm64: building in the background at nice 19 (log: $out/ci.log)"
    # flock holds the lock for the whole background build; `finish` waits on it.
    nohup flock "$out/ci.lock" bash -c "nice -n 19 tools/arm64_ci.sh build --optional >'$out/ci.log' 2>&1; echo \$? >'$out/ci.rc'" \
      >/dev/null 2>&1 &
    # the lock is taken before this returns, so `finish` cannot pass it first
    until [ -e "$out/ci.rc" ] || ! flock -n "$out/ci.lock" true; do :; done
    ;;
  finish)
    t0=$(date +%s)
    flock "$out/ci.lock" true
    echo "arm64: waited $(( $(date +%s) - t0 )) s for the background build"
    rc="$(cat "$out/ci.rc" 2>/dev/null || echo 1)"
    if [ "$rc" != 0 ]; then tail -n 40 "$out/ci.log"; echo "FAIL the arm64 build"; exit 1; fi
    test_all ;;
  test) test_all ;;
  *) echo "usage: $0 build [--optional] | start | finish | test" >&2; exit 2 ;;
esac
