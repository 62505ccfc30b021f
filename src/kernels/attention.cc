// attention.cc: the reference attention, the scalar tile kernels, and the portable driver
// of flash attention / flash decoding (tiling, online softmax, grouped-query heads, the
// split over threads and the log-sum-exp merge). The driver calls the tile kernels through
// attention_internal::TileKernels, so the AVX2 kernels (cpu/attention_avx2.cc), the NEON
// ones (cpu/attention_neon.cc, the AVX2 arithmetic) and the scalar ones below run exactly
// the same tiling.
// Deliberately not here: SIMD intrinsics (see cpu/attention_avx2.cc), masks other than
// causal and sliding-window, and any allocation that grows with the context (scores never
// exceed a tile).
#include "kernels/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/kernels.h"
#include "tensor/quants.h"
#include "tensor/types.h"
#include "util/check.h"
#include "util/fp16.h"

namespace kernels {

using attention_internal::TileKernels;
using tensor::BlockQ8_0;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int kKvTile = 64;          // KV positions per tile (scores are rows x kKvTile)
constexpr int kRowsPerUnit = 64;     // target (query, head) rows per work unit
constexpr int kDecodeSplitMin = 512;  // flash_attention hands n_q == 1 to flash_decode from here
// Every query's context is cut at absolute multiples of kChunk; each chunk's softmax state
// (max, sum, acc) is computed by the tiles above and the chunks are folded in order by
// fold_chunk. flash_decode gives each thread whole chunks and folds them the same way, so a
// row's result is the same to the bit whether it is computed in a batch of any split, by
// one thread or by flash decoding over several.
constexpr int kChunk = 256;
static_assert(kChunk % kKvTile == 0, "chunks are whole KV tiles");

// ---- query preparation: round Q to the K cache's dot-product type -------------------------

size_t q_row_bytes(KvFormat f, int head_dim) {
  return f == KvFormat::kQ8_0 ? size_t(head_dim / tensor::kQK) * sizeof(BlockQ8_0)
                              : size_t(head_dim) * sizeof(float);
}

void prepare_q_row(const TileKernels& tk, KvFormat f, const float* x, uint8_t* dst, int head_dim) {
  switch (f) {
    case KvFormat::kF32:
      std::memcpy(dst, x, size_t(head_dim) * sizeof(float));
      break;
    case KvFormat::kF16:
      std::memcpy(dst, x, size_t(head_dim) * sizeof(float));
      tk.round_q(reinterpret_cast<float*>(dst), head_dim);
      break;
    case KvFormat::kQ8_0:
      quantize_activation(tensor::Type::Q8_0, x, dst, head_dim);
      break;
  }
}

// ---- scalar tile kernels -------------------------------------------------------------------

float dot_scalar(KvFormat f, const uint8_t* q, const uint8_t* k, int head_dim) {
  float sum = 0.0f;
  if (f == KvFormat::kQ8_0) {
    const auto* qb = reinterpret_cast<const BlockQ8_0*>(q);
    const auto* kb = reinterpret_cast<const BlockQ8_0*>(k);
    for (int b = 0; b < head_dim / tensor::kQK; ++b) {
      int isum = 0;
      for (int i = 0; i < tensor::kQK; ++i) isum += int(qb[b].qs[i]) * int(kb[b].qs[i]);
      sum += float(isum) * (util::fp16_to_f32(qb[b].d) * util::fp16_to_f32(kb[b].d));
    }
    return sum;
  }
  const auto* qf = reinterpret_cast<const float*>(q);
  if (f == KvFormat::kF16) {
    const auto* kh = reinterpret_cast<const uint16_t*>(k);
    for (int i = 0; i < head_dim; ++i) sum += qf[i] * util::fp16_to_f32(kh[i]);
  } else {
    const auto* kf = reinterpret_cast<const float*>(k);
    for (int i = 0; i < head_dim; ++i) sum += qf[i] * kf[i];
  }
  return sum;
}

void scores_scalar(KvFormat f, const uint8_t* q, size_t q_row_bytes, int n_rows, const uint8_t* k,
                   size_t k_row_bytes, int n_keys, int head_dim, float* s, int ld) {
  for (int r = 0; r < n_rows; ++r)
    for (int j = 0; j < n_keys; ++j)
      s[r * ld + j] = dot_scalar(f, q + r * q_row_bytes, k + j * k_row_bytes, head_dim);
}

void accumulate_v_scalar(KvFormat f, const float* p, int ld, int n_rows, const uint8_t* v,
                         size_t v_row_bytes, int n_keys, int head_dim, float* acc) {
  std::vector<float> row(head_dim);  // [head_dim] one V row as F32
  for (int j = 0; j < n_keys; ++j) {
    kv_load_row(f, v + j * v_row_bytes, row.data(), head_dim);
    for (int r = 0; r < n_rows; ++r) {
      const float pr = p[r * ld + j];
      float* a = acc + size_t(r) * head_dim;
      for (int i = 0; i < head_dim; ++i) a[i] += pr * row[i];
    }
  }
}

float scale_max_scalar(float* x, int n, float scale) {
  float mx = kNegInf;
  for (int i = 0; i < n; ++i) mx = std::max(mx, x[i] *= scale);
  return mx;
}

void round_f16_scalar(float* x, int n) {
  for (int i = 0; i < n; ++i) x[i] = util::fp16_to_f32(util::f32_to_fp16(x[i]));
}

float exp_sum_scalar(float* x, int n, float m) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  return sum;
}

