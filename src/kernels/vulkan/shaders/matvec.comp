// matvec.comp: y[r] = dot(W[r], x) for one F32 activation vector (decode). A workgroup of
// 64 takes 16 rows (kMatvecRows in commands.cc), 4 invocations per row (looping over row
// groups when rows exceed the dispatch); invocation l of a row dots the row's 32-element
// chunks l, l + 4, ..., then the row's 4 partial sums are added by a shared-memory tree.
// Rows as narrow as 576 columns (18 chunks) keep every invocation busy, and a software
// rasterizer (lavapipe) runs 16x fewer workgroups than with a workgroup per row (8 lanes
// x 8 rows measured 25% slower there, a workgroup per row 5-6x slower).
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
  const uint tid = gl_LocalInvocationID.x, lane = tid & 3u, n_chunks = p.cols / 32u;
  for (uint row0 = 16u * gl_WorkGroupID.x; row0 < p.rows; row0 += 16u * gl_NumWorkGroups.x) {
    const uint row = row0 + (tid >> 2);
    float sum = 0.0;
    if (row < p.rows) {
      for (uint c = lane; c < n_chunks; c += 4u) {
        float v[32];
        dequantize_chunk(row * p.row_bytes, c, v);
        for (uint i = 0; i < 32u; ++i) sum += v[i] * x[32u * c + i];
#ifdef WTYPE_HAS_MIN
        sum += chunk_min(row * p.row_bytes, c) * sums[c];
#endif
      }
    }
    partial[tid] = sum;
    barrier();
    for (uint s = 2u; s > 0u; s >>= 1) {
      if (lane < s) partial[tid] += partial[tid + s];
      barrier();
    }
    if (lane == 0u && row < p.rows) y[row] = partial[tid];
    barrier();
  }
}
