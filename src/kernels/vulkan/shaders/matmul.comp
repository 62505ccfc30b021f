// matmul.comp: Y[b][r] = dot(W[r], X[b]) for a batch of F32 activation rows (prefill). A
// workgroup computes a 16 rows x 16 batch tile: per step of 4 chunks (128 elements), 64
// invocations each dequantize one 32-element chunk of one of the tile's rows into shared
// memory, all load the activations, then each invocation accumulates its (row, b) output.
#version 450
#include "dequant.glsl"

#define TK 4  // 32-element chunks per step
layout(local_size_x = 16, local_size_y = 16) in;  // x: batch column, y: weight row
layout(std430, binding = 1) readonly buffer X { float x[]; };   // [n_batch][cols]
layout(std430, binding = 2) writeonly buffer Y { float y[]; };  // [n_batch][rows]
#ifdef WTYPE_HAS_MIN
layout(std430, binding = 3) readonly buffer S { float sums[]; };   // [n_batch][cols / 32]: Q8_1's s
#endif
layout(push_constant) uniform Push { uint rows, cols, row_bytes, n_batch; } p;

shared float ws[16][TK * 32 + 1];  // [row in tile][element of the step], padded
shared float xs[TK * 32][16];      // [element of the step][batch in tile]: lanes of one row read
                                   // consecutive words (one vector load, not a gather, on lavapipe)
#ifdef WTYPE_HAS_MIN
shared float ms[16][TK];  // [row in tile][chunk of the step]: the blocks' m
shared float ss[16][TK];  // [batch in tile][chunk of the step]: the activations' s
#endif

void main() {
  const uint lb = gl_LocalInvocationID.x, lr = gl_LocalInvocationID.y;
  const uint tid = lr * 16u + lb;
  const uint r0 = gl_WorkGroupID.x * 16u, b0 = gl_WorkGroupID.y * 16u, n_chunks = p.cols / 32u;
  float acc = 0.0;
  for (uint c0 = 0; c0 < n_chunks; c0 += TK) {
    if (tid < 16u * TK) {
      const uint r = tid / TK, k = tid % TK;
      float v[32];
      if (r0 + r < p.rows && c0 + k < n_chunks) dequantize_chunk((r0 + r) * p.row_bytes, c0 + k, v);
      else for (uint i = 0; i < 32u; ++i) v[i] = 0.0;
      for (uint i = 0; i < 32u; ++i) ws[r][32u * k + i] = v[i];
#ifdef WTYPE_HAS_MIN  // and s of batch row r (as many as rows in a tile)
      ms[r][k] = r0 + r < p.rows && c0 + k < n_chunks ? chunk_min((r0 + r) * p.row_bytes, c0 + k) : 0.0;
      ss[r][k] = b0 + r < p.n_batch && c0 + k < n_chunks ? sums[(b0 + r) * n_chunks + c0 + k] : 0.0;
#endif
    }
    for (uint e = tid; e < 16u * TK * 32u; e += 256u) {
      const uint b = e / (TK * 32u), i = e % (TK * 32u);
      xs[i][b] = b0 + b < p.n_batch && 32u * c0 + i < p.cols ? x[(b0 + b) * p.cols + 32u * c0 + i] : 0.0;
    }
    barrier();
    for (uint i = 0; i < TK * 32u; ++i) acc += ws[lr][i] * xs[i][lb];
#ifdef WTYPE_HAS_MIN
    for (uint k = 0; k < TK; ++k) acc += ms[lr][k] * ss[lb][k];
#endif
    barrier();
  }
  if (r0 + lr < p.rows && b0 + lb < p.n_batch) y[(b0 + lb) * p.rows + r0 + lr] = acc;
}