const TileKernels kScalarKernels = {scores_scalar, accumulate_v_scalar, scale_max_scalar,
                                    exp_sum_scalar, round_f16_scalar};

const TileKernels& pick_kernels(const AttentionArgs& a) {
  if (a.bf16 && a.kv[0].format == KvFormat::kF16 && attention_bf16_head_dim_ok(a.head_dim) &&
      attention_bf16_available()) {
    static const TileKernels bf16 =
        attention_internal::avx512bf16_tile_kernels(*attention_internal::avx2_tile_kernels());
    return bf16;
  }
  const TileKernels* k = attention_internal::avx2_tile_kernels();
  if (!k) k = attention_internal::neon_tile_kernels();
  return (k && a.head_dim % 16 == 0) ? *k : kScalarKernels;
}

// First position the query at position p sees.
int window_lo(const AttentionArgs& a, int p) { return a.window > 0 ? std::max(0, p - a.window + 1) : 0; }

// Byte offset of position p's row in a view (a ring wraps; a paged view goes through its block table).
size_t row_offset(const KvHeadView& v, int p) {
  if (v.blocks) return size_t(v.blocks[p / v.block_rows]) * v.block_stride + size_t(p % v.block_rows) * v.row_bytes;
  return size_t(v.ring > 0 ? p % v.ring : p) * v.row_bytes;
}

void check_args(const AttentionArgs& a) {
  CHECK(a.n_q >= 1 && a.pos0 >= 0 && a.n_heads >= 1 && a.n_kv_heads >= 1 && a.head_dim >= 1);
  CHECK(a.kv_of_head && a.q && a.out && a.kv && a.window >= 0);
  const int end = a.pos0 + a.n_q;  // one past the last position read
  for (int g = 0; g < a.n_kv_heads; ++g) {
    const int ring = a.kv[g].ring;
    if (ring <= 0 || end <= ring) continue;
    CHECK_MSG(ring % kKvTile == 0, "a KV ring that wraps must be a multiple of 64 rows");
    CHECK_MSG(a.window > 0 && a.window + a.n_q - 1 <= ring, "a KV ring must hold each query's window");
  }
  const KvFormat f = a.kv[0].format;
  CHECK_MSG(f != KvFormat::kQ8_0 || a.head_dim % tensor::kQK == 0,
            "a Q8_0 KV cache needs head_dim to be a multiple of 32");
  for (int g = 0; g < a.n_kv_heads; ++g) {
    CHECK_MSG(a.kv[g].format == f, "all KV heads must share one format");
    CHECK(a.kv[g].row_bytes >= kv_row_bytes(f, a.head_dim));
    const size_t align = f == KvFormat::kF32 ? 4 : 2;  // rows hold floats / halves
    CHECK_MSG(a.kv[g].row_bytes % align == 0 && uintptr_t(a.kv[g].k) % align == 0 &&
                  uintptr_t(a.kv[g].v) % align == 0,
              "KV rows must be aligned to their element size");
    CHECK_MSG(!a.kv[g].blocks || (a.kv[g].block_rows > 0 && a.kv[g].block_rows % kKvTile == 0),
              "KV blocks must be whole tiles");
  }
  for (int h = 0; h < a.n_heads; ++h) CHECK(a.kv_of_head[h] >= 0 && a.kv_of_head[h] < a.n_kv_heads);
}

