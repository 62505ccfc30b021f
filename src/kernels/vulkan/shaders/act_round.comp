// act_round.comp: "fake quantization" of F32 activations to a vec_dot type's grid, so the
// matmul shaders see the values the CPU's matmul dots (kernels::quantize_activation, then
// d * q): out[i] = float(d as stored) * q[i] per block, with d, the inverse scale and q
// computed as the CPU's quantizers do (kernels/cpu/avx2.cc, kernels/ref/quantize.cc):
//   -DATYPE_Q8_0, _Q8_1 (32 per block): amax = max |x|, d = amax / 127, id = 127 / amax,
//     q = x * id rounded half to even, d stored as fp16. Q8_1 also writes per block
//     s = float(fp16(d * sum(q))) with d before its fp16 rounding: what the CPU's Q4_1 and
//     Q5_1 vec_dot multiply the weight block's m with (dequant.glsl WTYPE_HAS_MIN).
//   -DATYPE_Q8_K (256 per block): max = the first x of largest |x|, iscale = -127 / max,
//     q = min(127, iscale * x rounded half to even), d = 1 / iscale stored as float.
//   -DATYPE_F16, _BF16 (the F16 / BF16 weights' vec_dot types, one value per "block"):
//     x rounded to nearest even (util::f32_to_fp16, f32_to_bf16).
// Vulkan lets a float division be 2.5 ulp off and leaves the rounding of packHalf2x16
// open, so both are done exactly here with integers (div_rn, f16_round); products and
// roundEven are exact in Vulkan. Blocks whose amax is below 1e-30 (kTiny) give zeros. One
// invocation per block.
#version 450

layout(local_size_x = 64) in;
layout(std430, binding = 0) writeonly buffer Out { float out_[]; };  // [n_values]
layout(std430, binding = 1) readonly buffer X { float x[]; };        // [n_values]
#if defined(ATYPE_Q8_1)
layout(std430, binding = 2) writeonly buffer S { float sums[]; };       // [n_values / 32]
#endif
layout(push_constant) uniform Push { uint n_blocks; } p;

#if defined(ATYPE_Q8_0) || defined(ATYPE_Q8_1)
const uint kBlock = 32u;
#elif defined(ATYPE_Q8_K)
const uint kBlock = 256u;
#elif defined(ATYPE_F16) || defined(ATYPE_BF16)
const uint kBlock = 1u;
#else
#error "define the activation type: -DATYPE_Q8_0, _Q8_1, _Q8_K, _F16 or _BF16"
#endif

// a / b correctly rounded (to nearest, ties to even) for positive normal a, b with a
// normal quotient: long division of the 24-bit significands.
float div_rn(float a, float b) {
  const uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
  const uint ma = (ua & 0x7FFFFFu) | 0x800000u, mb = (ub & 0x7FFFFFu) | 0x800000u;
  int e = int(ua >> 23) - int(ub >> 23);
  uint q = 0u, r = ma;
  for (int i = 0; i < 26; ++i) {  // q = floor(ma / mb * 2^25), r != 0: inexact
    q <<= 1;
    if (r >= mb) {
      q |= 1u;
      r -= mb;
    }
    r <<= 1;
  }
  uint mant, rnd, sticky = r != 0u ? 1u : 0u;
  if (q >= (1u << 25)) {  // ma / mb in [1, 2)
    mant = q >> 2;
    rnd = (q >> 1) & 1u;
    sticky |= q & 1u;
  } else {  // (1/2, 1)
    mant = q >> 1;
    rnd = q & 1u;
    e -= 1;
  }
  if (rnd != 0u && (sticky != 0u || (mant & 1u) != 0u)) ++mant;
  if (mant == (1u << 24)) {
    mant >>= 1;
    e += 1;
  }
  return uintBitsToFloat(uint(e + 127) << 23 | (mant & 0x7FFFFFu));
}

#include "f16.glsl"

// Smallest amax modelled (127 / amax and 1 / (127 / amax) stay normal floats for div_rn);
// a block below it gives zeros (the CPU's Q8_0 / Q8_1 d rounds to fp16 0 there anyway).
const float kTiny = 1e-30;

// float(q), a zero always +0 as on the CPU (float(int(roundEven(v))) may be folded to
// roundEven(v), which keeps v's sign).
float q_float(int q) { return q == 0 ? 0.0 : float(q); }

void main() {
  for (uint b = gl_GlobalInvocationID.x; b < p.n_blocks; b += gl_NumWorkGroups.x * 64u) {
    const uint base = b * kBlock;
#if defined(ATYPE_F16)
    out_[base] = f16_round_signed(x[base]);
#elif defined(ATYPE_BF16)
    const uint u = floatBitsToUint(x[base]);  // as util::f32_to_bf16 (NaN kept quiet)
    const uint h = (u & 0x7FFFFFFFu) > 0x7F800000u ? (u >> 16) | 64u : (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    out_[base] = uintBitsToFloat(h << 16);
#elif defined(ATYPE_Q8_K)
    float amax = 0.0, vmax = 0.0;
    for (uint i = 0; i < kBlock; ++i) {
      const float ax = abs(x[base + i]);
      if (ax > amax) {
        amax = ax;
        vmax = x[base + i];
      }
    }
    if (!(amax >= kTiny)) {  // all zero (or below the modelled range)
      for (uint i = 0; i < kBlock; ++i) out_[base + i] = 0.0;
      continue;
    }
    const float id = div_rn(127.0, amax);
    const float iscale = vmax > 0.0 ? -id : id;  // -127 / max
    const float d = vmax > 0.0 ? -div_rn(1.0, id) : div_rn(1.0, id);  // 1 / iscale
    for (uint i = 0; i < kBlock; ++i) out_[base + i] = d * q_float(min(int(roundEven(iscale * x[base + i])), 127));
#else
    float amax = 0.0;
    for (uint i = 0; i < kBlock; ++i) amax = max(amax, abs(x[base + i]));
    const bool live = amax >= kTiny;  // else d rounds to fp16 0: x' = 0
    const float d32 = live ? div_rn(amax, 127.0) : 0.0, d = f16_round(d32);
    const float id = live ? div_rn(127.0, amax) : 0.0;
    int sum = 0;
    for (uint i = 0; i < kBlock; ++i) {
      const int q = int(roundEven(x[base + i] * id));
      sum += q;
      out_[base + i] = d * q_float(q);
    }
#if defined(ATYPE_Q8_1)
    sums[b] = f16_round_signed(float(sum) * d32);
#endif
#endif
  }
}
