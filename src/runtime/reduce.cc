// reduce.cc: partial sums or exact gathers at a reduce point (see reduce.h).
#include "runtime/reduce.h"

#include <algorithm>
#include <cstring>

#include "kernels/kernels.h"
#include "util/check.h"

namespace runtime {

util::Status ReduceCollective::reduce(model::ReducePoint at, const model::Matrix& w, const float* x, int col0,
                                      int cols, float* y, model::LocalLinear& local) {
  const int n = local.rows(), n_out = local.out_rows();
  if (!e_.on) {  // y = this node's partial product, summed over the nodes
    CHECK(w.rows == dim_);
    if (cols == 0)  // no columns here (a node without query heads): a zero partial
      std::fill(y, y + size_t(n_out) * w.rows, 0.0f);
    else
      local.linear(w, x, y, w.rows);
    return all_reduce(y, size_t(n_out) * w.rows);
  }
  CHECK(w.rows == e_.n_rows && w.cols >= cols && e_.row_begin + e_.n_rows <= dim_);
  const bool q8 = at == model::ReducePoint::kAttention ? e_.q8_att : e_.q8_ff;
  const int64_t full = w.cols;
  const tensor::Type vt = tensor::traits(w.type).vec_dot_type;
  const size_t xq_stride = kernels::activation_bytes(vt, full);
  // This node's rows of W land in columns [row_begin, row_begin + n_rows) of y[n][dim].
  const int64_t y_stride = dim_;
  if (q8) {  // each node quantizes its own columns exactly as one node quantizes the row
    const size_t off = kernels::activation_bytes(vt, col0), len = kernels::activation_bytes(vt, cols);
    gather_.resize(xq_stride * n);
    for (int b = 0; b < n && cols > 0; ++b)  // a node without query heads sends none
      kernels::quantize_activation(vt, x + size_t(b) * cols, gather_.data() + b * xq_stride + off, cols);
    RETURN_IF_ERROR(all_gather_rows(gather_.data(), n, xq_stride, off, len));
    local.linear_quantized(w, gather_.data(), xq_stride, y + e_.row_begin, y_stride);
  } else {  // F32 columns, then the whole row quantized by the model
    gather_.resize(sizeof(float) * full * n);
    float* g = reinterpret_cast<float*>(gather_.data());
    for (int b = 0; b < n; ++b) std::memcpy(g + b * full + col0, x + size_t(b) * cols, sizeof(float) * cols);
    RETURN_IF_ERROR(all_gather_rows(gather_.data(), n, sizeof(float) * full, sizeof(float) * col0,
                                    sizeof(float) * cols));
    local.linear(w, g, y + e_.row_begin, y_stride);
  }
  return all_gather_rows(reinterpret_cast<uint8_t*>(y), n_out, sizeof(float) * y_stride, sizeof(float) * e_.row_begin,
                         sizeof(float) * e_.n_rows);
}

}  // namespace runtime