// Query heads grouped by the KV head they read: heads[begin[i] .. begin[i+1]) read kv[i].
struct Groups {
  std::vector<int> kv;     // [n_groups] KV head of each non-empty group
  std::vector<int> begin;  // [n_groups + 1] offsets into heads
  std::vector<int> heads;  // [n_heads] query heads ordered by group
  int max_size = 0;
};

Groups make_groups(const AttentionArgs& a) {
  Groups g;
  std::vector<int> count(a.n_kv_heads, 0);
  for (int h = 0; h < a.n_heads; ++h) ++count[a.kv_of_head[h]];
  g.begin.push_back(0);
  for (int kv = 0; kv < a.n_kv_heads; ++kv) {
    if (count[kv] == 0) continue;
    g.kv.push_back(kv);
    for (int h = 0; h < a.n_heads; ++h)
      if (a.kv_of_head[h] == kv) g.heads.push_back(h);
    g.begin.push_back(int(g.heads.size()));
    g.max_size = std::max(g.max_size, count[kv]);
  }
  return g;
}

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Asks for n rows of `width` bytes, `stride` apart, to be brought into L2. The V tile is
// read column-chunk by column-chunk, which the hardware prefetcher follows poorly; asking
// for it while the tile's scores are computed hides the misses (decode at context 4096,
// F16: about 2x faster). K rows are read in order and need no help (prefetching the next
// K tile too measured slower).
void prefetch_rows(const uint8_t* p, int n, size_t stride, size_t width) {
  for (int j = 0; j < n; ++j)
    for (size_t b = 0; b < width; b += 64) __builtin_prefetch(p + j * stride + b, 0, 2);
}

// Folds one chunk's softmax state (m, l, a[hd]) into the running state (M, L, A[hd]):
// rescale both to the larger max and add. The only place chunks are combined (not inlined,
// so every caller rounds identically).
__attribute__((noinline)) void fold_chunk(float* M, float* L, float* A, float m, float l, const float* a,
                                          int hd) {
  if (l == 0.0f) return;  // the chunk saw no key of this row
  if (*L == 0.0f) {
    *M = m, *L = l;
    std::memcpy(A, a, size_t(hd) * sizeof(float));
    return;
  }
  const float mx = std::max(*M, m);
  const float wa = std::exp(*M - mx), wb = std::exp(m - mx);
  *L = *L * wa + l * wb;
  for (int i = 0; i < hd; ++i) A[i] = A[i] * wa + a[i] * wb;
  *M = mx;
}

// The factor that turns a row's folded state (max M, sum L, unnormalised acc) into its
// output: 1 / L, or with an attention sink s, exp(M - mx) / (L exp(M - mx) + exp(s - mx)),
// mx = max(M, s) (the sink joins the denominator only). 0 when the row saw no key.
float normaliser(float M, float L, const float* sink) {
  if (L == 0.0f) return 0.0f;
  if (!sink) return 1.0f / L;
  const float mx = std::max(M, *sink);
  const float w = std::exp(M - mx);
  return w / (L * w + std::exp(*sink - mx));
}

// Per-thread buffers, kept between calls so a decode step allocates nothing.
struct Scratch {
  std::vector<uint8_t> q;  // [rows][q_row_bytes] prepared queries
  std::vector<float> s;    // [rows][kKvTile] scores, then probabilities
  std::vector<float> acc;  // [rows][head_dim] unnormalised output of the current chunk
  std::vector<float> m;    // [rows] running max of the current chunk
  std::vector<float> l;    // [rows] running sum of exp of the current chunk
  std::vector<float> tacc, tm, tl;  // the same, folded over the finished chunks
};

