// dispatch.cc: picks the kernels once at start-up: CPUID (x86: AVX2+FMA+F16C, AVX-512
// F/BW/VL/VNNI with the OS saving zmm state, AMX-TILE/INT8 with the OS saving tile state
// and granting this process tile permission) or the kernel's hardware capability bits
// (AArch64: getauxval(AT_HWCAP) ASIMD, ASIMDDP = dotprod, AT_HWCAP2 I8MM), overridable by
// SHARDLM_ISA=scalar|avx2|avx512|amx|neon|dotprod|i8mm (a table the CPU lacks is refused with
// a message and exit status 2, never run into SIGILL), and by set_isa() in tests. Builds
// one flat table per ISA by layering the ISA's entries over the ones below it; each
// accelerated x86 table then passes a known-answer self-test against the one below
// (self_test.cc) or is disabled with a warning naming it. The public entry points are a
// table lookup. Deliberately no kernels here, and no threading:
// callers split rows across threads and call matmul on each range.
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <mutex>
#include <string>

#include "kernels/cpu/kernel_table.h"
#include "kernels/kernels.h"
#include "util/check.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#endif
#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

namespace kernels {
namespace {

using cpu::KernelTable;
using cpu::slot;
using tensor::Type;

// The scalar matmul: every (row, batch) pair through the reference dot product.
template <Type kType>
void ref_matmul(int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1,
                const void* xq, size_t xq_stride, int64_t n_batch, float* y, int64_t y_stride) {
  const auto* w = static_cast<const uint8_t*>(W);
  const auto* x = static_cast<const uint8_t*>(xq);
  for (int64_t b = 0; b < n_batch; ++b)
    for (int64_t r = r0; r < r1; ++r)
      y[b * y_stride + r] = ref::vec_dot(kType, n, w + r * row_stride, x + b * xq_stride);
}

template <Type kType>
float ref_vec_dot(int64_t n, const void* w, const void* x) { return ref::vec_dot(kType, n, w, x); }

template <Type kType>
void ref_quantize(const float* x, void* out, int64_t n) { ref::quantize_activation(kType, x, out, n); }

KernelTable make_scalar_table() {
  KernelTable t;
  auto add = [&t]<Type kType>() {
    t.vec_dot[slot(kType)] = ref_vec_dot<kType>;
    t.matmul[slot(kType)] = ref_matmul<kType>;
  };
  add.operator()<Type::F32>();
  add.operator()<Type::F16>();
  add.operator()<Type::BF16>();
  add.operator()<Type::Q4_0>();
  add.operator()<Type::Q4_1>();
  add.operator()<Type::Q5_0>();
  add.operator()<Type::Q5_1>();
  add.operator()<Type::Q8_0>();
  add.operator()<Type::Q2_K>();
  add.operator()<Type::Q3_K>();
  add.operator()<Type::Q4_K>();
  add.operator()<Type::Q5_K>();
  add.operator()<Type::Q6_K>();
  add.operator()<Type::IQ4_NL>();
  add.operator()<Type::IQ4_XS>();
  add.operator()<Type::MXFP4>();
  auto addq = [&t]<Type kType>() { t.quantize[slot(kType)] = ref_quantize<kType>; };
  addq.operator()<Type::F32>();
  addq.operator()<Type::F16>();
  addq.operator()<Type::BF16>();
  addq.operator()<Type::Q8_0>();
  addq.operator()<Type::Q8_1>();
  addq.operator()<Type::Q8_K>();
  return t;
}

// `over`'s non-null entries replace `base`'s.
KernelTable layer(KernelTable base, const KernelTable& over) {
  for (int i = 0; i < cpu::kMaxTypeId; ++i) {
    if (over.vec_dot[i]) base.vec_dot[i] = over.vec_dot[i];
    if (over.matmul[i]) base.matmul[i] = over.matmul[i];
    if (over.quantize[i]) base.quantize[i] = over.quantize[i];
  }
  return base;
}

#if defined(__x86_64__) || defined(_M_X64)
bool os_saves_ymm_zmm(bool want_zmm) {
  uint32_t eax, edx;
  __asm__("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  const uint32_t ymm = 0x6;         // XMM | YMM state
  const uint32_t zmm = 0x6 | 0xE0;  // + opmask, ZMM_Hi256, Hi16_ZMM
  return (eax & (want_zmm ? zmm : ymm)) == (want_zmm ? zmm : ymm);
}

// AMX tile data is enabled per process: the OS must save it (XCR0 bits 17, 18) and grant
// this process permission (arch_prctl ARCH_REQ_XCOMP_PERM, Linux 5.16+). Asked once; a
// refusal is said in one line and the AVX-512 table is used.
bool amx_permitted() {
  uint32_t eax, edx;
  __asm__("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  constexpr uint32_t kTileState = (1u << 17) | (1u << 18);  // XTILECFG | XTILEDATA
  constexpr long kReqXcompPerm = 0x1023, kXfeatureTileData = 18;
  if ((eax & kTileState) == kTileState && syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureTileData) == 0) return true;
  std::fprintf(stderr, "shardlm: this CPU has AMX but the OS does not grant its tiles to this process "
               "(XCR0 or arch_prctl ARCH_REQ_XCOMP_PERM): using the avx512 kernels\n");
  return false;
}

Isa detect() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return Isa::kScalar;
  const bool osxsave = c & (1u << 27), fma = c & (1u << 12), f16c = c & (1u << 29);
  if (!osxsave || !os_saves_ymm_zmm(false)) return Isa::kScalar;
  if (__get_cpuid_max(0, nullptr) < 7) return Isa::kScalar;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = b & (1u << 5), bmi2 = b & (1u << 8);
  if (!(avx2 && fma && f16c && bmi2)) return Isa::kScalar;
  const bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30),
             vl = b & (1u << 31), vnni = c & (1u << 11);
  if (!(f && dq && bw && vl && vnni && os_saves_ymm_zmm(true))) return Isa::kAvx2;
  const bool amx_tile = d & (1u << 24), amx_int8 = d & (1u << 25);
  return amx_tile && amx_int8 && amx_permitted() ? Isa::kAmx : Isa::kAvx512;
}
#elif defined(__aarch64__)
Isa detect() {
  constexpr unsigned long kAsimd = 1ul << 1, kAsimdDp = 1ul << 20;  // AT_HWCAP (asm/hwcap.h)
  constexpr unsigned long kI8mm = 1ul << 13;                         // AT_HWCAP2
  const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
  if (!(hw & kAsimd)) return Isa::kScalar;
  if (!(hw & kAsimdDp)) return Isa::kNeon;
  return (hw2 & kI8mm) ? Isa::kNeonI8mm : Isa::kNeonDot;
}
#else
Isa detect() { return Isa::kScalar; }
#endif

bool supports(Isa detected, Isa want) {
  switch (want) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return runs_avx2(detected);
    case Isa::kAvx512: return detected == Isa::kAvx512 || detected == Isa::kAmx;
    case Isa::kAmx: return detected == Isa::kAmx;
    case Isa::kNeon: return detected == Isa::kNeon || detected == Isa::kNeonDot || detected == Isa::kNeonI8mm;
    case Isa::kNeonDot: return detected == Isa::kNeonDot || detected == Isa::kNeonI8mm;
    case Isa::kNeonI8mm: return detected == Isa::kNeonI8mm;
  }
  return false;
}

