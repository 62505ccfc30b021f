// kv_store.comp: writes the K (or V) rows of n_tokens new positions into an F16 cache:
// cache[kvh][row(pos0 + t)][d] = f16(x[t][kvh][d]), two values (one uint) per invocation,
// rounded exactly (f16.glsl) so the packing is exact on any driver. row(j) = j, or with a
// block table (block_rows > 0, model/kv_cache.h's paged cache) table[table0 + j /
// block_rows] * block_rows + j % block_rows; n_rows: the rows of one KV head's plane.
#version 450
#include "f16.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Cache { uint cache[]; };     // f16 [n_kv_heads][n_rows][head_dim]
layout(std430, binding = 1) readonly buffer X { float x[]; };  // [n_tokens][n_kv_heads][head_dim]
layout(std430, binding = 2) readonly buffer Table { int table[]; };  // block ids (block_rows > 0)
layout(push_constant) uniform Push { uint n_tokens, pos0, n_kv_heads, head_dim, n_rows, block_rows, table0; } p;

uint row(uint j) { return p.block_rows == 0u ? j : uint(table[p.table0 + j / p.block_rows]) * p.block_rows + j % p.block_rows; }

void main() {
  const uint half_dim = p.head_dim / 2u, total = p.n_tokens * p.n_kv_heads * half_dim;
  for (uint e = gl_GlobalInvocationID.x; e < total; e += gl_NumWorkGroups.x * 64u) {
    const uint d2 = e % half_dim, kvh = (e / half_dim) % p.n_kv_heads, t = e / (half_dim * p.n_kv_heads);
    const uint src = (t * p.n_kv_heads + kvh) * p.head_dim + 2u * d2;
    cache[(kvh * p.n_rows + row(p.pos0 + t)) * half_dim + d2] = packHalf2x16(vec2(f16_round_signed(x[src]), f16_round_signed(x[src + 1u])));
  }
}