Scratch& thread_scratch() {
  thread_local Scratch s;
  return s;
}

// One work unit: query tokens [t0, t1) x the query heads of one group, over KV positions
// [c0, c1) (c0 a multiple of kChunk, c1 already clipped to the causal limit pos0 + t1).
// With a window, the tiles before the first row's window are skipped and each tile runs
// only the rows whose window meets it, so a row reads the same tiles (those meeting its
// window) in whatever unit it sits: its result does not depend on the batch.
// Row r is query token t0 + r / G and head heads[r % G]. Writes normalised output, or,
// when partial is set (one chunk: c1 - c0 <= kChunk), that chunk's (max, sum, acc[head_dim])
// for each head at partial + (head * n_chunks + chunk) * (2 + hd).
void run_unit(const AttentionArgs& a, const TileKernels& tk, int kv, const int* heads, int G,
              int t0, int t1, int c0, int c1, float* partial, int n_chunks, int chunk) {
  const KvHeadView& view = a.kv[kv];
  const KvFormat f = view.format;
  const int hd = a.head_dim;
  const int R = (t1 - t0) * G;
  const size_t qrb = q_row_bytes(f, hd);
  CHECK(c0 % kChunk == 0 && (!partial || c1 - c0 <= kChunk));
  Scratch& sc = thread_scratch();
  if (sc.q.size() < R * qrb) sc.q.resize(R * qrb);
  if (sc.s.size() < size_t(R) * kKvTile) sc.s.resize(size_t(R) * kKvTile);
  if (sc.acc.size() < size_t(R) * hd) sc.acc.resize(size_t(R) * hd), sc.tacc.resize(size_t(R) * hd);
  if (sc.m.size() < size_t(R)) sc.m.resize(R), sc.l.resize(R), sc.tm.resize(R), sc.tl.resize(R);
  float* acc = sc.acc.data();
  auto reset_chunk = [&] {
    std::fill(acc, acc + size_t(R) * hd, 0.0f);
    std::fill(sc.m.begin(), sc.m.begin() + R, kNegInf);
    std::fill(sc.l.begin(), sc.l.begin() + R, 0.0f);
  };
  auto fold_rows = [&] {
    for (int r = 0; r < R; ++r)
      fold_chunk(&sc.tm[r], &sc.tl[r], &sc.tacc[size_t(r) * hd], sc.m[r], sc.l[r], acc + size_t(r) * hd, hd);
  };
  reset_chunk();
  std::fill(sc.tm.begin(), sc.tm.begin() + R, kNegInf);
  std::fill(sc.tl.begin(), sc.tl.begin() + R, 0.0f);
  for (int r = 0; r < R; ++r) {
    const float* x = a.q + size_t(t0 + r / G) * a.q_stride + size_t(heads[r % G]) * hd;
    prepare_q_row(tk, f, x, sc.q.data() + r * qrb, hd);
  }

  const int j_first = std::max(c0, window_lo(a, a.pos0 + t0) / kKvTile * kKvTile);
  for (int j0 = j_first; j0 < c1; j0 += kKvTile) {
    if (j0 > j_first && j0 % kChunk == 0) {  // a chunk ends: fold it, start the next
      fold_rows();
      reset_chunk();
    }
    const int nk = std::min(kKvTile, c1 - j0);
    // Rows whose query sees none of this tile: the leading ones (pos0 + t < j0) and, with a
    // window, the trailing ones (window_lo(pos0 + t) >= j0 + nk).
    const int rb = std::max(0, j0 - a.pos0 - t0) * G;
    const int re = a.window > 0 ? std::clamp(j0 + nk + a.window - 1 - a.pos0 - t0, 0, t1 - t0) * G : R;
    if (re <= rb) continue;
    float* s = sc.s.data();
    const size_t off = row_offset(view, j0);  // a tile never wraps (check_args)
    prefetch_rows(view.v + off, nk, view.row_bytes, kv_row_bytes(f, hd));
    tk.scores(f, sc.q.data() + rb * qrb, qrb, re - rb, view.k + off, view.row_bytes, nk, hd,
              s + size_t(rb) * kKvTile, kKvTile);
    for (int r = rb; r < re; ++r) {
      float* row = s + size_t(r) * kKvTile;
      const int p = a.pos0 + t0 + r / G;
      const int n_valid = std::min(nk, p - j0 + 1);
      const int j_lo = std::max(0, window_lo(a, p) - j0);  // < n_valid: the row meets the tile
      const float mx = tk.scale_max(row + j_lo, n_valid - j_lo, a.scale);
      for (int j = 0; j < j_lo; ++j) row[j] = kNegInf;
      for (int j = n_valid; j < nk; ++j) row[j] = kNegInf;
      const float m_old = sc.m[r];
      const float m_new = std::max(m_old, mx);
      if (m_new > m_old && m_old != kNegInf) {
        const float ms = std::exp(m_old - m_new);
        float* ar = acc + size_t(r) * hd;
        for (int i = 0; i < hd; ++i) ar[i] *= ms;
        sc.l[r] *= ms;
      }
      sc.m[r] = m_new;
      sc.l[r] += tk.exp_sum(row, nk, m_new);
    }
    tk.accumulate_v(f, s + size_t(rb) * kKvTile, kKvTile, re - rb, view.v + off, view.row_bytes, nk, hd,
                    acc + size_t(rb) * hd);
  }

  if (partial) {
    for (int r = 0; r < R; ++r) {
      float* p = partial + (size_t(heads[r % G]) * n_chunks + chunk) * (2 + hd);
      p[0] = sc.m[r];
      p[1] = sc.l[r];
      std::memcpy(p + 2, acc + size_t(r) * hd, size_t(hd) * sizeof(float));
    }
    return;
  }
  fold_rows();
  for (int r = 0; r < R; ++r) {
    const float* ar = &sc.tacc[size_t(r) * hd];
    float* o = a.out + size_t(t0 + r / G) * a.out_stride + size_t(heads[r % G]) * hd;
    const float inv = normaliser(sc.tm[r], sc.tl[r], a.sinks ? &a.sinks[heads[r % G]] : nullptr);
    for (int i = 0; i < hd; ++i) o[i] = ar[i] * inv;
  }
}

}  // namespace

