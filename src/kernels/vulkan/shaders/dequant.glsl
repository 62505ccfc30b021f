// dequant.glsl: weight rows in their GGUF block layout, read from a uint array (so no
// 8/16-bit storage feature is needed; every 16-bit field of every block type sits at an
// even byte offset), and dequantize_chunk(), which decodes 32 consecutive elements of a
// row as tensor::dequantize_row does. Compiled with one of -DWTYPE_F32, _F16, _BF16,
// _Q8_0, _Q4_0, _Q4_1, _Q5_0, _Q5_1, _Q4_K, _Q5_K, _Q6_K. Included by matvec.comp and
// matmul.comp.
//
// Q4_1 and Q5_1 (WTYPE_HAS_MIN): dequantize_chunk leaves out the block's m (x = d * q) and
// the shaders add m * s per block, s the sum of the block's activations as the CPU's vec_dot
// takes it from Q8_1 (fp16(d * sum(q)), act_round.comp), not the sum of the rounded values.

layout(std430, binding = 0) readonly buffer Weights { uint w[]; };  // [rows][row_bytes]

uint w_u8(uint off) { return (w[off >> 2] >> ((off & 3u) * 8u)) & 0xFFu; }
int w_i8(uint off) { return int(w_u8(off) << 24) >> 24; }
float w_f16(uint off) { return unpackHalf2x16((w[off >> 2] >> ((off & 2u) * 8u)) & 0xFFFFu).x; }
// 4 bytes at a multiple of 4: the quants of Q4_1, Q4_K and Q5_K, whose blocks (20, 144,
// 176 bytes) and so rows keep them word-aligned (one load; on lavapipe 8% of a Q4_1 decode
// against w_u32's two paths).
uint w_word(uint off) { return w[off >> 2]; }
// 4 bytes at an even offset (the word after may be read: buffers are padded to 16 bytes).
uint w_u32(uint off) {
  const uint i = off >> 2;
  return (off & 2u) == 0u ? w[i] : (w[i] >> 16) | (w[i + 1u] << 16);
}
// Byte j (0..3) of a word, and the same sign-extended.
uint byte_of(uint word, uint j) { return (word >> (8u * j)) & 0xFFu; }
int sbyte_of(uint word, uint j) { return int(word << (24u - 8u * j)) >> 24; }

// 6-bit scale and min of sub-block j (0..7) from the 12 bytes at s (Q4_K, Q5_K:
// get_scale_min in tensor/quants_k.cc).
void k_scale_min(uint s, uint j, out uint sc, out uint m) {
  if (j < 4u) {
    sc = w_u8(s + j) & 63u;
    m = w_u8(s + j + 4u) & 63u;
  } else {
    sc = (w_u8(s + j + 4u) & 0xFu) | ((w_u8(s + j - 4u) >> 6) << 4);
    m = (w_u8(s + j + 4u) >> 4) | ((w_u8(s + j) >> 6) << 4);
  }
}

#if defined(WTYPE_Q4_1) || defined(WTYPE_Q5_1)
#define WTYPE_HAS_MIN
// m of block c of the row starting at byte row_off.
float chunk_min(uint row_off, uint c) {
#if defined(WTYPE_Q4_1)
  return w_f16(row_off + 20u * c + 2u);
#else
  return w_f16(row_off + 24u * c + 2u);
#endif
}
#endif

