// attention_avx512bf16.cc: the opt-in BF16 tile kernels of flash attention (AttentionArgs::bf16,
// `--attn-bf16`) for an F16 KV cache on CPUs with AVX512_BF16 (Zen 4, Sapphire Rapids): each
// call converts its K or V tile from F16 to BF16 once, in the layout vdpbf16ps wants, and
// reuses it for every query row of the unit (up to 64 rows on a prompt).
//   Q:   rounded to BF16 (nearest even) once per unit, packed in place (round_q below).
//   S:   S = Q K^T by vdpbf16ps into F32: the K tile transposed to [head_dim / 2][64 keys]
//        dword pairs, so one instruction gives 16 keys' partial dots; no horizontal sums.
//   P.V: P (the F32 softmax numerators) rounded to BF16, V as [key pair][head_dim] dword
//        pairs, accumulated by vdpbf16ps into the F32 accumulator.
// The online softmax, scaling, exp and the tiling stay F32 and shared (attention.cc,
// attention_avx2.cc). A row's arithmetic does not depend on how many rows share the call,
// so batch splits, thread counts and node counts still give the same bits (in BF16 mode).
// Compiled with -mavx512bf16 (CMakeLists.txt); handed out by attention.cc only after the
// CPUID check (attention_bf16_available).
// Deliberately not here: Q8_0 and F32 caches (the flag leaves them on the usual kernels),
// AMX-BF16 tiles, and the run-time CPU check.
#include "kernels/attention.h"
#include "kernels/cpu/tu_vector.h"

#if (defined(__x86_64__) || defined(_M_X64)) && defined(__AVX512BF16__)
// GCC 12's AVX-512 headers initialise their _mm512_undefined_* values from themselves, which
// -Wmaybe-uninitialized reports once inlined here (GCC bug 105593, fixed in 12.3/13).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace kernels::attention_internal {
namespace {

constexpr int kTile = 64;  // keys per tile (attention.cc's kKvTile)

inline __m512bh as_bh(__m512i x) { return (__m512bh)x; }

// 16 F16 values -> F32.
inline __m512 load16_f16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// 32 consecutive F16 values as 16 BF16 pairs (dword i = values 2i, 2i+1), nearest even.
inline __m512i pairs32_f16(const uint8_t* p) {
  return (__m512i)_mm512_cvtne2ps_pbh(load16_f16(p + 32), load16_f16(p));
}

// Transposes a 16 x 16 matrix of dwords held in r[0..15] (row i in r[i]).
inline void transpose16(__m512i* r) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // u[4i + c], 128-bit lane L: rows 4i .. 4i + 3 of column 4L + c.
  for (int i = 0; i < 16; i += 4) {
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // Column 4L + c gathers lane L of u[c], u[4 + c], u[8 + c], u[12 + c].
  for (int c = 0; c < 4; ++c) {
    const __m512i x0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44), x1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE);
    const __m512i x2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44),
                  x3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_i32x4(x0, x2, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(x0, x2, 0xDD);
    r[8 + c] = _mm512_shuffle_i32x4(x1, x3, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(x1, x3, 0xDD);
  }
}

// Per-thread tile buffers (head_dim <= 256): K as [head_dim / 2][64] dwords, V as
// [32 key pairs][head_dim] dwords, P as [rows][32] dwords.
struct Bf16Scratch {
  alignas(64) uint32_t k[128 * kTile];
  alignas(64) uint32_t v[(kTile / 2) * 256];
  cpu::TuVector<uint32_t> p;
};

Bf16Scratch& scratch() {
  thread_local Bf16Scratch s;
  return s;
}

// The K tile (n_keys rows, zeros past them) as kt[pair][key]: dword (k_j[2i], k_j[2i+1]).
void convert_k(const uint8_t* k, size_t k_row_bytes, int n_keys, int hd, uint32_t* kt) {
  for (int kb = 0; kb < kTile; kb += 16)
    for (int pb = 0; pb < hd / 2; pb += 16) {  // 16 keys x 16 pairs (32 dims)
      __m512i r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = kb + i < n_keys ? pairs32_f16(k + size_t(kb + i) * k_row_bytes + 4 * pb) : _mm512_setzero_si512();
      transpose16(r);
      for (int i = 0; i < 16; ++i) _mm512_store_si512(kt + size_t(pb + i) * kTile + kb, r[i]);
    }
}

