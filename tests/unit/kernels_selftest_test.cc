// kernels_selftest_test.cc: the start-up known-answer self-test of the accelerated x86
// kernel tables (kernels/self_test.cc, issue 30 item 4). On this CPU every table it has
// passes; a table made wrong on purpose (SHARDLM_SELF_TEST_FAIL=avx2|avx512, read once when
// the tables are built, so each case runs in a fresh process: a "threadsafe" death test)
// is disabled with a warning naming it, the next table down is used, and SHARDLM_ISA
// naming it is refused. Tests of an ISA this CPU lacks print a skip line.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/kernels.h"

namespace {

using kernels::Isa;

// First: in a fresh process (ctest runs each test alone) this call builds the tables and
// runs the self-tests; its time is printed, not asserted.
TEST(KernelsSelfTest, EveryTableThisCpuHasPasses) {
  const auto t0 = std::chrono::steady_clock::now();
  const Isa active = kernels::active_isa();
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  std::printf("kernel tables built and self-tested in %.0f us (first call in this process: %s)\n", us,
              kernels::isa_name(active));
  if (std::getenv("SHARDLM_ISA") == nullptr) {
    EXPECT_EQ(active, kernels::detected_isa());
  }
  EXPECT_TRUE(kernels::isa_supported(kernels::detected_isa()));
}

#if defined(__x86_64__)
// In a child process that sets SHARDLM_SELF_TEST_FAIL=bad (and SHARDLM_ISA=force if given)
// before anything builds the tables: prints the table in use and how many of avx2 and
// avx512 are still offered, exits 0. Nothing here touches the tables before that (the
// skips ask the CPU directly), so the parent's tables stay untouched.
void expect_disabled(const char* bad, const char* force, int code, const char* stderr_regex) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("SHARDLM_SELF_TEST_FAIL", bad, 1);
        if (force) setenv("SHARDLM_ISA", force, 1);
        std::fprintf(stderr, "active=%s offered=%d\n", kernels::isa_name(kernels::active_isa()),
                     int(kernels::isa_supported(Isa::kAvx2)) + int(kernels::isa_supported(Isa::kAvx512)));
        std::exit(0);
      },
      testing::ExitedWithCode(code), stderr_regex);
}

bool cpu_has_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
bool cpu_has_avx512_vnni() { return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw"); }
// AMX in CPUID and tile permission granted (as dispatch.cc asks; asking twice is harmless).
bool cpu_has_amx() {
  return __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-int8") &&
         syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
}

// SHARDLM_AVX512_WIDTH other than 256 or 512: a message naming the choices, exit 2 (read
// when the avx512 table is built, so in a fresh process).
TEST(KernelsSelfTest, UnknownAvx512WidthIsRefused) {
  if (!cpu_has_avx512_vnni()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI: avx512 table not tested";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("SHARDLM_AVX512_WIDTH", "300", 1);
        std::fprintf(stderr, "active=%s\n", kernels::isa_name(kernels::active_isa()));
        std::exit(0);
      },
      testing::ExitedWithCode(2), "SHARDLM_AVX512_WIDTH=300: .* set 256 or 512");
}

TEST(KernelsSelfTest, FailingAmxTableIsDisabledWithAWarning) {
  if (!cpu_has_amx()) GTEST_SKIP() << "this CPU has no AMX-INT8: amx table not tested";
  expect_disabled("amx", nullptr, 0,
                  "warning: the amx kernel table failed its start-up self-test \\(MXFP4 matmul of 3, row 0 "
                  "column 0: .*\\): disabled, using avx512.*active=avx512 offered=2");
}

TEST(KernelsSelfTest, FailingAvx512TableIsDisabledWithAWarning) {
  if (!cpu_has_avx512_vnni()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI: avx512 table not tested";
  expect_disabled("avx512", nullptr, 0,
                  "warning: the avx512 kernel table failed its start-up self-test \\(MXFP4 matmul of 3, row 0 "
                  "column 0: .*\\): disabled, using avx2.*active=avx2 offered=1");
}

TEST(KernelsSelfTest, FailingAvx2TableDisablesItAndAvx512) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "this CPU has no AVX2: avx2 table not tested";
  expect_disabled("avx2", nullptr, 0,
                  "warning: the avx2 kernel table failed its start-up self-test \\(MXFP4 .*\\): disabled, using "
                  "scalar.*active=scalar offered=0");
}

TEST(KernelsSelfTest, AskingForAFailedTableIsRefused) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "this CPU has no AVX2: avx2 table not tested";
  expect_disabled("avx2", "avx2", 2, "SHARDLM_ISA=avx2: that kernel table failed its start-up self-test");
}
#endif

}  // namespace
