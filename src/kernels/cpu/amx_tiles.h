// amx_tiles.h: private to kernels/cpu/amx.cc: the AMX tile instructions the GEMMs use, twice
// over with one interface: HwTiles issues them (LDTILECFG, TILELOADD, TILEZERO, TDPBSSD,
// TILESTORED, TILERELEASE), EmuTiles is a plain-C++ model of them after the Intel SDM's
// pseudo-code, including the tile-shape checks on which the CPU faults (as CHECK failures),
// so that the kernels above them run and are tested on CPUs without AMX. Six tile
// registers: A0/A1 (activations), B0/B1 (weights), C0/C1 (int32 sums); C0 = A0 . B0 and
// C1 = A1 . B1 only. Include only from a file compiled with -mamx-tile -mamx-int8.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "util/check.h"

namespace kernels::cpu::amx {
namespace {

enum : int { kA0 = 0, kA1 = 1, kB0 = 2, kB1 = 3, kC0 = 4, kC1 = 5 };  // tile registers

struct alignas(64) TileConfig {  // LDTILECFG's 64-byte operand, palette 1
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// The instructions. GCC's tile macros take the register number as a literal token, hence
// the if-constexpr ladders. Their asm names no memory operand for loads, so a compiler
// barrier orders each load after the stores that filled its source.
struct HwTiles {
  static void config(const TileConfig& c) { _tile_loadconfig(&c); }
  static void release() { _tile_release(); }
  template <int T>
  static void load(const void* p, size_t stride) {
    __asm__ volatile("" ::: "memory");
    if constexpr (T == kA0) _tile_loadd(0, p, stride);
    else if constexpr (T == kA1) _tile_loadd(1, p, stride);
    else if constexpr (T == kB0) _tile_loadd(2, p, stride);
    else { static_assert(T == kB1); _tile_loadd(3, p, stride); }
  }
  template <int T>
  static void zero() {
    if constexpr (T == kC0) _tile_zero(4);
    else { static_assert(T == kC1); _tile_zero(5); }
  }
  template <int C, int A, int B>
  static void dpbssd() {
    if constexpr (C == kC0) { static_assert(A == kA0 && B == kB0); _tile_dpbssd(4, 0, 2); }
    else { static_assert(C == kC1 && A == kA1 && B == kB1); _tile_dpbssd(5, 1, 3); }
  }
  template <int T>
  static void store(void* p, size_t stride) {
    if constexpr (T == kC0) _tile_stored(4, p, stride);
    else { static_assert(T == kC1); _tile_stored(5, p, stride); }
  }
};

// The same instructions in C++, after the Intel SDM's pseudo-code (TILELOADD, TILEZERO,
// TDPBSSD, TILESTORED): a tile is `rows` rows of `colsb` bytes, the rest of a 64-byte row
// and the rows past `rows` read as zero; TDPBSSD faults unless C.rows == A.rows,
// A.colsb == 4 * B.rows and C.colsb == B.colsb.
struct EmuTiles {
  struct State {
    TileConfig cfg;
    bool configured = false;
    alignas(64) uint8_t t[8][16 * 64] = {};
  };
  static State& s() {
    thread_local State st;
    return st;
  }
  static void config(const TileConfig& c) {
    CHECK(c.palette == 1 && c.start_row == 0);
    for (int t = 0; t < 8; ++t) CHECK(c.rows[t] <= 16 && c.colsb[t] <= 64);
    State& st = s();
    st.cfg = c;
    st.configured = true;
    std::memset(st.t, 0, sizeof st.t);
  }
  static void release() { s().configured = false; }
  template <int T>
  static void load(const void* p, size_t stride) {
    State& st = s();
    CHECK(st.configured && st.cfg.rows[T] > 0);
    std::memset(st.t[T], 0, sizeof st.t[T]);
    for (int r = 0; r < st.cfg.rows[T]; ++r)
      std::memcpy(st.t[T] + r * 64, static_cast<const uint8_t*>(p) + r * stride, st.cfg.colsb[T]);
  }
  template <int T>
  static void zero() {
    CHECK(s().configured);
    std::memset(s().t[T], 0, sizeof s().t[T]);
  }
  template <int C, int A, int B>
  static void dpbssd() {
    State& st = s();
    const TileConfig& c = st.cfg;
    CHECK(st.configured && c.rows[C] == c.rows[A] && c.colsb[A] == 4 * c.rows[B] && c.colsb[C] == c.colsb[B]);
    CHECK(c.colsb[A] % 4 == 0 && c.colsb[C] % 4 == 0);
    for (int m = 0; m < c.rows[C]; ++m)
      for (int n = 0; n < c.colsb[C] / 4; ++n) {
        int32_t acc;
        std::memcpy(&acc, st.t[C] + m * 64 + 4 * n, 4);
        for (int k = 0; k < c.colsb[A] / 4; ++k)
          for (int j = 0; j < 4; ++j)
            acc += int32_t(int8_t(st.t[A][m * 64 + 4 * k + j])) * int8_t(st.t[B][k * 64 + 4 * n + j]);
        std::memcpy(st.t[C] + m * 64 + 4 * n, &acc, 4);
      }
  }
  template <int T>
  static void store(void* p, size_t stride) {
    State& st = s();
    CHECK(st.configured);
    for (int r = 0; r < st.cfg.rows[T]; ++r)
      std::memcpy(static_cast<uint8_t*>(p) + r * stride, st.t[T] + r * 64, st.cfg.colsb[T]);
  }
};

}  // namespace
}  // namespace kernels::cpu::amx
