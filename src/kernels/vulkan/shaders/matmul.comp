// matmul.comp: Y[b][r] = dot(W[r], X[b]) for a batch of F32 activation rows (prefill). A
// workgroup of 64 computes a TM = 64 rows x TN = 32 batch columns tile, each invocation an
// 8 x 4 block of it in registers (rows tr + 8j, columns tc + 8k; tr = tid / 8, tc = tid %
// 8), loading its weights and activations straight from the buffers: per 32-element chunk,
// the 4 columns' 32 activations, then each of the 8 rows dequantized once for the 4
// columns. Rows and columns past the end repeat the last one (their results are not
// stored). Each output sums its row's elements in ascending order, a chunk's m * s term
// after the chunk: the same for any batch size and column (batched rows equal each alone),
// and matvec.comp's order.
//
// Measured on lavapipe (Mesa 22.3, 2 threads, Zen 3), where reads per multiply-add are the
// cost (matvec.comp's header), `shardlm perplexity` of SmolLM2
// Q4_1, a chunk of 64 on --device vulkan: 101.9 s with one output per invocation from
// shared-memory tiles, 26.5 s with 4 x 4 outputs from shared-memory tiles, 12.5 s with 4 x 4
// straight from the buffers, 8.7 s with 8 x 4 (16 x 4: 7.4 s, but 128-row tiles). Not
// measured on a GPU, where shared-memory (or cooperative-matrix) tiles are the usual shape.
#version 450
#include "dequant.glsl"

#define TM 64  // weight rows per tile (kMatmulRows in commands.cc)
#define TN 32  // batch columns per tile (kMatmulCols)
layout(local_size_x = 64) in;
layout(std430, binding = 1) readonly buffer X { vec4 x4[]; };   // [n_batch][cols / 4]
layout(std430, binding = 2) writeonly buffer Y { float y[]; };  // [n_batch][rows]
#ifdef WTYPE_HAS_MIN
layout(std430, binding = 3) readonly buffer S { float sums[]; };   // [n_batch][cols / 32]: Q8_1's s
#endif
layout(push_constant) uniform Push { uint rows, cols, row_bytes, n_batch; } p;

void main() {
  const uint tid = gl_LocalInvocationID.x, tr = tid / 8u, tc = tid % 8u;
  const uint r0 = gl_WorkGroupID.x * TM, b0 = gl_WorkGroupID.y * TN, n_chunks = p.cols / 32u;
  uint off[8], col[4];  // the rows' byte offsets, the columns (clamped to the last)
  for (uint j = 0; j < 8u; ++j) off[j] = min(r0 + tr + 8u * j, p.rows - 1u) * p.row_bytes;
  for (uint k = 0; k < 4u; ++k) col[k] = min(b0 + tc + 8u * k, p.n_batch - 1u);
  float acc[8][4];
  for (uint j = 0; j < 8u; ++j)
    for (uint k = 0; k < 4u; ++k) acc[j][k] = 0.0;
  for (uint c = 0; c < n_chunks; ++c) {
    vec4 xv[4][8];
    for (uint k = 0; k < 4u; ++k)
      for (uint i = 0; i < 8u; ++i) xv[k][i] = x4[col[k] * (p.cols / 4u) + 8u * c + i];
#ifdef WTYPE_HAS_MIN
    float s[4];
    for (uint k = 0; k < 4u; ++k) s[k] = sums[col[k] * n_chunks + c];
#endif
    for (uint j = 0; j < 8u; ++j) {
      float v[32];
      dequantize_chunk(off[j], c, v);
      for (uint k = 0; k < 4u; ++k)
        for (uint i = 0; i < 8u; ++i) {
          acc[j][k] += v[4u * i] * xv[k][i].x;
          acc[j][k] += v[4u * i + 1u] * xv[k][i].y;
          acc[j][k] += v[4u * i + 2u] * xv[k][i].z;
          acc[j][k] += v[4u * i + 3u] * xv[k][i].w;
        }
#ifdef WTYPE_HAS_MIN
      const float m = chunk_min(off[j], c);
      for (uint k = 0; k < 4u; ++k) acc[j][k] += m * s[k];
#endif
    }
  }
  for (uint j = 0; j < 8u; ++j)
    for (uint k = 0; k < 4u; ++k) {
      const uint r = r0 + tr + 8u * j, b = b0 + tc + 8u * k;
      if (r < p.rows && b < p.n_batch) y[b * p.rows + r] = acc[j][k];
    }
}
