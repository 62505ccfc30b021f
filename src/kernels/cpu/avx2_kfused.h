// avx2_kfused.h: private to kernels/cpu, included by avx2.cc, avx512.cc and avx2_lowbit.h:
// the fused K-quant dots of the decode path (vec_dot order): Q4_K's, Q5_K's and Q6_K's (and, through
// avx2_lowbit.h's FusedQ2K / FusedQ3K, Q2_K's and Q3_K's) matrix x vector, and Q4_K's, Q5_K's
// and Q6_K's decode batches (the decode rows of several sequences, every batch in vec_dot order)
// with each weight super-block unpacked once for up to kMaxCols activation columns.
//
// Decode batches: the vec_dot order keeps 8 int32 lanes per (row, column, super-block), so
// they cannot take the lane-order GEMMs without changing a request's bits. The DecodedK path
// (matmul_k) stored a decoded block and re-read it per column: on Zen 4 two columns cost
// 4-7x one and eight 8x (kernels_bench Decode/). FusedQ4K::dot_cols / FusedQ6K::dot_cols
// build the weights' quants and scale vectors in registers once per 32-element chunk and
// every column's maddubs / Scale::acc consumes them (two columns 1.5x one, eight 5.5x).
// One column is dot_cols<1>: the same code. Each column's int32 lanes hold the same integer
// products in any grouping (no overflow), and its float steps (d * da, the fma into acc.v,
// Q4_K's min term into acc.m, finish_k) are the single column's, in the same order: every
// output equals vec_dot to the bit (kernels_test, odd shapes, 1-9 and 40 columns).
#pragma once
#include "kernels/cpu/avx2_kquants.h"

namespace kernels::cpu::avx2 {
// Internal linkage: compiled with different -m flags in different files (see avx2_kquants.h).
namespace {

// ---- Q4_K and Q6_K matrix x vector (decode): fused ------------------------------------
// ggml's AVX2 ggml_vec_dot_q4_K_q8_K / _q6_K_q8_K steps: the scales picked per 32-element
// chunk by byte shuffles and nothing kept in a DecodedK, so about half the instructions of
// vec_dot_k (which decodes a block once for many activation rows). The same integers and
// the same float operations in the same order as vec_dot_k: bit-identical results.
// Scale adds scale * (int16 pairs) into int32 lanes: madd + add here, one vpdpwssd with
// AVX512-VNNI (avx512.cc).
struct MaddScale {
  static __m256i acc(__m256i sum, __m256i scale, __m256i p16) {
    return _mm256_add_epi32(sum, _mm256_madd_epi16(scale, p16));
  }
};

// Shuffle putting int16 lane lo (of 8) in every lane of the low 128 bits, hi in the high.
inline __m256i scale_shuffle(int lo, int hi) {
  const char a = static_cast<char>(2 * lo), b = static_cast<char>(2 * lo + 1);
  const char c = static_cast<char>(2 * hi), d = static_cast<char>(2 * hi + 1);
  return _mm256_setr_epi8(a, b, a, b, a, b, a, b, a, b, a, b, a, b, a, b,
                          c, d, c, d, c, d, c, d, c, d, c, d, c, d, c, d);
}
inline __m256i scale_shuffle_k4(int i) { return scale_shuffle(i, i); }

// Q4_K and Q5_K: Q5_K's chunks get each quant's fifth bit (bit j of qh[l] for chunk j)
// at bit 4; its mins go as ggml's summs into lane 0 of acc.m (add_q5_k_mins, as
// dot_k<DecQ5_K>), Q4_K's stay in 4 lanes.
template <class Block, class Dec>
struct FusedQ45K {
  using W = Block;
  using D = Dec;
  static constexpr bool kQ5 = std::is_same_v<Block, BlockQ5_K>;
  // acc[j] += one block . activation block a[j] for j < N: the quants and scale vectors
  // built once per 32-element chunk, two int32 chains per column (matmul_cols).
  template <class Scale, int N>
  static void dot_cols(const W& b, const BlockQ8_K* const* a, AccK* acc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
    const __m256i mins_and_scales = _mm256_cvtepu8_epi16(unpack_scales_k4(b.scales));  // 8 scales, 8 mins
    const __m128i mins16 = _mm256_extracti128_si256(mins_and_scales, 1);
    const __m128i sc128 = _mm256_castsi256_si128(mins_and_scales);
    const __m256i scales = _mm256_set_m128i(sc128, sc128);
    __m256i hbits = _mm256_setzero_si256();
    if constexpr (kQ5) hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
    auto fifth = [&](__m256i q, int j) SHARDLM_INLINE {
      if constexpr (!kQ5) return q;
      return _mm256_or_si256(
          q, _mm256_and_si256(j <= 4 ? _mm256_slli_epi16(hbits, 4 - j) : _mm256_srli_epi16(hbits, j - 4), bit4));
    };
    __m256i sum[N][2];  // two int32 chains per column
    for (int j = 0; j < N; ++j) sum[j][0] = sum[j][1] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * c));
      const __m256i ql = fifth(_mm256_and_si256(bits, m4), 2 * c);
      const __m256i qh = fifth(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4), 2 * c + 1);
      const __m256i sl = _mm256_shuffle_epi8(scales, scale_shuffle_k4(2 * c));
      const __m256i sh = _mm256_shuffle_epi8(scales, scale_shuffle_k4(2 * c + 1));
      for (int j = 0; j < N; ++j) {
        const __m256i al = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[j]->qs + 64 * c));
        const __m256i ah = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[j]->qs + 64 * c + 32));
        sum[j][0] = Scale::acc(sum[j][0], sl, _mm256_maddubs_epi16(ql, al));
        sum[j][1] = Scale::acc(sum[j][1], sh, _mm256_maddubs_epi16(qh, ah));
      }
    }
    const float d = fp16(b.d), dmin = fp16(b.dmin);
    for (int j = 0; j < N; ++j) {
      const __m256i sumi = _mm256_add_epi32(sum[j][0], sum[j][1]);
      const __m128i mins = _mm_madd_epi16(mins16, bsum_pairs(*a[j]));
      acc[j].v = _mm256_fmadd_ps(_mm256_set1_ps(d * a[j]->d), _mm256_cvtepi32_ps(sumi), acc[j].v);
      if constexpr (kQ5) add_q5_k_mins(mins, -dmin * a[j]->d, acc[j]);
      else acc[j].m = _mm_fmadd_ps(_mm_set1_ps(-dmin * a[j]->d), _mm_cvtepi32_ps(mins), acc[j].m);
    }
  }
};
using FusedQ4K = FusedQ45K<BlockQ4_K, DecQ4_K>;
using FusedQ5K = FusedQ45K<BlockQ5_K, DecQ5_K>;