KernelTable make_table(Isa isa) {
  KernelTable t = make_scalar_table();
#if defined(__x86_64__) || defined(_M_X64)
  if (runs_avx2(isa)) t = layer(t, cpu::avx2_table());
  if (isa == Isa::kAvx512 || isa == Isa::kAmx) t = layer(t, cpu::avx512_table());
  if (isa == Isa::kAmx) t = layer(t, cpu::amx_table());
#endif
#if defined(__aarch64__)
  if (isa == Isa::kNeon || isa == Isa::kNeonDot || isa == Isa::kNeonI8mm) t = layer(t, cpu::neon_table());
  if (isa == Isa::kNeonDot || isa == Isa::kNeonI8mm) t = layer(t, cpu::neon_dotprod_table());
  if (isa == Isa::kNeonI8mm) t = layer(t, cpu::neon_i8mm_table());
#endif
  return t;
}

struct State {
  Isa detected;
  Isa usable;  // the best table that passed its self-test (detected unless one failed)
  KernelTable tables[kIsaCount];  // indexed by Isa
  std::atomic<const KernelTable*> active;
};

constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx, Isa::kNeon, Isa::kNeonDot, Isa::kNeonI8mm};
static_assert(std::size(kAllIsas) == kIsaCount);

// Bad user input, not a programming error: a message naming the choices and exit status 2
// (running a table the CPU lacks would end in SIGILL at the first matmul).
[[noreturn]] void bad_env(const char* env, Isa usable, const char* why) {
  std::string ok;
  for (Isa isa : kAllIsas)
    if (supports(usable, isa)) ok += std::string(ok.empty() ? "" : ", ") + isa_name(isa);
  std::fprintf(stderr, "shardlm: SHARDLM_ISA=%s: %s; this CPU (best: %s) runs: %s\n", env, why, isa_name(usable),
               ok.c_str());
  std::exit(2);
}

