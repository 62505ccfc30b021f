// swiglu.comp: out = silu(gate) * up = gate / (1 + exp(-gate)) * up, elementwise.
#version 450

layout(local_size_x = 256) in;
layout(std430, binding = 0) writeonly buffer Out { float out_[]; };  // [n]
layout(std430, binding = 1) readonly buffer Gate { float gate[]; };  // [n]
layout(std430, binding = 2) readonly buffer Up { float up[]; };      // [n]
layout(push_constant) uniform Push { uint n; } p;

void main() {
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += gl_NumWorkGroups.x * 256u) {
    const float g = gate[i];
    out_[i] = g / (1.0 + exp(-g)) * up[i];
  }
}
