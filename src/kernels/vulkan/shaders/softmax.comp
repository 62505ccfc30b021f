// softmax.comp: x[r] = exp(x[r] - max) / sum, in place, one workgroup per row of n.
#version 450

layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer X { float x[]; };  // [n_rows][n]
layout(push_constant) uniform Push { uint n_rows, n; } p;

shared float partial[64];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  for (uint row = gl_WorkGroupID.x; row < p.n_rows; row += gl_NumWorkGroups.x) {
    const uint base = row * p.n;
    float m = uintBitsToFloat(0xFF800000u);  // -inf
    for (uint i = tid; i < p.n; i += 64u) m = max(m, x[base + i]);
    partial[tid] = m;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
      if (tid < s) partial[tid] = max(partial[tid], partial[tid + s]);
      barrier();
    }
    m = partial[0];
    barrier();
    float sum = 0.0;
    for (uint i = tid; i < p.n; i += 64u) {
      const float e = exp(x[base + i] - m);
      x[base + i] = e;
      sum += e;
    }
    partial[tid] = sum;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
      if (tid < s) partial[tid] += partial[tid + s];
      barrier();
    }
    const float inv = 1.0 / partial[0];
    for (uint i = tid; i < p.n; i += 64u) x[base + i] *= inv;
    barrier();
  }
}