// v[i] = element 32 * c + i of the row starting at byte row_off (less m: WTYPE_HAS_MIN).
void dequantize_chunk(uint row_off, uint c, out float v[32]) {
#if defined(WTYPE_F32)
  const uint base = (row_off >> 2) + 32u * c;
  for (uint i = 0; i < 32u; ++i) v[i] = uintBitsToFloat(w[base + i]);
#elif defined(WTYPE_F16)
  const uint base = (row_off >> 2) + 16u * c;
  for (uint i = 0; i < 16u; ++i) {
    const vec2 f = unpackHalf2x16(w[base + i]);
    v[2u * i] = f.x;
    v[2u * i + 1u] = f.y;
  }
#elif defined(WTYPE_BF16)
  const uint base = (row_off >> 2) + 16u * c;
  for (uint i = 0; i < 16u; ++i) {
    v[2u * i] = uintBitsToFloat(w[base + i] << 16);
    v[2u * i + 1u] = uintBitsToFloat(w[base + i] & 0xFFFF0000u);
  }
#elif defined(WTYPE_Q8_0)
  // { f16 d; int8 qs[32] }: x = d * q
  const uint off = row_off + 34u * c;
  const float d = w_f16(off);
  for (uint i = 0; i < 32u; i += 4u) {
    const uint q = w_u32(off + 2u + i);
    for (uint j = 0; j < 4u; ++j) v[i + j] = d * float(sbyte_of(q, j));
  }
#elif defined(WTYPE_Q4_0)
  // { f16 d; u8 qs[16] }: element i in the low nibble of qs[i], i + 16 in the high one
  const uint off = row_off + 18u * c;
  const float d = w_f16(off);
  for (uint i = 0; i < 16u; i += 4u) {
    const uint q = w_u32(off + 2u + i);
    for (uint j = 0; j < 4u; ++j) {
      v[i + j] = d * float(int(byte_of(q, j) & 0xFu) - 8);
      v[i + j + 16u] = d * float(int(byte_of(q, j) >> 4) - 8);
    }
  }
#elif defined(WTYPE_Q4_1)
  // { f16 d, m; u8 qs[16] }: x = d * q + m (m: chunk_min)
  const uint off = row_off + 20u * c;
  const float d = w_f16(off);
  for (uint i = 0; i < 16u; i += 4u) {
    const uint q = w_word(off + 4u + i);
    for (uint j = 0; j < 4u; ++j) {
      v[i + j] = d * float(byte_of(q, j) & 0xFu);
      v[i + j + 16u] = d * float(byte_of(q, j) >> 4);
    }
  }
#elif defined(WTYPE_Q5_0) || defined(WTYPE_Q5_1)
  // { f16 d; [f16 m;] u32 qh; u8 qs[16] }: 4 low bits as Q4_0 / Q4_1, bit 4 of element i is
  // bit i of qh; Q5_0: x = d * (q - 16), Q5_1: x = d * q + m (m: chunk_min)
#if defined(WTYPE_Q5_0)
  const uint off = row_off + 22u * c, qs = off + 6u;
  const float d = w_f16(off);
#else
  const uint off = row_off + 24u * c, qs = off + 8u;
  const float d = w_f16(off);
#endif
  const uint qh = w_u32(qs - 4u);
  for (uint i = 0; i < 16u; i += 4u) {
    const uint q = w_u32(qs + i);
    for (uint j = 0; j < 4u; ++j) {
      const uint q0 = (byte_of(q, j) & 0xFu) | (((qh >> (i + j)) & 1u) << 4);
      const uint q1 = (byte_of(q, j) >> 4) | (((qh >> (i + j + 16u)) & 1u) << 4);
#if defined(WTYPE_Q5_0)
      v[i + j] = float(int(q0) - 16) * d;
      v[i + j + 16u] = float(int(q1) - 16) * d;
#else
      v[i + j] = float(q0) * d;
      v[i + j + 16u] = float(q1) * d;
#endif
    }
  }
#elif defined(WTYPE_Q4_K)
  // { f16 d, dmin; u8 scales[12]; u8 qs[128] }: sub-block j (32 elements) of super-block
  // c / 8 has 6-bit scale sc and min m (get_scale_min); x = d * sc * q - dmin * m, q the low
  // (j even) or high (j odd) nibble of qs[32 * (j / 2) + i].
  const uint off = row_off + 144u * (c >> 3), j = c & 7u;
  const float d = w_f16(off), dmin = w_f16(off + 2u);
  uint sc, m;
  k_scale_min(off + 4u, j, sc, m);
  const float d1 = d * float(sc), m1 = dmin * float(m);
  const uint qs = off + 16u + 32u * (j >> 1), shift = 4u * (j & 1u);
  for (uint i = 0; i < 32u; i += 4u) {
    const uint q = w_word(qs + i) >> shift;
    for (uint j = 0; j < 4u; ++j) v[i + j] = d1 * float(byte_of(q, j) & 0xFu) - m1;
  }
#elif defined(WTYPE_Q5_K)
  // { f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128] }: as Q4_K with bit 4 of element i
  // of sub-block j in bit j of qh[i].
  const uint off = row_off + 176u * (c >> 3), j = c & 7u;
  const float d = w_f16(off), dmin = w_f16(off + 2u);
  uint sc, m;
  k_scale_min(off + 4u, j, sc, m);
  const float d1 = d * float(sc), m1 = dmin * float(m);
  const uint qs = off + 48u + 32u * (j >> 1), shift = 4u * (j & 1u);
  for (uint i = 0; i < 32u; i += 4u) {
    const uint q = w_word(qs + i) >> shift, h = w_word(off + 16u + i) >> j;
    for (uint b = 0; b < 4u; ++b) v[i + b] = d1 * float((byte_of(q, b) & 0xFu) + 16u * (byte_of(h, b) & 1u)) - m1;
  }
#elif defined(WTYPE_Q6_K)
  // { u8 ql[128]; u8 qh[64]; int8 scales[16]; f16 d }: in half h (128 elements) element
  // 32 k + l (k < 4) has 4 low bits in ql[64 h + l + 32 (k & 1)] (high nibble for k >= 2),
  // 2 high bits at bit 2k of qh[32 h + l], scale scales[8 h + l / 16 + 2 k]; x = d * sc * (q - 32).
  const uint off = row_off + 210u * (c >> 3), h = (c >> 2) & 1u, k = c & 3u;
  const float d = w_f16(off + 208u);
  const uint ql = off + 64u * h + 32u * (k & 1u), qh = off + 128u + 32u * h, sc = off + 192u + 8u * h + 2u * k;
  const uint lshift = 4u * (k >> 1);
  const float d_lo = d * float(w_i8(sc)), d_hi = d * float(w_i8(sc + 1u));  // l < 16, l >= 16
  for (uint l = 0; l < 32u; l += 4u) {
    const uint lo = w_u32(ql + l) >> lshift, hi = w_u32(qh + l) >> (2u * k);
    for (uint j = 0; j < 4u; ++j) {
      const int q = int((byte_of(lo, j) & 0xFu) | ((byte_of(hi, j) & 3u) << 4)) - 32;
      v[l + j] = (l < 16u ? d_lo : d_hi) * float(q);
    }
  }
#else
#error "define the weight type: -DWTYPE_F32, _F16, _BF16, _Q8_0, _Q4_0, _Q4_1, _Q5_0, _Q5_1, _Q4_K, _Q5_K or _Q6_K"
#endif
}
