// flash_attention.comp: causal attention for a batch of queries (prefill). A workgroup
// takes 8 query rows of one head; it walks the KV head's F16 cache in tiles of 16
// positions (kept as F16 pairs in shared memory) up to the last row's position, keeping
// per row the running max m, the running sum l and an F32 accumulator rescaled by
// exp(m_old - m_new) (online softmax), so the score matrix is never stored beyond one
// 8 x 16 tile. Q is rounded to F16 first, as the CPU does for an F16 cache (its
// prepare_q_row); scores and sums are F32.
// The cache's rows: position j at row j of its KV head's plane (n_rows rows), or through a
// block table (block_rows > 0, a multiple of BC; model/kv_cache.h's paged cache) at row
// table[table0 + j / block_rows] * block_rows + j % block_rows: a tile is one run of rows
// either way, read and summed in the same order.
#version 450
#include "f16.glsl"

#define BR 8      // query rows per workgroup
#define BC 16     // KV positions per tile
#define DMAX 256  // largest head_dim (shared memory: 8 KiB each for Q, K and V)
#define NT 128    // invocations
layout(local_size_x = NT) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };      // [n_q][n_heads][head_dim]
layout(std430, binding = 1) readonly buffer K { uint k[]; };       // f16 [n_kv_heads][n_rows][head_dim]
layout(std430, binding = 2) readonly buffer V { uint v[]; };       // f16 [n_kv_heads][n_rows][head_dim]
layout(std430, binding = 3) writeonly buffer Out { float out_[]; };  // [n_q][n_heads][head_dim]
layout(std430, binding = 4) readonly buffer Table { int table[]; };  // block ids (block_rows > 0)
// Query head h reads KV head (h + head_offset) / group (vulkan.h AttentionShape).
// window > 0: the query at position P sees positions P - window + 1 .. P only (sliding window).
layout(push_constant) uniform Push {
  uint n_q, pos0, n_heads, group, head_offset, head_dim, n_rows;
  float scale;
  uint window, block_rows, table0;
} p;

uint row(uint j) { return p.block_rows == 0u ? j : uint(table[p.table0 + j / p.block_rows]) * p.block_rows + j % p.block_rows; }

#define NEG_INF uintBitsToFloat(0xFF800000u)
shared float qs[BR][DMAX];
shared uint ks[BC][DMAX / 2];  // f16 pairs
shared uint vs[BC][DMAX / 2];
shared float sp[BR][BC];  // scores, then probabilities of the tile
shared float row_m[BR], row_l[BR], row_alpha[BR];

void main() {
  const uint tid = gl_LocalInvocationID.x, hd = p.head_dim;
  const uint t0 = gl_WorkGroupID.x * BR, h = gl_WorkGroupID.y;
  const uint kvh = (h + p.head_offset) / p.group;
  const uint kv_base = kvh * p.n_rows * (hd / 2u);  // in uints (f16 pairs)
  for (uint e = tid; e < BR * hd; e += NT) {
    const uint r = e / hd, t = t0 + r;
    qs[r][e % hd] = t < p.n_q ? f16_round_signed(q[(t * p.n_heads + h) * hd + e % hd]) : 0.0;
  }
  if (tid < BR) {
    row_m[tid] = NEG_INF;
    row_l[tid] = 0.0;
  }
  float acc[BR * DMAX / NT];  // output element tid + NT * a: row (tid + NT a) / hd
  for (uint a = 0; a < BR * DMAX / NT; ++a) acc[a] = 0.0;
  const uint kv_end = p.pos0 + min(t0 + BR, p.n_q);  // positions the tile's last row sees
  // the first tile the tile's first row sees (a window skips the tiles before it)
  const uint kv_begin = p.window > 0u && p.pos0 + t0 >= p.window ? (p.pos0 + t0 + 1u - p.window) / BC * BC : 0u;
  for (uint j0 = kv_begin; j0 < kv_end; j0 += BC) {
    const uint r0 = row(j0);  // the tile's first row (its rows follow)
    for (uint e = tid; e < BC * hd / 2u; e += NT) {
      const uint jj = e / (hd / 2u), d2 = e % (hd / 2u), j = j0 + jj;
      ks[jj][d2] = j < kv_end ? k[kv_base + (r0 + jj) * (hd / 2u) + d2] : 0u;
      vs[jj][d2] = j < kv_end ? v[kv_base + (r0 + jj) * (hd / 2u) + d2] : 0u;
    }
    barrier();
    for (uint e = tid; e < BR * BC; e += NT) {
      const uint r = e / BC, jj = e % BC, t = t0 + r, j = j0 + jj;
      float s = NEG_INF;
      if (t < p.n_q && j <= p.pos0 + t && (p.window == 0u || j + p.window > p.pos0 + t)) {
        s = 0.0;
        for (uint d2 = 0; d2 < hd / 2u; ++d2) {
          const vec2 kf = unpackHalf2x16(ks[jj][d2]);
          s += qs[r][2u * d2] * kf.x + qs[r][2u * d2 + 1u] * kf.y;
        }
        s *= p.scale;
      }
      sp[r][jj] = s;
    }
    barrier();
    if (tid < BR) {
      const uint r = tid;
      float m_new = row_m[r];
      for (uint jj = 0; jj < BC; ++jj) m_new = max(m_new, sp[r][jj]);
      float alpha = 1.0, sum = 0.0;
      if (m_new != NEG_INF) {  // rows past n_q see no key
        alpha = row_m[r] == NEG_INF ? 0.0 : exp(row_m[r] - m_new);
        for (uint jj = 0; jj < BC; ++jj) {
          const float pj = sp[r][jj] == NEG_INF ? 0.0 : exp(sp[r][jj] - m_new);
          sp[r][jj] = pj;
          sum += pj;
        }
      } else {
        for (uint jj = 0; jj < BC; ++jj) sp[r][jj] = 0.0;
      }
      row_m[r] = m_new;
      row_l[r] = row_l[r] * alpha + sum;
      row_alpha[r] = alpha;
    }
    barrier();
    for (uint a = 0; a < BR * DMAX / NT; ++a) {
      const uint e = tid + NT * a;
      if (e >= BR * hd) break;
      const uint r = e / hd, d = e % hd;
      float o = acc[a] * row_alpha[r];
      for (uint jj = 0; jj < BC; ++jj) {
        const vec2 vf = unpackHalf2x16(vs[jj][d >> 1]);
        o += sp[r][jj] * ((d & 1u) == 0u ? vf.x : vf.y);
      }
      acc[a] = o;
    }
    barrier();
  }
  for (uint a = 0; a < BR * DMAX / NT; ++a) {
    const uint e = tid + NT * a, r = e / hd, t = t0 + r;
    if (e < BR * hd && t < p.n_q) out_[(t * p.n_heads + h) * hd + e % hd] = acc[a] / row_l[r];
  }
}