struct FusedQ6K {
  using W = BlockQ6_K;
  using D = DecQ6_K;
  // acc[j] += one Q6_K block . activation block a[j] for j < N (chunk j = 4h + k: 16-element
  // scales 2j, 2j+1).
  template <class Scale, int N>
  static void dot_cols(const W& b, const BlockQ8_K* const* a, AccK* acc) {
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    __m256i sum[N][2];  // two int32 chains per column
    for (int j = 0; j < N; ++j) sum[j][0] = sum[j][1] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m128i half = h == 0 ? _mm256_castsi256_si128(sc16) : _mm256_extracti128_si256(sc16, 1);
      const __m256i scales = _mm256_set_m128i(half, half);  // scales 8h .. 8h+7
      __m256i q[4];
      q6_k_quants(b, h, q);
      for (int k = 0; k < 4; ++k) {
        const __m256i scale = _mm256_shuffle_epi8(scales, scale_shuffle(2 * k, 2 * k + 1));
        for (int j = 0; j < N; ++j) {
          const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[j]->qs + 128 * h + 32 * k));
          sum[j][k % 2] = Scale::acc(sum[j][k % 2], scale, _mm256_maddubs_epi16(q[k], qa));
        }
      }
    }
    const float d = fp16(b.d);
    for (int j = 0; j < N; ++j) {
      const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[j]->bsums));
      const __m256i bias = _mm256_slli_epi32(_mm256_madd_epi16(sc16, bsums), 5);  // the +32 of every quant
      const __m256i sumi = _mm256_add_epi32(sum[j][0], sum[j][1]);
      acc[j].v = _mm256_fmadd_ps(_mm256_set1_ps(d * a[j]->d), _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi, bias)),
                                 acc[j].v);
    }
  }
};

