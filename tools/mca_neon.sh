#!/usr/bin/env bash
# mca_neon.sh [CPU]: llvm-mca (LLVM 14) cycles per 256 weights of our NEON matrix x vector
# inner loops (tools/mca/neon_loops.cc, the dotprod tiles) beside ggml's NEON vec_dots
# (llama.cpp's ggml/src/ggml-cpu/arch/arm/quants.c, LLAMA_CPP=/work/llama.cpp), both compiled
# by g++/gcc-aarch64-linux-gnu -O3 -march=armv8.2-a+dotprod (our build's flags for
# neon_dotprod.cc). The loop of each function holding its sdot instructions is cut from the
# assembly (from the label a backward branch returns to) and given to llvm-mca-14 -mtriple=aarch64 -mcpu=CPU
# (default cortex-a76); cycles per iteration are scaled by the weights one iteration eats.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cpu="${1:-cortex-a76}"
llama="${LLAMA_CPP:-/work/llama.cpp}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
flags=(-O3 -march=armv8.2-a+dotprod -S -o-)
aarch64-linux-gnu-g++ -std=c++20 "${flags[@]}" -I"$root/src" "$root/tools/mca/neon_loops.cc" >"$tmp/ours.s"
g="$llama/ggml"
aarch64-linux-gnu-gcc -std=gnu11 "${flags[@]}" -D_GNU_SOURCE -DNDEBUG -I"$g/include" -I"$g/src" -I"$g/src/ggml-cpu" \
  "$g/src/ggml-cpu/arch/arm/quants.c" >"$tmp/ggml.s"

# loop FILE FUNCTION: the innermost loop body of FUNCTION (label .. backward branch).
loop() {
  python3 - "$1" "$2" <<'PY'
import re, sys
lines = open(sys.argv[1]).read().split("\n")
start = next(i for i, l in enumerate(lines) if l.startswith(sys.argv[2] + ":"))
end = next(i for i in range(start, len(lines)) if lines[i].strip().startswith(".size"))
body = lines[start:end]
labels = {l[:-1]: i for i, l in enumerate(body) if re.match(r"^\.L\w+:$", l)}
best = None
for i, l in enumerate(body):
    m = re.match(r"^\s+(b\.?(?:eq|ne|lt|le|gt|ge|hi|hs|lo|ls|cc|cs|mi|pl)|b|cbnz|cbz|tbnz|tbz)\s+(?:.*,\s*)?(\.L\w+)$", l)
    if m and m.group(2) in labels and labels[m.group(2)] < i:
        seg = [x for x in body[labels[m.group(2)] + 1:i + 1] if x.startswith("\t") and not x.strip().startswith(".")]
        dots = sum("sdot" in x for x in seg)
        if best is None or dots > best[0]:  # the loop with the integer dots
            best = (dots, seg)
print("\n".join(best[1]))
PY
}
cycles() {  # cycles per iteration
  llvm-mca-14 -mtriple=aarch64 -mcpu="$cpu" -iterations=200 "$1" 2>/dev/null |
    awk '/^Total Cycles:/ {c=$3} /^Iterations:/ {it=$2} END {printf "%.1f", c / it}'
}
echo "| kernel | ours: insts / cycles per iteration | weights / iteration | ours cycles / 256 | ggml function | ggml insts / cycles per iteration | weights / iteration | ggml cycles / 256 |"
echo "|---|---|---|---|---|---|---|---|"
row() {  # name ours_fn ours_weights ggml_fn ggml_weights
  loop "$tmp/ours.s" "$2" >"$tmp/a.s"; loop "$tmp/ggml.s" "$4" >"$tmp/b.s"
  local ca cb
  ca=$(cycles "$tmp/a.s"); cb=$(cycles "$tmp/b.s")
  printf '| %s | %d / %s | %d | %.1f | %s | %d / %s | %d | %.1f |\n' "$1" "$(wc -l <"$tmp/a.s")" "$ca" "$3" \
    "$(echo "$ca * 256 / $3" | bc -l)" "$4" "$(wc -l <"$tmp/b.s")" "$cb" "$5" "$(echo "$cb * 256 / $5" | bc -l)"
}
row Q4_0 mca_q4_0 128 ggml_vec_dot_q4_0_q8_0 "${GGML_Q4_0_W:-64}"
row Q8_0 mca_q8_0 128 ggml_vec_dot_q8_0_q8_0 "${GGML_Q8_0_W:-64}"
row Q4_K mca_q4_k 256 ggml_vec_dot_q4_K_q8_K 256
row Q6_K mca_q6_k 256 ggml_vec_dot_q6_K_q8_K 256