Isa from_env(Isa detected, Isa usable) {
  const char* env = std::getenv("SHARDLM_ISA");
  if (!env || !*env) return usable;
  for (Isa isa : kAllIsas) {
    if (std::strcmp(env, isa_name(isa)) == 0) {
      if (!supports(detected, isa)) bad_env(env, usable, "this CPU lacks that kernel table");
      if (!supports(usable, isa)) bad_env(env, usable, "that kernel table failed its start-up self-test");
      return isa;
    }
  }
  bad_env(env, usable, "no such kernel table");
}

#if defined(__x86_64__) || defined(_M_X64)
// SHARDLM_SELF_TEST_FAIL=avx2|avx512|amx (tests only): that table's MXFP4 matmul is made wrong
// before its self-test, to exercise the path that disables it.
void broken_matmul(int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1, const void* xq,
                   size_t xq_stride, int64_t n_batch, float* y, int64_t y_stride) {
  const auto* w = static_cast<const uint8_t*>(W);
  const auto* x = static_cast<const uint8_t*>(xq);
  for (int64_t b = 0; b < n_batch; ++b)
    for (int64_t r = r0; r < r1; ++r)
      y[b * y_stride + r] = 1.0f + ref::vec_dot(Type::MXFP4, n, w + r * row_stride, x + b * xq_stride);
}

// The AMX GEMM on its test shape (cpu::amx_self_test) in a child process: no session has run
// the tile instructions on hardware, so a fault there (bad tile state from the OS, a wrong
// encoding) disables the table instead of killing the engine. "" = passed.
std::string amx_self_test_in_child() {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string err = cpu::amx_self_test(/*emulated=*/false);
    if (!err.empty()) std::fprintf(stderr, "shardlm: AMX self-test: %s\n", err.c_str());
    _exit(err.empty() ? 0 : 1);
  }
  if (pid < 0) return "could not start its test process";
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return "lost its test process";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  if (WIFSIGNALED(status)) return "the test process died of signal " + std::to_string(WTERMSIG(status));
  return "its GEMM results differ from the AVX2 lane-order GEMM";
}
#endif

// The best table at most `detected` that passes its known-answer self-test (self_test.cc)
// against the one below it (AVX2 against the scalar reference, AVX-512 against AVX2 and AMX
// against AVX-512 to the bit, AMX's GEMM also on hardware in a child process): a table that
// fails is not used, nor any above it, and a warning names it.
Isa self_tested(Isa detected, const KernelTable* tables) {
#if defined(__x86_64__) || defined(_M_X64)
  const char* fail = std::getenv("SHARDLM_SELF_TEST_FAIL");
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
    if (!supports(detected, isa)) break;
    const Isa below = isa == Isa::kAvx2 ? Isa::kScalar : isa == Isa::kAvx512 ? Isa::kAvx2 : Isa::kAvx512;
    KernelTable t = tables[static_cast<int>(isa)];
    if (fail && std::strcmp(fail, isa_name(isa)) == 0) t.matmul[slot(Type::MXFP4)] = broken_matmul;
    std::string err = cpu::self_test(t, tables[static_cast<int>(below)], isa != Isa::kAvx2);
    if (err.empty() && isa == Isa::kAmx) err = amx_self_test_in_child();
    if (!err.empty()) {
      std::fprintf(stderr, "shardlm: warning: the %s kernel table failed its start-up self-test (%s): disabled, "
                   "using %s\n", isa_name(isa), err.c_str(), isa_name(below));
      return below;
    }
  }