// Prefetch for a matrix x vector step at block p (and row_cols' 2-4 columns). The AVX2 table
// (AVX2-only CPUs) takes every line of the block kAvx2PrefetchBytes ahead: on a Zen 3
// (kernels_bench Matvec/*/14336x4096, weights from memory, medians of 9 alternating runs)
// Q4_K 11.7 -> 13.0 GB/s and Q6_K 11.7 -> 14.0, against one line 256 bytes ahead (no
// prefetch: slower still); 2 and 3 sequences decoding (1B shape, `bench --parallel`) Q6_K
// +8%, Q4_K +7% at 2, Q5_K and --exact-batches prompts unchanged.
// The AVX-512 table keeps one line kPrefetchBytes ahead (chosen on Zen 4, see there; not
// measured with this rule). Prefetch only: the hint changes no result.
constexpr int kAvx2PrefetchBytes = 1536;
template <class Scale, class W>
inline void prefetch_block(const W* p) {
  const char* c = reinterpret_cast<const char*>(p);
  if constexpr (std::is_same_v<Scale, MaddScale>) {
    for (int l = 0; l < int(sizeof(W)); l += 64) _mm_prefetch(c + kAvx2PrefetchBytes + l, _MM_HINT_T0);
  } else {
    _mm_prefetch(c + kPrefetchBytes, _MM_HINT_T0);
  }
}

// acc += one row . the activation row (n elements).
template <class F, class Scale>
inline void dot_row(int64_t n, const typename F::W* wb, const BlockQ8_K* xb, AccK& acc) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    prefetch_block<Scale>(wb + i);
    if constexpr (requires { F::template dot<Scale>(wb[i], xb[i], acc); })  // avx512_wide.h's forms
      F::template dot<Scale>(wb[i], xb[i], acc);
    else {
      const BlockQ8_K* a = xb + i;
      F::template dot_cols<Scale, 1>(wb[i], &a, &acc);
    }
  }
}

template <class F, class Scale>
float vec_dot_fused(int64_t n, const void* w, const void* x) {
  AccK acc;
  dot_row<F, Scale>(n, static_cast<const typename F::W*>(w), static_cast<const BlockQ8_K*>(x), acc);
  return finish_k<typename F::D>(acc);
}

// finish_k of four accumulators at once, by transposes: lane for lane the same additions
// in the same order as finish_k (hsum's (x0 + x2) + (x1 + x3) of the folded halves,
// likewise for Q4_K's mins), so out[r] equals finish_k(acc[r]) to the bit.
template <class D>
inline __m128 finish_k_x4(const AccK* acc) {
  auto fold4 = [](__m128 a, __m128 b, __m128 c, __m128 d) {  // [(x0+x2)+(x1+x3)] of each
    const __m128 ab = _mm_add_ps(_mm_unpacklo_ps(a, b), _mm_unpackhi_ps(a, b));  // a02 b02 a13 b13
    const __m128 cd = _mm_add_ps(_mm_unpacklo_ps(c, d), _mm_unpackhi_ps(c, d));
    return _mm_add_ps(_mm_movelh_ps(ab, cd), _mm_movehl_ps(cd, ab));
  };
  auto half = [](__m256 v) { return _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); };
  const __m128 v = fold4(half(acc[0].v), half(acc[1].v), half(acc[2].v), half(acc[3].v));
  if constexpr (std::is_same_v<D, DecQ4_K>) return _mm_add_ps(v, fold4(acc[0].m, acc[1].m, acc[2].m, acc[3].m));
  else if constexpr (std::is_same_v<D, DecQ5_K>)  // lane 0 of each m
    return _mm_add_ps(v, _mm_movelh_ps(_mm_unpacklo_ps(acc[0].m, acc[1].m), _mm_unpacklo_ps(acc[2].m, acc[3].m)));
  else return v;
}

// Rows [r0, r1) of a Q4_K / Q6_K matrix: one activation row fused, more by matmul_k.
template <class F, class Scale>
void matmul_fused(int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1, const void* xq,
                  size_t xq_stride, int64_t n_batch, float* y, int64_t y_stride) {
  if (n_batch == 1) {  // rows one after another (one memory stream), reduced four at a time
    const auto* w = static_cast<const uint8_t*>(W);
    const auto* xb = static_cast<const BlockQ8_K*>(xq);
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) {
      AccK acc[4];
      for (int k = 0; k < 4; ++k)
        dot_row<F, Scale>(n, reinterpret_cast<const typename F::W*>(w + (r + k) * row_stride), xb, acc[k]);
      _mm_storeu_ps(y + r, finish_k_x4<typename F::D>(acc));
    }
    for (; r < r1; ++r) y[r] = vec_dot_fused<F, Scale>(n, w + r * row_stride, xq);
    return;
  }
  matmul_k<typename F::D>(n, W, row_stride, r0, r1, xq, xq_stride, n_batch, y, y_stride);
}