// scores for NR query rows (BF16 pairs, q_row_bytes apart) against the whole converted tile.
template <int NR>
void scores_rows(const uint8_t* q, size_t q_row_bytes, const uint32_t* kt, int n_keys, int hd, float* s,
                 int ld) {
  __m512 acc[NR][4];
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_setzero_ps();
  const int nc = (n_keys + 15) / 16;  // key vectors holding a real key
  for (int i = 0; i < hd / 2; ++i) {
    const uint32_t* kr = kt + size_t(i) * kTile;
    __m512i kv[4];
    for (int c = 0; c < 4; ++c) kv[c] = _mm512_load_si512(kr + 16 * c);
    for (int r = 0; r < NR; ++r) {
      uint32_t qd;
      std::memcpy(&qd, q + r * q_row_bytes + 4 * size_t(i), 4);
      const __m512bh qb = as_bh(_mm512_set1_epi32(int(qd)));
      for (int c = 0; c < 4; ++c)
        if (c < nc) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], qb, as_bh(kv[c]));
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < nc; ++c) {
      const int left = n_keys - 16 * c;
      const __mmask16 m = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
      _mm512_mask_storeu_ps(s + size_t(r) * ld + 16 * c, m, acc[r][c]);
    }
}

void scores_bf16(KvFormat, const uint8_t* q, size_t q_row_bytes, int n_rows, const uint8_t* k,
                 size_t k_row_bytes, int n_keys, int hd, float* s, int ld) {
  uint32_t* kt = scratch().k;
  convert_k(k, k_row_bytes, n_keys, hd, kt);
  int r = 0;
  for (; r + 4 <= n_rows; r += 4) scores_rows<4>(q + r * q_row_bytes, q_row_bytes, kt, n_keys, hd, s + size_t(r) * ld, ld);
  const uint8_t* qr = q + r * q_row_bytes;
  float* sr = s + size_t(r) * ld;
  switch (n_rows - r) {
    case 3: scores_rows<3>(qr, q_row_bytes, kt, n_keys, hd, sr, ld); break;
    case 2: scores_rows<2>(qr, q_row_bytes, kt, n_keys, hd, sr, ld); break;
    case 1: scores_rows<1>(qr, q_row_bytes, kt, n_keys, hd, sr, ld); break;
    default: break;
  }
}

