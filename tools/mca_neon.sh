#!/usr/bin/env bash
# mca_neon.sh [CPU]: llvm-mca (LLVM 14; LLVM_MCA=llvm-mca-19 for a Neoverse V1 model) cycles per 256 weights of our NEON matrix x vector
# inner loops (tools/mca/neon_loops.cc, the dotprod tiles) beside ggml's NEON vec_dots
# (llama.cpp's ggml/src/ggml-cpu/arch/arm/quants.c, LLAMA_CPP=/work/llama.cpp), both compiled
# by g++/gcc-aarch64-linux-gnu -O3 -march=armv8.2-a+dotprod (our build's flags for
# neon_dotprod.cc; ours with the AArch64 build's -ffp-contract=off, ggml's as llama.cpp builds it). The loop of each function holding its sdot instructions is cut from the
# assembly (from the label a backward branch returns to) and given to llvm-mca-14 -mtriple=aarch64 -mcpu=CPU
# (default cortex-a76); cycles per iteration are scaled by the weights one iteration eats.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cpu="${1:-cortex-a76}"
llama="${LLAMA_CPP:-/work/llama.cpp}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mca="${LLVM_MCA:-llvm-mca-14}"
flags=(-O3 -march=armv8.2-a+dotprod -S -o-)
ours=(-ffp-contract=off)  # the AArch64 build's (CMakeLists.txt; -std=c++20 implies it in GCC 12 too)
i8mm=(-O3 -march=armv8.2-a+dotprod+i8mm -S -o-)  # neon_i8mm.cc's flags
aarch64-linux-gnu-g++ -std=c++20 "${flags[@]}" "${ours[@]}" -I"$root/src" "$root/tools/mca/neon_loops.cc" >"$tmp/ours.s"
aarch64-linux-gnu-g++ -std=c++20 "${i8mm[@]}" "${ours[@]}" -I"$root/src" "$root/tools/mca/neon_loops.cc" >"$tmp/ours_i8mm.s"
g="$llama/ggml"
aarch64-linux-gnu-gcc -std=gnu11 "${flags[@]}" -D_GNU_SOURCE -DNDEBUG -I"$g/include" -I"$g/src" -I"$g/src/ggml-cpu" \
  "$g/src/ggml-cpu/arch/arm/quants.c" >"$tmp/ggml.s"
# ggml's repacked GEMMs: the dotprod ones (q4_0 4x4, q4_K / q6_K 8x4, q8_0 4x4) and, built
# with +i8mm, the smmla ones (q4_0 4x8, q4_K / q6_K 8x8, q8_0 4x8)
aarch64-linux-gnu-g++ -std=gnu++17 "${flags[@]}" -D_GNU_SOURCE -DNDEBUG -I"$g/include" -I"$g/src" -I"$g/src/ggml-cpu" \
  "$g/src/ggml-cpu/arch/arm/repack.cpp" >>"$tmp/ggml.s"
aarch64-linux-gnu-g++ -std=gnu++17 "${i8mm[@]}" -D_GNU_SOURCE -DNDEBUG -I"$g/include" -I"$g/src" -I"$g/src/ggml-cpu" \
  "$g/src/ggml-cpu/arch/arm/repack.cpp" >"$tmp/ggml_i8mm.s"

