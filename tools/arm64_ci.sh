#!/usr/bin/env bash
# arm64_ci.sh COMMAND: the 64-bit ARM build and tests under qemu-user (issue 29), for the
# Makefile's `arm64` / `test-arm64` and for `make test`:
#   build [--optional]  installs what is missing (g++-aarch64-linux-gnu, qemu-user, the arm64
#                       multiarch -dev packages), configures build/arm64 with
#                       cmake/aarch64-linux-gnu.cmake and builds shardlm and the kernel tests.
#                       CMAKE_FLAGS (the Makefile's: CI's -DSHARDLM_WERROR=ON) go to cmake, as
#                       for the x86 builds, so a warning in the AArch64-only code fails CI too.
#                       --optional: a failed install prints one line and skips (exit 0).
#   start               in the background at nice 19 (it soaks up the cores the x86 tests leave
#                       idle), holding build/arm64/ci.lock: `build --optional`, then the kernel
#                       tests under qemu (no time limits in them, so starving is harmless).
#   finish              waits for `start`, shows its kernel test lines, then the text tests
#                       (which have time limits: in the foreground, after the x86 tests).
#   test                under qemu-aarch64 at each level QEMU 7.2 emulates (cortex-a72: plain
#                       NEON as a Pi 4; cortex-a76: dotprod as a Pi 5; max: dotprod + i8mm as a
#                       Neoverse V1): `devices` names the table the AT_HWCAP choice gives; a
#                       table the core lacks, forced by SHARDLM_ISA, exits 2 with a message;
#                       the -march=armv8.2-a objects define no weak function (check_isa_objects.sh);
#                       kernels_test, kernels_quantize_test and kernels_order_test (the NEON
#                       kernels against the scalar reference and, bit for bit, against the
#                       x86 arithmetic); then
#                       tests/arm64/test_arm64_text.py (the ARM binary's text = the x86 binary's,
#                       alone and as a worker of an x86 root).
# Each step says what it does in one line; the logs are in build/arm64/.
# A build records a hash of the sources it compiled (build/arm64/src.stamp) only when they did
# not change while it ran; a build without a matching stamp starts from clean (a rebase during
# an incremental build once left objects of two header versions: SIGSEGV at exit), and `test`
# refuses a build of other sources.
set -uo pipefail
cd "$(dirname "$0")/.."
out=build/arm64
jobs="${JOBS:-$(nproc)}"
pkgs=(g++-aarch64-linux-gnu qemu-user libgtest-dev:arm64 libgmock-dev:arm64 libpcre2-dev:arm64 libssl-dev:arm64
      libcpp-httplib-dev:arm64 libedit-dev:arm64)
kernel_bins="kernels_test kernels_quantize_test kernels_order_test"  # a string: kernel_tests runs in xargs' shells
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
    -DSHARDLM_MPI=OFF -DSHARDLM_VULKAN=OFF ${CMAKE_FLAGS:-} >"$out/configure.log" 2>&1 || { cat "$out/configure.log" >&2; return 1; }
  local before clean=() brc
  before="$(src_hash)"
  # Objects that no stamp vouches for (a build killed, or one whose sources changed under
  # it, or one from before stamps): start from clean rather than trust the timestamps.
  if [ -e "$out/unsure" ] || { [ -e "$out/shardlm" ] && [ ! -e "$out/src.stamp" ]; }; then
    echo "arm64: no finished build of unchanged sources in $out: building from clean"
    clean=(--clean-first)
  fi
  rm -f "$out/src.stamp"; touch "$out/unsure"
  # shardlm and the kernel tests, one target (CMakeLists.txt): make builds them side by side
  cmake --build "$out" -j "$jobs" --target cli_and_kernel_tests "${clean[@]}"; brc=$?
  if [ "$(src_hash)" != "$before" ]; then
    echo "arm64: the sources changed during the build: the next build starts from clean" >&2; return 1
  fi
  rm -f "$out/unsure"
  if [ $brc = 0 ]; then echo "$before" >"$out/src.stamp"; else echo failed >"$out/src.stamp"; fi
  return $brc
}

