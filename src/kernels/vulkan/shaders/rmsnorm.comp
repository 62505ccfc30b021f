// rmsnorm.comp: out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, one workgroup per row of n.
// The sum of squares is F32 in tree order (the CPU's kernels::rmsnorm sums in double).
#version 450

layout(local_size_x = 64) in;
layout(std430, binding = 0) writeonly buffer Out { float out_[]; };  // [n_rows][n]
layout(std430, binding = 1) readonly buffer X { float x[]; };        // [n_rows][n]
layout(std430, binding = 2) readonly buffer W { float w[]; };        // [n]
layout(push_constant) uniform Push { uint n_rows, n; float eps; } p;

shared float partial[64];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  for (uint row = gl_WorkGroupID.x; row < p.n_rows; row += gl_NumWorkGroups.x) {
    const uint base = row * p.n;
    float sum = 0.0;
    for (uint i = tid; i < p.n; i += 64u) sum += x[base + i] * x[base + i];
    partial[tid] = sum;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
      if (tid < s) partial[tid] += partial[tid + s];
      barrier();
    }
    const float scale = 1.0 / sqrt(partial[0] / float(p.n) + p.eps);
    for (uint i = tid; i < p.n; i += 64u) out_[base + i] = x[base + i] * scale * w[i];
    barrier();
  }
}