# loop FILE FUNCTION: the innermost loop body of FUNCTION (label .. backward branch).
loop() {
  python3 - "$1" "$2" <<'PY'
import re, sys
lines = open(sys.argv[1]).read().split("\n")
def span(name):
    start = next(i for i, l in enumerate(lines) if l.startswith(name + ":"))
    return start, next(i for i in range(start, len(lines)) if lines[i].strip().startswith(".size"))
start, end = span(sys.argv[2])
# a wrapper that only tail-calls the tile (b SYMBOL): the tile's body
calls = [l.split()[1] for l in lines[start:end] if re.match(r"^\s*b\s+[_A-Za-z][\w.]*$", l)]
if calls and not any(re.search(r"\b(sdot|smmla)\b", l) for l in lines[start:end]):
    start, end = span(calls[0])
body = []  # inline assembly (ggml's GEMMs) comes untabbed, "1:insn" on one line, and its
for l in lines[start:end]:  # sdots as ".inst 0x... // sdot ...": given to llvm-mca as the comment's text
    l = l.strip()
    m = re.match(r"^(\d+):(.+)$", l)
    if m:
        body.append(m.group(1) + ":")
        l = m.group(2).strip()
    m = re.match(r"^\.inst\s+\S+\s*//\s*(.+)$", l)
    body.append(m.group(1) if m else l)
labels = {}  # name -> positions (numeric local labels "1:" recur; "1b" is the last one before)
for i, l in enumerate(body):
    m = re.match(r"^(\.L\w+|\d+):$", l)
    if m:
        labels.setdefault(m.group(1), []).append(i)
def insn(x):
    return x and not x.startswith((".", "//", "#", "@")) and not re.match(r"^(\.L\w+|\d+):$", x)
best = None
for i, l in enumerate(body):
    m = re.match(r"^(b\.?(?:eq|ne|lt|le|gt|ge|hi|hs|lo|ls|cc|cs|mi|pl)|b|cbnz|cbz|tbnz|tbz)\s+(?:.*,\s*)?(\.L\w+|\d+b)$", l)
    if not m:
        continue
    name = m.group(2)[:-1] if m.group(2).endswith("b") and m.group(2)[0].isdigit() else m.group(2)
    back = [p for p in labels.get(name, []) if p < i]
    if not back:
        continue
    seg = ["\t" + x for x in body[back[-1] + 1:i + 1] if insn(x)]
    if name[0].isdigit():  # LLVM 19 wants the directional label defined
        seg.insert(0, name + ":")
    dots = sum(("sdot" in x) + ("smmla" in x) for x in seg)
    if best is None or dots > best[0]:  # the loop with the integer dots
        best = (dots, seg)
print("\n".join(best[1]))
PY
}
cycles() {  # cycles per iteration
  "$mca" -mtriple=aarch64 -mcpu="$cpu" -mattr=+dotprod,+i8mm -iterations=200 "$1" 2>/dev/null |
    awk '/^Total Cycles:/ {c=$3} /^Iterations:/ {it=$2} END {printf "%.1f", c / it}'
}
echo "| kernel | ours: insts / cycles per iteration | weights / iteration | ours cycles / 256 | ggml function | ggml insts / cycles per iteration | weights / iteration | ggml cycles / 256 |"
echo "|---|---|---|---|---|---|---|---|"
row() {  # name ours_fn ours_weights ggml_fn ggml_weights
  loop "$tmp/ours.s" "$2" >"$tmp/a.s"; loop "$tmp/ggml.s" "$4" >"$tmp/b.s"
  local ca cb
  ca=$(cycles "$tmp/a.s"); cb=$(cycles "$tmp/b.s")
  printf '| %s | %d / %s | %d | %.1f | %s | %d / %s | %d | %.1f |\n' "$1" "$(grep -c $'^\t' "$tmp/a.s")" "$ca" "$3" \
    "$(echo "$ca * 256 / $3" | bc -l)" "$4" "$(grep -c $'^\t' "$tmp/b.s")" "$cb" "$5" "$(echo "$cb * 256 / $5" | bc -l)"
}
row Q4_0 mca_q4_0 128 ggml_vec_dot_q4_0_q8_0 "${GGML_Q4_0_W:-64}"
row Q8_0 mca_q8_0 128 ggml_vec_dot_q8_0_q8_0 "${GGML_Q8_0_W:-64}"
row Q4_K mca_q4_k 256 ggml_vec_dot_q4_K_q8_K 256
row Q6_K mca_q6_k 256 ggml_vec_dot_q6_K_q8_K 256
row Q2_K mca_q2_k 256 ggml_vec_dot_q2_K_q8_K 256
row Q3_K mca_q3_k 256 ggml_vec_dot_q3_K_q8_K 256
row IQ4_XS mca_iq4_xs 256 ggml_vec_dot_iq4_xs_q8_K 256