#else
  (void)tables;
#endif
  return detected;
}

State& state() {
  static State* s = [] {
    auto* st = new State;
    st->detected = detect();
    for (Isa isa : kAllIsas)
      if (supports(st->detected, isa)) st->tables[static_cast<int>(isa)] = make_table(isa);
    st->usable = self_tested(st->detected, st->tables);
    st->active = &st->tables[static_cast<int>(from_env(st->detected, st->usable))];
    return st;
  }();
  return *s;
}

const KernelTable& active() { return *state().active.load(std::memory_order_relaxed); }

}  // namespace

Isa detected_isa() { return state().detected; }

Isa active_isa() {
  State& s = state();
  return static_cast<Isa>(s.active.load() - &s.tables[0]);
}

bool isa_supported(Isa isa) { return supports(state().usable, isa); }

void set_isa(Isa isa) {
  State& s = state();
  CHECK_MSG(supports(s.usable, isa), isa_name(isa));
  s.active = &s.tables[static_cast<int>(isa)];
}

std::string kquant_width_note() {
  std::string label;
#if defined(__x86_64__) || defined(_M_X64)
  if (const Isa isa = active_isa(); isa == Isa::kAvx512 || isa == Isa::kAmx) {
    double speedup = 0.0;
    const int bits = cpu::avx512_kquant_width(&speedup);
    char buf[96];
    if (speedup > 0.0)
      std::snprintf(buf, sizeof buf, " (K-quant decode %d-bit; 512-bit measured %.2fx)", bits, speedup);
    else
      std::snprintf(buf, sizeof buf, " (K-quant decode %d-bit; SHARDLM_AVX512_WIDTH)", bits);
    label = buf;
  }
#endif
  return label;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAmx: return "amx";
    case Isa::kNeon: return "neon";
    case Isa::kNeonDot: return "dotprod";
    case Isa::kNeonI8mm: return "i8mm";
  }
  return "?";
}

void quantize_activation(Type t, const float* x, void* out, int64_t n) {
  const auto fn = active().quantize[slot(t)];
  CHECK_MSG(fn != nullptr, tensor::type_name(t));
  CHECK_MSG(n % tensor::traits(t).block_size == 0, tensor::type_name(t));
  fn(x, out, n);
}

float vec_dot(Type wt, int64_t n, const void* w_row, const void* xq) {
  const auto fn = active().vec_dot[slot(wt)];
  CHECK_MSG(fn != nullptr, tensor::type_name(wt));
  CHECK_MSG(n % tensor::traits(wt).block_size == 0, tensor::type_name(wt));
  return fn(n, w_row, xq);
}

namespace {
std::atomic<bool> g_lane_order{true};
thread_local bool t_vec_dot = false;  // the order of the matmul running on this thread
}  // namespace

void set_lane_order(bool on) { g_lane_order.store(on, std::memory_order_relaxed); }
bool lane_order() { return !t_vec_dot && g_lane_order.load(std::memory_order_relaxed); }

bool lane_order_type(Type wt) {
  const Isa isa = active_isa();
  if (isa == Isa::kScalar) return false;
  switch (wt) {
    case Type::Q4_0: case Type::Q4_1: case Type::Q8_0: case Type::Q4_K: case Type::Q5_K: case Type::Q6_K:
    case Type::IQ4_NL: case Type::MXFP4: case Type::Q2_K: case Type::Q3_K: case Type::IQ4_XS:
      return true;
    default:
      return false;
  }
}

void matmul(Type wt, int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1,
            const void* xq, size_t xq_stride, int64_t n_batch, float* y, int64_t y_stride, BatchOrder order) {
  const auto fn = active().matmul[slot(wt)];
  CHECK_MSG(fn != nullptr, tensor::type_name(wt));
  CHECK_MSG(n % tensor::traits(wt).block_size == 0, tensor::type_name(wt));
  CHECK(r0 >= 0 && r0 <= r1 && n_batch >= 0);
  if (r0 == r1 || n_batch == 0) return;
  t_vec_dot = order == BatchOrder::kVecDot;
  fn(n, W, row_stride, r0, r1, xq, xq_stride, n_batch, y, y_stride);
  t_vec_dot = false;
}

}  // namespace kernels