// The V tile as vp[key pair][dim]: dword (v_2j[d], v_2j+1[d]); a missing odd key is zero.
void convert_v(const uint8_t* v, size_t v_row_bytes, int n_keys, int hd, uint32_t* vp) {
  // Word 2i <- word i (key 2j), word 2i + 1 <- word 16 + i (key 2j + 1).
  alignas(64) static const uint16_t kIdx[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(kIdx);
  for (int j = 0; j < n_keys; j += 2) {
    const uint8_t* a = v + size_t(j) * v_row_bytes;
    const uint8_t* b = j + 1 < n_keys ? a + v_row_bytes : nullptr;
    for (int d = 0; d < hd; d += 16) {
      const __m512 hi = b ? load16_f16(b + 2 * d) : _mm512_setzero_ps();
      const __m512i packed = (__m512i)_mm512_cvtne2ps_pbh(hi, load16_f16(a + 2 * d));
      _mm512_store_si512(vp + size_t(j / 2) * hd + d, _mm512_permutexvar_epi16(idx, packed));
    }
  }
}

// acc[r][d0 .. d0 + 16 * DC) += sum over key pairs of P pairs x V pairs, NR rows at once.
template <int NR, int DC>
void accv_rows(const uint32_t* pp, const uint32_t* vp, int n_pairs, int hd, float* acc) {
  for (int d0 = 0; d0 < hd; d0 += 16 * DC) {
    __m512 a[NR][DC];
    for (int r = 0; r < NR; ++r)
      for (int c = 0; c < DC; ++c) a[r][c] = _mm512_loadu_ps(acc + size_t(r) * hd + d0 + 16 * c);
    for (int j = 0; j < n_pairs; ++j) {
      __m512i vv[DC];
      for (int c = 0; c < DC; ++c) vv[c] = _mm512_load_si512(vp + size_t(j) * hd + d0 + 16 * c);
      for (int r = 0; r < NR; ++r) {
        const __m512bh pb = as_bh(_mm512_set1_epi32(int(pp[r * (kTile / 2) + j])));
        for (int c = 0; c < DC; ++c) a[r][c] = _mm512_dpbf16_ps(a[r][c], pb, as_bh(vv[c]));
      }
    }
    for (int r = 0; r < NR; ++r)
      for (int c = 0; c < DC; ++c) _mm512_storeu_ps(acc + size_t(r) * hd + d0 + 16 * c, a[r][c]);
  }
}

template <int NR>
void accv_dispatch(const uint32_t* pp, const uint32_t* vp, int n_pairs, int hd, float* acc) {
  if (hd % 64 == 0) accv_rows<NR, 4>(pp, vp, n_pairs, hd, acc);
  else accv_rows<NR, 2>(pp, vp, n_pairs, hd, acc);  // hd % 32 == 0
}

void accumulate_v_bf16(KvFormat, const float* p, int ld, int n_rows, const uint8_t* v, size_t v_row_bytes,
                       int n_keys, int hd, float* acc) {
  Bf16Scratch& sc = scratch();
  convert_v(v, v_row_bytes, n_keys, hd, sc.v);
  // P rows to BF16 pairs, zero past n_keys.
  if (sc.p.size() < size_t(n_rows) * (kTile / 2)) sc.p.resize(size_t(n_rows) * (kTile / 2));
  for (int r = 0; r < n_rows; ++r) {
    const float* pr = p + size_t(r) * ld;
    for (int c = 0; c < kTile; c += 32) {
      const int l0 = std::clamp(n_keys - c, 0, 16), l1 = std::clamp(n_keys - c - 16, 0, 16);
      const __m512 x0 = _mm512_maskz_loadu_ps(__mmask16((1u << l0) - 1), pr + c);
      const __m512 x1 = _mm512_maskz_loadu_ps(__mmask16((1u << l1) - 1), pr + c + 16);
      _mm512_storeu_si512(sc.p.data() + size_t(r) * (kTile / 2) + c / 2, (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
    }
  }
  const int n_pairs = (n_keys + 1) / 2;
  int r = 0;
  for (; r + 4 <= n_rows; r += 4)
    accv_dispatch<4>(sc.p.data() + size_t(r) * (kTile / 2), sc.v, n_pairs, hd, acc + size_t(r) * hd);
  const uint32_t* pr = sc.p.data() + size_t(r) * (kTile / 2);
  float* ar = acc + size_t(r) * hd;
  switch (n_rows - r) {
    case 3: accv_dispatch<3>(pr, sc.v, n_pairs, hd, ar); break;
    case 2: accv_dispatch<2>(pr, sc.v, n_pairs, hd, ar); break;
    case 1: accv_dispatch<1>(pr, sc.v, n_pairs, hd, ar); break;
    default: break;
  }
}

// The queries: x rounded to BF16 (nearest even) and packed in place, pair i in bytes 4i..4i+3
// (what scores_bf16 reads; the row keeps its F32 size).
void round_q_bf16(float* x, int n) {
  auto* out = reinterpret_cast<uint8_t*>(x);
  for (int i = 0; i < n; i += 32) {  // n % 32 == 0; each step writes bytes it has read
    const __m512i packed = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(out + 2 * size_t(i), packed);
  }
}

}  // namespace

TileKernels avx512bf16_tile_kernels(const TileKernels& base) {
  TileKernels t = base;
  t.scores = scores_bf16;
  t.accumulate_v = accumulate_v_bf16;
  t.round_q = round_q_bf16;
  return t;
}

}  // namespace kernels::attention_internal

#else  // not x86-64, or a compiler without -mavx512bf16

namespace kernels::attention_internal {
TileKernels avx512bf16_tile_kernels(const TileKernels& base) { return base; }
}  // namespace kernels::attention_internal

#endif
