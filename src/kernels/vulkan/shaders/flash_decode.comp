// flash_decode.comp: first pass of flash decoding (one query, n_q == 1, at position pos0).
// Workgroup (c, h) takes KV positions [64 c, 64 c + 64) of query head h's KV head: scores,
// their max m, l = sum exp(s - m) and acc = sum exp(s - m) v, written to the scratch as
// [n_heads][n_chunks][2 + head_dim] = (m, l, acc[head_dim]). flash_decode_combine.comp
// merges the chunks. The cache's rows: position j at row j of its KV head's plane (n_rows
// rows), or through a block table (block_rows > 0, a multiple of CHUNK; model/kv_cache.h's
// paged cache) at row table[table0 + j / block_rows] * block_rows + j % block_rows: a
// chunk is one run of rows either way, read and summed in the same order.
#version 450
#include "f16.glsl"

#define CHUNK 64  // KV positions per workgroup = invocations
#define DMAX 256
layout(local_size_x = CHUNK) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };  // [n_heads][head_dim]
layout(std430, binding = 1) readonly buffer K { uint k[]; };   // f16 [n_kv_heads][n_rows][head_dim]
layout(std430, binding = 2) readonly buffer V { uint v[]; };   // f16 [n_kv_heads][n_rows][head_dim]
layout(std430, binding = 3) writeonly buffer Part { float part[]; };  // [n_heads][n_chunks][2 + head_dim]
layout(std430, binding = 4) readonly buffer Table { int table[]; };  // block ids (block_rows > 0)
// Query head h reads KV head (h + head_offset) / group (vulkan.h AttentionShape).
// window > 0: only positions pos0 - window + 1 .. pos0 (a chunk wholly before them writes m = -inf, l = 0).
layout(push_constant) uniform Push {
  uint pos0, n_heads, group, head_offset, head_dim, n_rows, n_chunks;
  float scale;
  uint window, block_rows, table0;
} p;

shared float qs[DMAX];
shared float pr[CHUNK];   // exp(s - m) of each position
shared float red[CHUNK];  // reductions

float v_at(uint idx) {  // f16 element idx of V
  const vec2 f = unpackHalf2x16(v[idx >> 1]);
  return (idx & 1u) == 0u ? f.x : f.y;
}

void main() {
  const uint tid = gl_LocalInvocationID.x, c = gl_WorkGroupID.x, h = gl_WorkGroupID.y, hd = p.head_dim;
  const uint kvh = (h + p.head_offset) / p.group;
  const uint n_kv = p.pos0 + 1u, j0 = c * CHUNK, j = j0 + tid;
  // the chunk's first row of the KV head's plane (its rows follow)
  const uint r0 = kvh * p.n_rows +
                  (p.block_rows == 0u ? j0 : uint(table[p.table0 + j0 / p.block_rows]) * p.block_rows + j0 % p.block_rows);
  const bool seen = j < n_kv && (p.window == 0u || j + p.window > p.pos0);
  for (uint d = tid; d < hd; d += CHUNK) qs[d] = f16_round_signed(q[h * hd + d]);  // as the CPU (prepare_q_row)
  barrier();
  float s = uintBitsToFloat(0xFF800000u);  // -inf past the context
  if (seen) {
    const uint row = (r0 + tid) * (hd / 2u);
    s = 0.0;
    for (uint d2 = 0; d2 < hd / 2u; ++d2) {
      const vec2 kf = unpackHalf2x16(k[row + d2]);
      s += qs[2u * d2] * kf.x + qs[2u * d2 + 1u] * kf.y;
    }
    s *= p.scale;
  }
  red[tid] = s;
  barrier();
  for (uint w = CHUNK / 2; w > 0u; w >>= 1) {
    if (tid < w) red[tid] = max(red[tid], red[tid + w]);
    barrier();
  }
  const float m = red[0];  // finite unless the window starts past this chunk
  barrier();
  const float e = seen ? exp(s - m) : 0.0;
  pr[tid] = e;
  red[tid] = e;
  barrier();
  for (uint w = CHUNK / 2; w > 0u; w >>= 1) {
    if (tid < w) red[tid] += red[tid + w];
    barrier();
  }
  const uint out_base = (h * p.n_chunks + c) * (2u + hd);
  if (tid == 0u) {
    part[out_base] = m;
    part[out_base + 1u] = red[0];
  }
  const uint n_here = min(uint(CHUNK), n_kv - j0);
  for (uint d = tid; d < hd; d += CHUNK) {
    float a = 0.0;
    for (uint jj = 0; jj < n_here; ++jj) a += pr[jj] * v_at((r0 + jj) * hd + d);
    part[out_base + 2u + d] = a;
  }
}