namespace attention_internal {
const TileKernels& scalar_tile_kernels() { return kScalarKernels; }
}  // namespace attention_internal

bool attention_bf16_available() {
#if defined(__x86_64__) || defined(_M_X64)
  static const bool cpu = __builtin_cpu_supports("avx512bf16");
  const Isa isa = active_isa();
  return cpu && (isa == Isa::kAvx512 || isa == Isa::kAmx);
#else
  return false;
#endif
}

// ---- KV rows --------------------------------------------------------------------------------

size_t kv_row_bytes(KvFormat f, int head_dim) {
  switch (f) {
    case KvFormat::kF16: return size_t(head_dim) * 2;
    case KvFormat::kF32: return size_t(head_dim) * 4;
    case KvFormat::kQ8_0:
      CHECK_MSG(head_dim % tensor::kQK == 0, "a Q8_0 KV cache needs head_dim % 32 == 0");
      return size_t(head_dim / tensor::kQK) * sizeof(BlockQ8_0);
  }
  return 0;
}

void kv_store_row(KvFormat f, const float* x, uint8_t* dst, int head_dim) {
  switch (f) {
    case KvFormat::kF16: tensor::quantize_row(tensor::Type::F16, x, dst, head_dim); break;
    case KvFormat::kF32: std::memcpy(dst, x, size_t(head_dim) * sizeof(float)); break;
    case KvFormat::kQ8_0:
      CHECK_MSG(head_dim % tensor::kQK == 0, "a Q8_0 KV cache needs head_dim % 32 == 0");
      tensor::quantize_row(tensor::Type::Q8_0, x, dst, head_dim);
      break;
  }
}

