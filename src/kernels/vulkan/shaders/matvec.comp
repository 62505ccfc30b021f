// matvec.comp: y[r] = dot(W[r], x) for one F32 activation vector (decode). Each invocation
// takes R rows (a specialization constant, constant_id 0) and dots them chunk by chunk, 32
// elements at a time in ascending order, a chunk's m * s after it (matmul.comp's order); a
// chunk's 32 activations are loaded once for the R rows. A workgroup of 64 takes 64 R rows
// (invocation i rows i, i + 64, ...), looping over row groups when rows exceed the dispatch.
//
// R by device (device.cc, kMatvecRowsOnCpu): 8 on a CPU device. On lavapipe (Mesa 22.3) an
// activation read at the same address in every invocation costs as much as a per-row one,
// so they were most of a decode (the same shader with a constant in their place: 257
// against 816 ms a token). SmolLM2 Q4_1 decode, 2 threads, Zen 3: 1160 ms a token with the
// earlier 4-invocations-per-row layout, 816 with one row per invocation, 440 with R = 4, 350
// with R = 8 or 16. 1 on a GPU (a row per invocation, the activation reads at one address
// across a subgroup): not measured on one.
#version 450
#include "dequant.glsl"

layout(constant_id = 0) const uint R = 1;
layout(local_size_x = 64) in;
layout(std430, binding = 1) readonly buffer X { vec4 x4[]; };   // [cols / 4]
layout(std430, binding = 2) writeonly buffer Y { float y[]; };  // [rows]
#ifdef WTYPE_HAS_MIN
layout(std430, binding = 3) readonly buffer S { float sums[]; };   // [cols / 32]: Q8_1's s
#endif
layout(push_constant) uniform Push { uint rows, cols, row_bytes; } p;

void main() {
  const uint n_chunks = p.cols / 32u, per_group = 64u * R;
  for (uint row0 = per_group * gl_WorkGroupID.x; row0 < p.rows; row0 += per_group * gl_NumWorkGroups.x) {
    uint off[R];  // the rows' byte offsets (rows past the end repeat the last row)
    float sum[R];
    for (uint k = 0; k < R; ++k) {
      off[k] = min(row0 + gl_LocalInvocationID.x + 64u * k, p.rows - 1u) * p.row_bytes;
      sum[k] = 0.0;
    }
    for (uint c = 0; c < n_chunks; ++c) {
      vec4 xv[8];
      for (uint i = 0; i < 8u; ++i) xv[i] = x4[8u * c + i];
#ifdef WTYPE_HAS_MIN
      const float s = sums[c];
#endif
      for (uint k = 0; k < R; ++k) {
        float v[32];
        dequantize_chunk(off[k], c, v);
        for (uint i = 0; i < 8u; ++i) {
          sum[k] += v[4u * i] * xv[i].x;
          sum[k] += v[4u * i + 1u] * xv[i].y;
          sum[k] += v[4u * i + 2u] * xv[i].z;
          sum[k] += v[4u * i + 3u] * xv[i].w;
        }
#ifdef WTYPE_HAS_MIN
        sum[k] += chunk_min(off[k], c) * s;
#endif
      }
    }
    for (uint k = 0; k < R; ++k) {
      const uint row = row0 + gl_LocalInvocationID.x + 64u * k;
      if (row < p.rows) y[row] = sum[k];
    }
  }
}
