// net_collective.h: the model's all-reduce hook (model::Collective) carried out by the
// net module's collectives, with per-call accounting of time and bytes.
#pragma once
#include "model/transformer.h"
#include "net/collectives.h"

namespace runtime {

class NetCollective : public model::Collective {
 public:
  explicit NetCollective(net::Collectives& coll) : coll_(coll) {}
  util::Status all_reduce(float* x, size_t n) override {
    return coll_.all_reduce(std::span<float>(x, n));
  }
  util::Status all_gather_rows(uint8_t* buf, int n_rows, size_t row_bytes, size_t offset, size_t len) override {
    return coll_.all_gather_rows(buf, size_t(n_rows), row_bytes, offset, len);
  }
  const net::CollectiveStats& stats() const { return coll_.stats(); }

 private:
  net::Collectives& coll_;
};

}  // namespace runtime
