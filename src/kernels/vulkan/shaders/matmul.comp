// matmul.comp: Y[b][r] = dot(W[r], X[b]) for a batch of F32 activation rows (prefill). A
// workgroup of 64 computes a 32 rows x 32 batch tile, each invocation a 4 x 4 block of it
// in registers (rows tr + 8j, batch columns tc + 8k). Per step of TK chunks (64 elements),
// each invocation dequantizes one 32-element chunk of one of the tile's rows into shared
// memory and loads 32 activations; then every invocation reads 4 weights and 4 activations
// per element for 16 multiply-adds (a tile of one output per invocation read 2 per 1).
// Each output sums its row's elements in ascending order, a step's m * s terms after the
// step: the same for any batch size and column (batched rows equal each alone).
#version 450
#include "dequant.glsl"

#define TK 2   // 32-element chunks per step
#define TM 32  // weight rows per tile
#define TN 32  // batch columns per tile
#if TM != TN || TM * TK != 64
#error "one chunk (and, with mins, one s) per invocation needs TM == TN and TM * TK == 64"
#endif
layout(local_size_x = 64) in;
layout(std430, binding = 1) readonly buffer X { float x[]; };   // [n_batch][cols]
layout(std430, binding = 2) writeonly buffer Y { float y[]; };  // [n_batch][rows]
#ifdef WTYPE_HAS_MIN
layout(std430, binding = 3) readonly buffer S { float sums[]; };   // [n_batch][cols / 32]: Q8_1's s
#endif
layout(push_constant) uniform Push { uint rows, cols, row_bytes, n_batch; } p;

shared float ws[TM][TK * 32 + 1];  // [row in tile][element of the step], padded
shared float xs[TK * 32][TN];      // [element of the step][batch in tile]: an invocation's 8
                                   // neighbours read consecutive words
#ifdef WTYPE_HAS_MIN
shared float ms[TM][TK];  // [row in tile][chunk of the step]: the blocks' m
shared float ss[TN][TK];  // [batch in tile][chunk of the step]: the activations' s
#endif

void main() {
  const uint tid = gl_LocalInvocationID.x, tr = tid / 8u, tc = tid % 8u;
  const uint r0 = gl_WorkGroupID.x * TM, b0 = gl_WorkGroupID.y * TN, n_chunks = p.cols / 32u;
  float acc[4][4];
  for (uint j = 0; j < 4u; ++j)
    for (uint k = 0; k < 4u; ++k) acc[j][k] = 0.0;
  for (uint c0 = 0; c0 < n_chunks; c0 += TK) {
    {  // chunk k of row r: one per invocation (TM * TK = 64)
      const uint r = tid / TK, k = tid % TK;
      const bool inside = r0 + r < p.rows && c0 + k < n_chunks;
      float v[32];
      if (inside) dequantize_chunk((r0 + r) * p.row_bytes, c0 + k, v);
      else for (uint i = 0; i < 32u; ++i) v[i] = 0.0;
      for (uint i = 0; i < 32u; ++i) ws[r][32u * k + i] = v[i];
#ifdef WTYPE_HAS_MIN  // and s of batch column r (TN == TM)
      ms[r][k] = inside ? chunk_min((r0 + r) * p.row_bytes, c0 + k) : 0.0;
      ss[r][k] = b0 + r < p.n_batch && c0 + k < n_chunks ? sums[(b0 + r) * n_chunks + c0 + k] : 0.0;
#endif
    }
    for (uint e = tid; e < TN * TK * 32u; e += 64u) {
      const uint b = e / (TK * 32u), i = e % (TK * 32u);
      xs[i][b] = b0 + b < p.n_batch && 32u * c0 + i < p.cols ? x[(b0 + b) * p.cols + 32u * c0 + i] : 0.0;
    }
    barrier();
    for (uint i = 0; i < TK * 32u; ++i) {
      float a[4], b[4];
      for (uint j = 0; j < 4u; ++j) a[j] = ws[tr + 8u * j][i];
      for (uint k = 0; k < 4u; ++k) b[k] = xs[i][tc + 8u * k];
      for (uint j = 0; j < 4u; ++j)
        for (uint k = 0; k < 4u; ++k) acc[j][k] += a[j] * b[k];
    }
#ifdef WTYPE_HAS_MIN
    for (uint kk = 0; kk < TK; ++kk)
      for (uint j = 0; j < 4u; ++j)
        for (uint k = 0; k < 4u; ++k) acc[j][k] += ms[tr + 8u * j][kk] * ss[tc + 8u * k][kk];
#endif
    barrier();
  }
  for (uint j = 0; j < 4u; ++j)
    for (uint k = 0; k < 4u; ++k) {
      const uint r = r0 + tr + 8u * j, b = b0 + tc + 8u * k;
      if (r < p.rows && b < p.n_batch) y[b * p.rows + r] = acc[j][k];
    }
}
