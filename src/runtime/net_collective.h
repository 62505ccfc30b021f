// net_collective.h: the model's reduce points (runtime/reduce.h) carried out by the net
// module's collectives with a fixed algorithm, with per-call accounting of time and bytes
// (the tests' in-process clusters; the cluster's own is AutoCollective).
#pragma once
#include "net/collectives.h"
#include "runtime/reduce.h"

namespace runtime {

class NetCollective : public ReduceCollective {
 public:
  NetCollective(net::Collectives& coll, const ExactRows& exact, int dim) : ReduceCollective(exact, dim), coll_(coll) {}
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
