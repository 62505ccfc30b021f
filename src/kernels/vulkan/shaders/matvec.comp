// matvec.comp: y[r] = dot(W[r], x) for one F32 activation vector (decode). One workgroup
// per row (looping when rows exceed the dispatch), each invocation dots 32-element chunks
// of the row, then a shared-memory tree sum.
#version 450
#include "dequant.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 1) readonly buffer X { float x[]; };   // [cols]
layout(std430, binding = 2) writeonly buffer Y { float y[]; };  // [rows]
#ifdef WTYPE_HAS_MIN
layout(std430, binding = 3) readonly buffer S { float sums[]; };   // [cols / 32]: Q8_1's s
#endif
layout(push_constant) uniform Push { uint rows, cols, row_bytes; } p;

shared float partial[64];

void main() {
  const uint tid = gl_LocalInvocationID.x, n_chunks = p.cols / 32u;
  for (uint row = gl_WorkGroupID.x; row < p.rows; row += gl_NumWorkGroups.x) {
    float sum = 0.0;
    for (uint c = tid; c < n_chunks; c += 64u) {
      float v[32];
      dequantize_chunk(row * p.row_bytes, c, v);
      for (uint i = 0; i < 32u; ++i) sum += v[i] * x[32u * c + i];
#ifdef WTYPE_HAS_MIN
      sum += chunk_min(row * p.row_bytes, c) * sums[c];
#endif
    }
    partial[tid] = sum;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
      if (tid < s) partial[tid] += partial[tid + s];
      barrier();
    }
    if (tid == 0u) y[row] = partial[0];
    barrier();
  }
}