void kv_load_row(KvFormat f, const uint8_t* src, float* x, int head_dim) {
  switch (f) {
    case KvFormat::kF16: tensor::dequantize_row(tensor::Type::F16, src, x, head_dim); break;
    case KvFormat::kF32: std::memcpy(x, src, size_t(head_dim) * sizeof(float)); break;
    case KvFormat::kQ8_0: tensor::dequantize_row(tensor::Type::Q8_0, src, x, head_dim); break;
  }
}

// ---- reference ------------------------------------------------------------------------------

void attention_ref(const AttentionArgs& a) {
  check_args(a);
  const int hd = a.head_dim;
  const KvFormat f = a.kv[0].format;
  std::vector<uint8_t> q(q_row_bytes(f, hd));           // one prepared query
  std::vector<float> s(size_t(a.pos0) + a.n_q);         // [n_ctx] scores of one query
  std::vector<float> v(hd);                             // one V row as F32
  for (int t = 0; t < a.n_q; ++t) {
    const int n_ctx = a.pos0 + t + 1, lo = window_lo(a, a.pos0 + t);
    for (int h = 0; h < a.n_heads; ++h) {
      const KvHeadView& kv = a.kv[a.kv_of_head[h]];
      prepare_q_row(kScalarKernels, f, a.q + size_t(t) * a.q_stride + size_t(h) * hd, q.data(), hd);
      float mx = kNegInf;
      for (int j = lo; j < n_ctx; ++j) {
        s[j] = dot_scalar(f, q.data(), kv.k + row_offset(kv, j), hd) * a.scale;
        mx = std::max(mx, s[j]);
      }
      if (a.sinks) mx = std::max(mx, a.sinks[h]);
      float sum = a.sinks ? std::exp(a.sinks[h] - mx) : 0.0f;
      for (int j = lo; j < n_ctx; ++j) sum += (s[j] = std::exp(s[j] - mx));
      float* o = a.out + size_t(t) * a.out_stride + size_t(h) * hd;
      std::fill(o, o + hd, 0.0f);
      for (int j = lo; j < n_ctx; ++j) {
        kv_load_row(f, kv.v + row_offset(kv, j), v.data(), hd);
        const float p = s[j] / sum;
        for (int i = 0; i < hd; ++i) o[i] += p * v[i];
      }
    }
  }
}

// ---- flash attention ------------------------------------------------------------------------

void flash_attention(const AttentionArgs& a, util::ThreadPool& pool) {
  if (a.n_q == 1 && pool.size() > 1 && a.pos0 + 1 >= kDecodeSplitMin) {
    flash_decode(a, pool);
    return;
  }
  check_args(a);
  const TileKernels& tk = pick_kernels(a);
  const Groups g = make_groups(a);
  const int n_groups = int(g.kv.size());
  const int nth = pool.size();
  // Query tiles of about kRowsPerUnit rows, made smaller while there are too few units to
  // keep every thread busy (the causal triangle makes later tiles heavier).
  int tq = std::clamp(kRowsPerUnit / g.max_size, 1, a.n_q);
  while (tq > 1 && n_groups * ceil_div(a.n_q, tq) < 4 * nth) tq = ceil_div(tq, 2);
  const int n_qt = ceil_div(a.n_q, tq);
  const int n_units = n_groups * n_qt;
  std::atomic<int> next{0};
  pool.run([&](int, int) {
    for (int u = next.fetch_add(1); u < n_units; u = next.fetch_add(1)) {
      const int qt = n_qt - 1 - u / n_groups;  // heaviest (latest) query tiles first
      const int gi = u % n_groups;
      const int t0 = qt * tq, t1 = std::min(a.n_q, t0 + tq);
      run_unit(a, tk, g.kv[gi], g.heads.data() + g.begin[gi], g.begin[gi + 1] - g.begin[gi],
               t0, t1, 0, a.pos0 + t1, nullptr, 0, 0);
    }
  });
}

