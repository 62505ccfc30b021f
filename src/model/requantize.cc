// requantize.cc: see requantize.h.
#include "model/requantize.h"

#include <vector>

#include "tensor/quants.h"
#include "util/thread_pool.h"

namespace model {

namespace {

// llama.cpp's general.file_type for a file whose matrices are mostly `t`.
uint32_t file_type_of(tensor::Type t) {
  switch (t) {
    case tensor::Type::F32: return 0;
    case tensor::Type::F16: return 1;
    case tensor::Type::Q4_0: return 2;
    case tensor::Type::Q4_1: return 3;
    case tensor::Type::Q8_0: return 7;
    case tensor::Type::Q5_0: return 8;
    case tensor::Type::Q5_1: return 9;
    case tensor::Type::Q2_K: return 10;
    case tensor::Type::Q3_K: return 11;  // Q3_K_S
    case tensor::Type::Q4_K: return 14;  // Q4_K_S
    case tensor::Type::Q5_K: return 16;  // Q5_K_S
    case tensor::Type::Q6_K: return 18;
    case tensor::Type::BF16: return 32;
    case tensor::Type::IQ4_NL: return 25;
    case tensor::Type::IQ4_XS: return 30;
    case tensor::Type::MXFP4: return 38;  // MXFP4_MOE
    default: return 0;
  }
}

tensor::Type fallback(tensor::Type t) {
  switch (t) {
    case tensor::Type::Q2_K:  // llama.cpp's fallbacks for rows not in 256s
    case tensor::Type::Q3_K: return tensor::Type::Q4_0;
    case tensor::Type::Q4_K: return tensor::Type::Q5_0;
    case tensor::Type::Q5_K: return tensor::Type::Q5_1;
    case tensor::Type::Q6_K: return tensor::Type::Q8_0;
    case tensor::Type::IQ4_XS: return tensor::Type::IQ4_NL;  // as llama-quantize
    default: return t;
  }
}

bool is_weight_matrix(const gguf::TensorInfo& t) {
  const std::string suffix = ".weight";
  return t.ne.size() == 2 && t.name.size() > suffix.size() &&
         t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

util::Expected<RequantizeReport> requantize(const gguf::File& src, const std::string& out_path,
                                            tensor::Type type, int threads) {
  if (!tensor::traits(type).supported || type == tensor::Type::Q8_1 || type == tensor::Type::Q8_K)
    return util::Status::error(std::string("cannot quantize to ") + tensor::type_name(type));
  gguf::Writer w;
  w.set_alignment(src.alignment());
  for (const auto& [k, v] : src.kv()) w.set(k, v);
  w.set("general.file_type", gguf::Value::u32(file_type_of(type)));
  util::ThreadPool pool(threads);
  RequantizeReport rep;
  for (const auto& t : src.tensors()) {
    rep.bytes_in += t.n_bytes;
    if (!is_weight_matrix(t) || !tensor::traits(t.type).supported) {
      w.add_tensor(t.name, t.ne, t.type, t.data);
      rep.bytes_out += t.n_bytes;
      continue;
    }
    tensor::Type dst = type;
    if (t.ne[0] % tensor::traits(dst).block_size != 0) {
      dst = fallback(dst);
      if (t.ne[0] % tensor::traits(dst).block_size != 0) dst = tensor::Type::F16;
      rep.notes += t.name + ": rows of " + std::to_string(t.ne[0]) + " are not a multiple of " +
                   std::to_string(tensor::traits(type).block_size) + ", stored as " + tensor::type_name(dst) + "\n";
      ++rep.n_fallback;
    }
    const gguf::TensorInfo* info = &t;
    rep.bytes_out += tensor::row_bytes(dst, t.ne[0]) * t.rows();
    w.add_tensor(t.name, t.ne, dst, [info, dst, &pool](std::vector<uint8_t>& out) {
      const int64_t cols = info->ne[0], rows = info->rows();
      const size_t in_row = tensor::row_bytes(info->type, cols), out_row = tensor::row_bytes(dst, cols);
      out.resize(out_row * rows);
      pool.parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
        std::vector<float> buf(cols);
        for (int64_t r = r0; r < r1; ++r) {
          tensor::dequantize_row(info->type, info->data + r * in_row, buf.data(), cols);
          tensor::quantize_row(dst, buf.data(), out.data() + r * out_row, cols);
        }
      });
    });
  }
  RETURN_IF_ERROR(w.write(out_path));
  return rep;
}

}  // namespace model
