// flash_decode_combine.comp: second pass of flash decoding. For head h, with the chunks'
// (m_c, l_c, acc_c) from flash_decode.comp: M = max m_c, L = sum l_c exp(m_c - M),
// out = sum acc_c exp(m_c - M) / L.
#version 450

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Part { float part[]; };  // [n_heads][n_chunks][2 + head_dim]
layout(std430, binding = 1) writeonly buffer Out { float out_[]; };  // [n_heads][head_dim]
layout(push_constant) uniform Push { uint head_dim, n_chunks; } p;

void main() {
  const uint h = gl_WorkGroupID.x, hd = p.head_dim, stride = 2u + hd, base = h * p.n_chunks * stride;
  float big_m = part[base];
  for (uint c = 1u; c < p.n_chunks; ++c) big_m = max(big_m, part[base + c * stride]);
  float big_l = 0.0;
  for (uint c = 0u; c < p.n_chunks; ++c) big_l += part[base + c * stride + 1u] * exp(part[base + c * stride] - big_m);
  for (uint d = gl_LocalInvocationID.x; d < hd; d += 64u) {
    float o = 0.0;
    for (uint c = 0u; c < p.n_chunks; ++c)
      o += part[base + c * stride + 2u + d] * exp(part[base + c * stride] - big_m);
    out_[h * hd + d] = o / big_l;
  }
}
