// rope.comp: rotary position embedding in place, one invocation per rotated pair, with
// the (cos, sin) table of kernels::rope_cache per token: pair i of a head is (x[2i],
// x[2i+1]) ("norm", llama) or (x[i], x[i + n_rot/2]) (neox); dimensions past n_rot stay.
#version 450

layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer X { float x[]; };                // [n_tokens][n_heads][head_dim]
layout(std430, binding = 1) readonly buffer Cache { float cs[]; };  // [n_tokens][n_rot]: (cos, sin)
layout(push_constant) uniform Push { uint n_tokens, n_heads, head_dim, n_rot, neox; } p;

void main() {
  const uint half_rot = p.n_rot / 2u, total = p.n_tokens * p.n_heads * half_rot;
  for (uint e = gl_GlobalInvocationID.x; e < total; e += gl_NumWorkGroups.x * 64u) {
    const uint i = e % half_rot, head = e / half_rot, t = head / p.n_heads;
    const uint i0 = head * p.head_dim + (p.neox != 0u ? i : 2u * i);
    const uint i1 = i0 + (p.neox != 0u ? half_rot : 1u);
    const float c = cs[t * p.n_rot + 2u * i], s = cs[t * p.n_rot + 2u * i + 1u];
    const float x0 = x[i0], x1 = x[i1];
    x[i0] = fma(x0, c, -(x1 * s));
    x[i1] = fma(x0, s, x1 * c);
  }
}