void flash_attention_batch(const AttentionArgs* segs, int n_segs, util::ThreadPool& pool) {
  CHECK(n_segs >= 1);
  struct Unit {
    int seg, t0, t1, gi;
  };
  std::vector<Unit> units;
  std::vector<Groups> groups(n_segs);
  const int nth = pool.size();
  for (int s = 0; s < n_segs; ++s) {
    const AttentionArgs& a = segs[s];
    check_args(a);
    groups[s] = make_groups(a);
    const int n_groups = int(groups[s].kv.size());
    // The tiling of flash_attention; a row's result does not depend on it.
    int tq = std::clamp(kRowsPerUnit / groups[s].max_size, 1, a.n_q);
    while (tq > 1 && n_groups * ceil_div(a.n_q, tq) < 4 * nth) tq = ceil_div(tq, 2);
    for (int t0 = 0; t0 < a.n_q; t0 += tq)
      for (int gi = 0; gi < n_groups; ++gi) units.push_back({s, t0, std::min(a.n_q, t0 + tq), gi});
  }
  // Heaviest (latest positions) first.
  std::stable_sort(units.begin(), units.end(), [&](const Unit& x, const Unit& y) {
    return segs[x.seg].pos0 + x.t1 > segs[y.seg].pos0 + y.t1;
  });
  std::atomic<int> next{0};
  const int n_units = int(units.size());
  pool.run([&](int, int) {
    for (int u = next.fetch_add(1); u < n_units; u = next.fetch_add(1)) {
      const Unit& x = units[u];
      const AttentionArgs& a = segs[x.seg];
      const Groups& g = groups[x.seg];
      run_unit(a, pick_kernels(a), g.kv[x.gi], g.heads.data() + g.begin[x.gi], g.begin[x.gi + 1] - g.begin[x.gi],
               x.t0, x.t1, 0, a.pos0 + x.t1, nullptr, 0, 0);
    }
  });
}

void flash_decode(const AttentionArgs& a, util::ThreadPool& pool) {
  CHECK_MSG(a.n_q == 1, "flash_decode takes one query token");
  check_args(a);
  const TileKernels& tk = pick_kernels(a);
  const Groups g = make_groups(a);
  const int n_groups = int(g.kv.size());
  const int hd = a.head_dim;
  const int n_ctx = a.pos0 + 1;
  // Whole chunks at the same absolute boundaries as flash_attention's, so the fold below
  // reproduces its result exactly; units are taken dynamically for balance.
  const int n_chunks = ceil_div(n_ctx, kChunk);
  const int chunk_len = kChunk;
  thread_local std::vector<float> partials;  // [n_heads][n_chunks][2 + head_dim]
  float* part = nullptr;
  if (n_chunks > 1) {
    partials.resize(size_t(a.n_heads) * n_chunks * (2 + hd));
    part = partials.data();
  }
  // With a window, the chunks before it hold nothing for this query: skipped.
  const int c_first = window_lo(a, a.pos0) / kChunk, n_run = n_chunks - c_first;
  const int n_units = n_groups * n_run;
  std::atomic<int> next{0};
  pool.run([&](int, int) {
    for (int u = next.fetch_add(1); u < n_units; u = next.fetch_add(1)) {
      const int gi = u / n_run, c = c_first + u % n_run;
      const int c0 = c * chunk_len, c1 = std::min(n_ctx, c0 + chunk_len);
      run_unit(a, tk, g.kv[gi], g.heads.data() + g.begin[gi], g.begin[gi + 1] - g.begin[gi],
               0, 1, c0, c1, part, n_chunks, c);
    }
  });
  if (!part) return;

  // Merge: fold the chunks in order (as run_unit does), then normalise.
  pool.run([&](int ith, int nth_run) {
    int64_t h0, h1;
    util::split_range(a.n_heads, ith, nth_run, &h0, &h1);
    std::vector<float> acc(hd);
    for (int64_t h = h0; h < h1; ++h) {
      const float* p = part + size_t(h) * n_chunks * (2 + hd);
      float m = kNegInf, l = 0.0f;
      for (int c = c_first; c < n_chunks; ++c) {
        const float* pc = p + c * (2 + hd);
        fold_chunk(&m, &l, acc.data(), pc[0], pc[1], pc + 2, hd);
      }
      float* o = a.out + size_t(h) * hd;
      const float inv = normaliser(m, l, a.sinks ? &a.sinks[h] : nullptr);
      for (int i = 0; i < hd; ++i) o[i] = acc[i] * inv;
    }
  });
}

}  // namespace kernels