constexpr int kMaxCols = 4;  // columns per pass (8 spilled registers: measured slower than 2 x 4)

// y[j * ys + r] = row r . column c0 + j for j < N, one pass over the row's super-blocks.
template <class F, class Scale, int N>
void row_cols(int64_t nb, const typename F::W* wr, const uint8_t* x, size_t xs, float* y, int64_t ys, int64_t r) {
  AccK acc[N];
  const BlockQ8_K* a[N];
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_block<Scale>(wr + b);
    for (int j = 0; j < N; ++j) a[j] = reinterpret_cast<const BlockQ8_K*>(x + j * xs) + b;
    F::template dot_cols<Scale, N>(wr[b], a, acc);
  }
  for (int j = 0; j < N; ++j) y[j * ys + r] = finish_k<typename F::D>(acc[j]);
}

// The decoders whose vec_dot-order batches of more than 16 columns on the AVX2 table take
// matmul_k's DecodedK (decoded once per super-block for many columns) instead of row_cols
// (re-unpacked per 4 columns): D::kDecodedAbove16, Q5_K's (below) and IQ4_XS's (its
// codebook shuffle and sign flips per chunk: 64 columns 29.0 ms through matmul_k, 36.1
// through row_cols, Zen 3).
template <class D>
constexpr bool decoded_above_16() { return requires { D::kDecodedAbove16; }; }

// Rows [r0, r1) x n_batch columns of a K-quant matrix (Q2_K-Q6_K, IQ4_XS; kernels::matmul's
// contract): one column by matmul_fused's matrix x vector, lane-order batches by gemm_lanes
// (through matmul_fused / matmul_k), every other batch here. Rows go in chunks of 8 so that
// a chunk stays in cache while its columns pass over it kMaxCols at a time. Q5_K's
// vec_dot-order batches (--exact-batches prompts) on the AVX2 table (16 registers) above 16
// columns take matmul_k's DecodedK, measured 5% faster (Zen 4, before Q5_K had a lane
// order: at 128 columns AVX-512 50.8 -> 41.4 ms here, AVX2 64 columns 25.1 -> 26.4 ms).
template <class F, class Scale>
void matmul_cols(int64_t n, const void* W, size_t row_stride, int64_t r0, int64_t r1, const void* xq,
                 size_t xq_stride, int64_t n_batch, float* y, int64_t y_stride) {
  if (n_batch == 1 || (n_batch >= kGemmMinBatch && ::kernels::lane_order()))
    return matmul_fused<F, Scale>(n, W, row_stride, r0, r1, xq, xq_stride, n_batch, y, y_stride);
  if constexpr (decoded_above_16<typename F::D>() && std::is_same_v<Scale, MaddScale>)
    if (n_batch > 16) return matmul_k<typename F::D>(n, W, row_stride, r0, r1, xq, xq_stride, n_batch, y, y_stride);
  using RowFn = void (*)(int64_t, const typename F::W*, const uint8_t*, size_t, float*, int64_t, int64_t);
  static constexpr RowFn kRow[kMaxCols] = {row_cols<F, Scale, 1>, row_cols<F, Scale, 2>, row_cols<F, Scale, 3>,
                                           row_cols<F, Scale, 4>};
  const auto* w = static_cast<const uint8_t*>(W);
  const auto* x = static_cast<const uint8_t*>(xq);
  const int64_t nb = n / kQK_K;
  constexpr int64_t kRowChunk = 8;
  for (int64_t rc = r0; rc < r1; rc += kRowChunk) {
    const int64_t re = std::min(r1, rc + kRowChunk);
    for (int64_t c0 = 0; c0 < n_batch; c0 += kMaxCols) {
      const int rn = static_cast<int>(std::min<int64_t>(kMaxCols, n_batch - c0));
      for (int64_t r = rc; r < re; ++r)
        kRow[rn - 1](nb, reinterpret_cast<const typename F::W*>(w + r * row_stride), x + c0 * xq_stride, xq_stride,
                     y + c0 * y_stride, y_stride, r);
    }
  }
}

}  // namespace
}  // namespace kernels::cpu::avx2
