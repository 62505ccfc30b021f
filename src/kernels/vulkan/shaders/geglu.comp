// geglu.comp: out = gelu(gate) * up, elementwise (Gemma's MLP), gelu in its tanh form
// 0.5 x (1 + tanh(z)) computed as x / (1 + exp(-2z)) (the same function, without the
// cancellation of 1 + tanh(z) for negative x); as kernels::geglu, gate * up above 10 and 0
// below -10. (The CPU's geglu reads gelu from a table of F16-rounded values: it differs by
// up to ~1e-3 relative.)
#version 450

layout(local_size_x = 256) in;
layout(std430, binding = 0) writeonly buffer Out { float out_[]; };  // [n]
layout(std430, binding = 1) readonly buffer Gate { float gate[]; };  // [n]
layout(std430, binding = 2) readonly buffer Up { float up[]; };      // [n]
layout(push_constant) uniform Push { uint n; } p;

void main() {
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += gl_NumWorkGroups.x * 256u) {
    const float x = gate[i];
    float g = x;
    if (x <= -10.0) {
      g = 0.0;
    } else if (x < 10.0) {
      const float inner = 0.79788456080286535587989211986876 * x * fma(0.044715 * x, x, 1.0);
      g = x / (1.0 + exp(-2.0 * inner));
    }
    out_[i] = g * up[i];
  }
}
