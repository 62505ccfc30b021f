#!/usr/bin/env bash
# check_isa_objects.sh NM LIST: fails if an object file compiled with ISA flags (LIST: one
# path per line, written by CMake as <build>/isa_objects.txt) defines a weak function.
# Why (src/kernels/cpu/tu_vector.h): the linker keeps one copy of each weak symbol for the
# whole program, so a std::vector member or an inline helper emitted by avx512.cc could
# become everyone's copy, and an AVX2-only CPU (or a v8.0 ARM board) dies with SIGILL far
# from the kernels. Weak data (nm V, u: inline tables, the personality pointer) is fine.
# Nor may such a file have a dynamic initializer (_GLOBAL__sub_I_*): it runs at start-up on
# every CPU, before any table is chosen.
# Run by ctest (IsaObjects.NoWeakFunctions, release and ASan builds) and tools/arm64_ci.sh.
set -uo pipefail
nm_bin="${1:?usage: check_isa_objects.sh NM LIST}" list="${2:?usage: check_isa_objects.sh NM LIST}"
[ -s "$list" ] || { echo "check_isa_objects: $list is missing or empty: configure the build with CMake first"; exit 1; }
rc=0 n=0
while IFS= read -r obj; do
  [ -n "$obj" ] || continue
  [ -f "$obj" ] || { echo "check_isa_objects: $obj is missing: build the target shardlm_kernels first"; rc=1; continue; }
  n=$((n + 1))
  weak="$("$nm_bin" -C --defined-only "$obj" | awk '$2 == "W" || $3 ~ /^_GLOBAL__sub_I_/')"
  if [ -n "$weak" ]; then
    echo "FAIL $obj defines weak functions or a start-up initializer, compiled with its ISA"
    echo "     flags, that any CPU may run (use TuVector, internal linkage, or move the code to a"
    echo "     file without ISA flags; see src/kernels/cpu/tu_vector.h):"
    echo "$weak" | sed 's/^/     /'
    rc=1
  fi
done <"$list"
[ $rc = 0 ] && echo "ok   $n ISA-flagged objects define no weak function and no start-up initializer"
exit $rc