# One hash of the files the ARM build reads and of the ARM tests (not the rest of tests/:
# the x86 tests running beside the background build may leave files there).
src_hash() {
  { find src cmake tests/unit tests/arm64 CMakeLists.txt -type f ! -name '*.pyc' -print0
    find tests -name CMakeLists.txt -print0; } | sort -z | xargs -0 sha1sum | sha1sum | cut -c1-40
}
stamp_ok() {
  [ "$(cat "$out/src.stamp" 2>/dev/null)" = "$(src_hash)" ] && return 0
  echo "FAIL build/arm64 is not a build of these sources (run make arm64 first)"; return 1
}

run() { tools/arm64_run.sh "$@"; }

# The kernel tests of one "cpu:table" pair; prints one summary line, the log on failure.
# Each core tests its own table only (SHARDLM_TEST_ISAS, tests/unit/kernels_fixture.h), the
# first also the scalar one: a higher core would run the same code of the lower tables again
# (at max, kernels_test took 93 s under qemu, now 33).
kernel_tests() {
  local cpu="${1%%:*}" isa="${1##*:}" log="$out/test-${1%%:*}.log" t only
  only="$isa"; [ "$cpu" = cortex-a72 ] && only="scalar,$isa"
  for t in $kernel_bins; do
    if ! SHARDLM_TEST_ISAS="$only" SHARDLM_ARM64_BIN="$out/tests/$t" run --cpu "$cpu" --gtest_brief=1 >>"$log" 2>&1; then
      cat "$log"; echo "FAIL $t --cpu $cpu ($isa)"; return 1
    fi
  done
  echo "ok   ${kernel_bins// /, } --cpu $cpu ($isa): $(grep -h 'PASSED' "$log" | tr -s ' ' | paste -sd ' ')"
}

# The table choice, the refusal and the kernel tests at each level.
test_kernels() {
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
  # The files compiled with -march=armv8.2-a+... define no weak function that a v8.0 core
  # (a Pi 4) might run for the whole program (src/kernels/cpu/tu_vector.h).
  tools/check_isa_objects.sh aarch64-linux-gnu-nm "$out/isa_objects.txt" || rc=1
  export -f kernel_tests run; export out kernel_bins
  printf '%s\n' cortex-a72:neon cortex-a76:dotprod max:i8mm | xargs -P "$jobs" -I{} bash -c 'kernel_tests {}' || rc=1
  return $rc
}

test_all() {
  [ -f "$out/ci.skip" ] && { cat "$out/ci.skip"; return 0; }
  stamp_ok || return 1
  local rc=0
  test_kernels || rc=1
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
    nohup flock "$out/ci.lock" nice -n 19 bash -c "tools/arm64_ci.sh build --optional >'$out/ci.log' 2>&1; echo \$? >'$out/ci.rc';
      [ \$(cat '$out/ci.rc') = 0 ] && [ ! -f '$out/ci.skip' ] && { tools/arm64_ci.sh test-kernels >'$out/ci-kernels.log' 2>&1;
      echo \$? >'$out/ci-kernels.rc'; }" >/dev/null 2>&1 &
    # the lock is taken before this returns, so `finish` cannot pass it first
    until [ -e "$out/ci.rc" ] || ! flock -n "$out/ci.lock" true; do :; done
    ;;
  finish)
    t0=$(date +%s)
    flock "$out/ci.lock" true
    echo "arm64: waited $(( $(date +%s) - t0 )) s for the background build"
    rc="$(cat "$out/ci.rc" 2>/dev/null || echo 1)"
    if [ "$rc" != 0 ]; then tail -n 40 "$out/ci.log"; echo "FAIL the arm64 build"; exit 1; fi
    [ -f "$out/ci.skip" ] && { cat "$out/ci.skip"; exit 0; }
    stamp_ok || exit 1
    cat "$out/ci-kernels.log"
    krc="$(cat "$out/ci-kernels.rc" 2>/dev/null || echo 1)"
    python3 tests/arm64/test_arm64_text.py; trc=$?
    [ "$krc" = 0 ] && [ "$trc" = 0 ] ;;
  test) test_all ;;
  test-kernels) stamp_ok && test_kernels ;;
  *) echo "usage: $0 build [--optional] | start | finish | test | test-kernels" >&2; exit 2 ;;
esac
