// exact_fp.h: the scalar quantizers' rounding rule (quants*.cc): every a*b+c rounded twice,
// never contracted into an FMA, as ggml's reference C and numpy compute it, so the bytes we
// write and the floats we dequantize equal theirs bit for bit. A pragma: it holds from the
// #include to the end of the including file, so include it last and only from a .cc.
#pragma once

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
