// matmul.comp: Y[b][r] = dot(W[r], X[b]) for a batch of F32 activation rows (prefill). A
// workgroup computes a 16 rows x 16 batch tile: per 32-element step, 16 invocations
// dequantize the tile's weight chunks into shared memory, all load the activations, then
// each invocation accumulates its (row, b) output.
#version 450
#include "dequant.glsl"

layout(local_size_x = 16, local_size_y = 16) in;  // x: batch column, y: weight row
layout(std430, binding = 1) readonly buffer X { float x[]; };   // [n_batch][cols]
layout(std430, binding = 2) writeonly buffer Y { float y[]; };  // [n_batch][rows]
layout(push_constant) uniform Push { uint rows, cols, row_bytes, n_batch; } p;

shared float ws[16][33];  // [row in tile][element of the chunk], padded
shared float xs[16][33];  // [batch in tile][element of the chunk]

void main() {
  const uint lb = gl_LocalInvocationID.x, lr = gl_LocalInvocationID.y;
  const uint tid = lr * 16u + lb;
  const uint r0 = gl_WorkGroupID.x * 16u, b0 = gl_WorkGroupID.y * 16u;
  float acc = 0.0;
  for (uint c = 0; c < p.cols / 32u; ++c) {
    if (tid < 16u) {
      float v[32];
      if (r0 + tid < p.rows) dequantize_chunk((r0 + tid) * p.row_bytes, c, v);
      else for (uint i = 0; i < 32u; ++i) v[i] = 0.0;
      for (uint i = 0; i < 32u; ++i) ws[tid][i] = v[i];
    }
    for (uint e = tid; e < 16u * 32u; e += 256u) {
      const uint b = e / 32u, i = e % 32u;
      xs[b][i] = b0 + b < p.n_batch ? x[(b0 + b) * p.cols + 32u * c + i] : 0.0;
    }
    barrier();
    for (uint i = 0; i < 32u; ++i) acc += ws[lr][i] * xs[lb][i];
    barrier();
  }
  if (r0 + lr < p.rows && b0 + lb < p.n_batch) y[(b0 + lb) * p.rows + r0 + lr] = acc;
}
