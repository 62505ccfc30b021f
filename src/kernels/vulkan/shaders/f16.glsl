// f16.glsl: rounding to fp16 done exactly (Vulkan leaves packHalf2x16's rounding open),
// as util::f32_to_fp16 and F16C do. Included by shaders that must round as the CPU does.

// float(fp16(v)) for v >= 0, rounded to nearest, ties to even (subnormal fp16 below 2^-14,
// infinity from 65520); f16_round_signed: any sign.
float f16_round(float v) {
  if (v == 0.0) return v;  // keeps -0, as the CPU's fp16 does
  const int e = max(int(floatBitsToUint(v) >> 23) - 127, -14);  // quantum 2^(e - 10)
  const float up = uintBitsToFloat(uint(10 - e + 127) << 23), down = uintBitsToFloat(uint(e - 10 + 127) << 23);
  const float r = roundEven(v * up) * down;  // exact: scaling by powers of two
  return r > 65504.0 ? uintBitsToFloat(0x7F800000u) : r;
}
float f16_round_signed(float v) { return v < 0.0 ? -f16_round(-v) : f16_round(v); }
