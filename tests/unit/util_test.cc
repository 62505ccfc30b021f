// util_test.cc: thread pool, fp16/bf16 conversion, Expected, SHA-256, ZeroedBuffer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "util/fp16.h"
#include "util/sha256.h"
#include "util/status.h"
#include "util/thread_pool.h"
#include "util/zeroed_buffer.h"

namespace {

TEST(ThreadPool, RunsEveryThreadAndReusesThem) {
  for (int n : {1, 2, 3, 7}) {
    util::ThreadPool pool(n);
    for (int rep = 0; rep < 200; ++rep) {
      std::atomic<int> mask{0};
      pool.run([&](int ith, int nth) {
        EXPECT_EQ(nth, n);
        mask.fetch_or(1 << ith);
      });
      ASSERT_EQ(mask.load(), (1 << n) - 1);
    }
  }
}

// Parts are claimed by whichever thread is free (the caller too): every part still runs
// exactly once per job and never on two threads at once, however oversubscribed.
TEST(ThreadPool, EveryPartOnceAndAloneUnderOversubscription) {
  util::ThreadPool pool(7);  // more threads than this machine's cores
  std::vector<std::atomic<int>> busy(7), runs(7);
  std::atomic<int> overlaps{0};
  for (int rep = 0; rep < 2000; ++rep) {
    pool.run([&](int part, int nth) {
      ASSERT_EQ(nth, 7);
      if (busy[part].fetch_add(1) != 0) overlaps++;
      std::atomic<int> work{0};  // one part (a different one each job) runs longer
      while (work.fetch_add(1, std::memory_order_relaxed) < (rep % 7 == part ? 2000 : 10)) {
      }
      busy[part].fetch_sub(1);
      runs[part]++;
    });
  }
  EXPECT_EQ(overlaps.load(), 0);
  for (auto& r : runs) EXPECT_EQ(r.load(), 2000);
}

TEST(ThreadPool, ParallelForCoversRangeOnce) {
  util::ThreadPool pool(3);
  for (int64_t n : {0, 1, 5, 1000, 1001}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
}

TEST(Fp16, RoundTripsAllHalfValues) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = util::fp16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(util::f32_to_fp16(f), h) << h;
  }
  EXPECT_EQ(util::f32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(util::f32_to_fp16(65520.0f), 0x7C00);  // rounds to infinity
  EXPECT_EQ(util::fp16_to_f32(0x0001), std::ldexp(1.0f, -24));
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(util::f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(util::bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(util::f32_to_bf16(util::bits_to_f32(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(util::f32_to_bf16(util::bits_to_f32(0x3F818000u)), 0x3F82);
}

TEST(Expected, CarriesValueOrError) {
  util::Expected<int> a(5);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, 5);
  util::Expected<int> b(util::Status::error("bad thing"));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error(), "bad thing");
}

TEST(Sha256, KnownVector) {
  EXPECT_EQ(util::sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

// The cached file hash is the real one, is served from the cache (a planted entry is
// returned), and a rewritten file (new mtime, new size) is hashed again.
TEST(Sha256, CachedFileHashFollowsTheFile) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("shardlm_hash_cache_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ASSERT_EQ(::setenv("XDG_CACHE_HOME", dir.c_str(), 1), 0);
  const std::string file = (dir / "m.bin").string();
  std::ofstream(file) << "abc";
  auto a = util::sha256_file_cached(file);
  ASSERT_TRUE(a.ok()) << a.error();
  EXPECT_EQ(*a, util::sha256_hex("abc", 3));
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir / "shardlm" / "model-hashes")) {
    std::ofstream(e.path()) << std::string(64, 'f') << "\n";  // plant: proves the cache is read
    ++entries;
  }
  EXPECT_EQ(entries, 1);
  EXPECT_EQ(util::sha256_file_cached(file).value(), std::string(64, 'f'));
  std::ofstream(file) << "abcd";
  EXPECT_EQ(util::sha256_file_cached(file).value(), util::sha256_hex("abcd", 4));
  ::unsetenv("XDG_CACHE_HOME");
  fs::remove_all(dir);
}

// Resident bytes of this process (/proc/self/statm's second field, in pages).
size_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  size_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * size_t(::sysconf(_SC_PAGE_SIZE));
}

// The KV pool's storage: zeros everywhere, memory only where written, and moved not copied.
TEST(ZeroedBuffer, ReadsZeroAndCommitsOnlyWrittenPages) {
  constexpr size_t kBytes = size_t(512) << 20;
  const size_t before = resident_bytes();
  util::ZeroedBuffer b(kBytes);
  ASSERT_EQ(b.size(), kBytes);
  const size_t page = size_t(::sysconf(_SC_PAGE_SIZE));
  for (size_t o = 0; o < kBytes; o += kBytes / 64 + 4097) EXPECT_EQ(b.data()[o], 0) << o;  // reads map the zero page
  EXPECT_LT(resident_bytes(), before + (size_t(64) << 20));  // a std::vector would be 512 MiB here
  for (size_t i = 0; i < 16; ++i) b.data()[i * 8 * page + 3] = uint8_t(i + 1);
  util::ZeroedBuffer moved(std::move(b));
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(b.size(), 0u);
  ASSERT_EQ(moved.size(), kBytes);
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(moved.data()[i * 8 * page + 3], uint8_t(i + 1));
  EXPECT_EQ(moved.data()[4], 0);
  util::ZeroedBuffer empty(0);
  EXPECT_EQ(empty.data(), nullptr);
  moved = std::move(empty);
  EXPECT_EQ(moved.size(), 0u);
}

}  // namespace
