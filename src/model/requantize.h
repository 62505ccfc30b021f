// requantize.h: rewrites a GGUF model's 2-D weight matrices in another type (the core of
// `shardlm quantize`). 1-D tensors (norms, biases) are copied as they are. A matrix whose
// rows do not fit the type's 256-element super-blocks falls back as llama.cpp does
// (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, IQ4_XS -> IQ4_NL), and the fallback is reported.
#pragma once
#include <string>

#include "gguf/gguf.h"
#include "tensor/types.h"
#include "util/status.h"

namespace model {

struct RequantizeReport {
  size_t bytes_in = 0, bytes_out = 0;
  int n_fallback = 0;
  std::string notes;  // one line per fallback tensor
};

util::Expected<RequantizeReport> requantize(const gguf::File& src, const std::string& out_path,
                                            tensor::Type type, int threads);

}  // namespace model