# The GEMMs (prompt batches): cycles per 256 multiply-adds (weights x tokens); an sdot does
# 16, an smmla 32 (2 rows x 2 columns x 8), for ggml's inline assembly too.
echo
echo "| GEMM micro-kernel | ours: function | insts / cycles per iteration | MACs | **ours, cycles / 256 MACs** | ggml function | insts / cycles per iteration | MACs | **ggml, cycles / 256 MACs** |"
echo "|---|---|---|---|---|---|---|---|---|"
macs() { echo $(( 16 * $(grep -c sdot "$1") + 32 * $(grep -c smmla "$1") )); }
gemm_row() {  # name ours_asm ours_fn ggml_asm ggml_fn
  loop "$tmp/$2" "$3" >"$tmp/a.s"; loop "$tmp/$4" "$5" >"$tmp/b.s"
  local ca cb ma mb
  ca=$(cycles "$tmp/a.s"); cb=$(cycles "$tmp/b.s"); ma=$(macs "$tmp/a.s"); mb=$(macs "$tmp/b.s")
  printf '| %s | `%s` | %d / %s | %d | **%.1f** | `%s` | %d / %s | %d | **%.1f** |\n' "$1" "$3" "$(grep -c $'^\t' "$tmp/a.s")" "$ca" "$ma" \
    "$(echo "$ca * 256 / $ma" | bc -l)" "$5" "$(grep -c $'^\t' "$tmp/b.s")" "$cb" "$mb" "$(echo "$cb * 256 / $mb" | bc -l)"
}
gemm_row "Q4_0 before (lane-order decode tile)" ours.s mca_old_gemm_q4_0 ggml.s ggml_gemm_q4_0_4x4_q8_0
gemm_row "Q4_K before (lane-order decode tile)" ours.s mca_old_gemm_q4_k ggml.s ggml_gemm_q4_K_8x4_q8_K
gemm_row "Q6_K before (lane-order decode tile)" ours.s mca_old_gemm_q6_k ggml.s ggml_gemm_q6_K_8x4_q8_K
gemm_row "Q4_0 sdot" ours.s mca_gemm_q4_0 ggml.s ggml_gemm_q4_0_4x4_q8_0
gemm_row "Q4_K sdot" ours.s mca_gemm_q4_k ggml.s ggml_gemm_q4_K_8x4_q8_K
gemm_row "Q6_K sdot" ours.s mca_gemm_q6_k ggml.s ggml_gemm_q6_K_8x4_q8_K
gemm_row "Q8_0 before (vec_dot order)" ours.s mca_old_gemm_q8_0 ggml.s ggml_gemm_q8_0_4x4_q8_0
gemm_row "Q8_0 sdot" ours.s mca_gemm_q8_0 ggml.s ggml_gemm_q8_0_4x4_q8_0
gemm_row "Q4_0 i8mm" ours_i8mm.s mca_mmla_q4_0 ggml_i8mm.s ggml_gemm_q4_0_4x8_q8_0
gemm_row "Q4_K i8mm" ours_i8mm.s mca_mmla_q4_k ggml_i8mm.s ggml_gemm_q4_K_8x8_q8_K
gemm_row "Q6_K i8mm" ours_i8mm.s mca_mmla_q6_k ggml_i8mm.s ggml_gemm_q6_K_8x8_q8_K
gemm_row "Q8_0 i8mm" ours_i8mm.s mca_mmla_q8_0 ggml_i8mm.s ggml_gemm_q8_0_4x8_q8_0
# Q2_K, Q3_K, IQ4_XS (neon_lowbit_lanes.h): ggml has no repacked GEMM for them on ARM, so
# llama.cpp's prompt runs its vec_dot per column (the column, beside ours).
gemm_row "Q2_K before (vec_dot-order row_k)" ours.s mca_old_gemm_q2_k ggml.s ggml_vec_dot_q2_K_q8_K
gemm_row "Q2_K sdot" ours.s mca_gemm_q2_k ggml.s ggml_vec_dot_q2_K_q8_K
gemm_row "Q2_K i8mm" ours_i8mm.s mca_mmla_q2_k ggml.s ggml_vec_dot_q2_K_q8_K
gemm_row "Q3_K before (vec_dot-order row_k)" ours.s mca_old_gemm_q3_k ggml.s ggml_vec_dot_q3_K_q8_K
gemm_row "Q3_K sdot" ours.s mca_gemm_q3_k ggml.s ggml_vec_dot_q3_K_q8_K
gemm_row "Q3_K i8mm" ours_i8mm.s mca_mmla_q3_k ggml.s ggml_vec_dot_q3_K_q8_K
gemm_row "IQ4_XS before (vec_dot-order row_k)" ours.s mca_old_gemm_iq4_xs ggml.s ggml_vec_dot_iq4_xs_q8_K
gemm_row "IQ4_XS sdot" ours.s mca_gemm_iq4_xs ggml.s ggml_vec_dot_iq4_xs_q8_K
gemm_row "IQ4_XS i8mm" ours_i8mm.s mca_mmla_iq4_xs ggml.s ggml_vec_dot_iq4_xs_q8_K

# Decode batches of 2 columns (vec_dot order, row_k): the weight block unpacked once for both
# columns (now) or per column (before: the mca_b2sep_* model), beside ggml's vec_dot.
echo
echo "| 2-column decode batch | per column (before): insts / cycles | **cycles / 256 MACs** | once (row_k now): insts / cycles | **cycles / 256 MACs** | ggml vec_dot, **cycles / 256** |"
echo "|---|---|---|---|---|---|"
b2_row() {  # name suffix ggml_fn
  loop "$tmp/ours.s" "mca_b2sep_$2" >"$tmp/a.s"; loop "$tmp/ours.s" "mca_b2_$2" >"$tmp/b.s"; loop "$tmp/ggml.s" "$3" >"$tmp/c.s"
  local ca cb cc
  ca=$(cycles "$tmp/a.s"); cb=$(cycles "$tmp/b.s"); cc=$(cycles "$tmp/c.s")
  printf '| %s | %d / %s | **%.1f** | %d / %s | **%.1f** | **%.1f** |\n' "$1" "$(grep -c $'^\t' "$tmp/a.s")" "$ca" \
    "$(echo "$ca * 256 / $(macs "$tmp/a.s")" | bc -l)" "$(grep -c $'^\t' "$tmp/b.s")" "$cb" \
    "$(echo "$cb * 256 / $(macs "$tmp/b.s")" | bc -l)" "$(echo "$cc * 256 / $(macs "$tmp/c.s")" | bc -l)"
}
b2_row Q4_K q4_k ggml_vec_dot_q4_K_q8_K
b2_row Q5_K q5_k ggml_vec_dot_q5_K_q8_K
b2_row Q6_K q6_k ggml_vec_dot_q6_K_q8_K
b2_row Q2_K q2_k ggml_vec_dot_q2_K_q8_K
b2_row Q3_K q3_k ggml_vec_dot_q3_K_q8_K
b2_row IQ4_XS iq4_xs ggml_vec_dot_iq4_xs_q8_K
