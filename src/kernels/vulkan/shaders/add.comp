// add.comp: out = a + b, elementwise (the residual adds); out may be a or b.
#version 450

layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Out { float out_[]; };    // [n]
layout(std430, binding = 1) readonly buffer A { float a[]; };  // [n]
layout(std430, binding = 2) readonly buffer B { float b[]; };  // [n]
layout(push_constant) uniform Push { uint n; } p;

void main() {
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += gl_NumWorkGroups.x * 256u) out_[i] = a[i] + b[i];
}
