// auto_collective.h: the model's all-reduce hook over a cluster's Transport, choosing the
// algorithm per message size from the link's measured latency α and bandwidth β
// (plan::choose_allreduce) unless one is forced, with a timeout that grows with the rows a
// message carries (a prefill batch computes longer between all-reduces than a decode
// step). Every node computes the same choice from the same α, β and size, so all nodes
// run the same algorithm. Under --transport mpi, for f32 and f16, MPI_Allreduce competes
// too: its time is the one the transport measured at start (the slowest rank's, the same
// on every rank), ours the model's under α and β; the faster is taken.
// Deliberately no measuring here (forming.cc probes the links, the MPI transport its
// all-reduce).
#pragma once
#include <memory>

#include "net/collectives.h"
#include "plan/cost.h"
#include "runtime/reduce.h"

namespace runtime {

class AutoCollective : public ReduceCollective {
 public:
  // forced_algo: a net::AllReduceAlgo, or -1 to choose per size. dim: values per row.
  AutoCollective(net::Transport& t, const ExactRows& exact, net::SyncType sync, int forced_algo, double alpha_us,
                 double beta_gbps, int dim, double base_timeout_s, int batch)
      : ReduceCollective(exact, dim),
        t_(t), sync_(sync), forced_(forced_algo), alpha_(alpha_us), beta_(beta_gbps), dim_(dim),
        one_(t, {sync, net::AllReduceAlgo::kAllGather, base_timeout_s}),
        many_(t, {sync, net::AllReduceAlgo::kAllGather, base_timeout_s + 0.25 * batch}) {}

  util::Status all_reduce(float* x, size_t n) override {
    const net::AllReduceAlgo a = algo_for(n);
    return (n <= size_t(dim_) ? one_ : many_).all_reduce(std::span<float>(x, n), a, sync_);
  }
  util::Status all_gather_rows(uint8_t* buf, int n_rows, size_t row_bytes, size_t offset, size_t len) override {
    return (n_rows <= 1 ? one_ : many_).all_gather_rows(buf, size_t(n_rows), row_bytes, offset, len);
  }
  net::AllReduceAlgo algo_for(size_t n) const {
    if (forced_ >= 0) return net::AllReduceAlgo(forced_);
    const double bytes = double(net::encoded_bytes(sync_, n));
    const plan::AllReduce a =
        plan::choose_allreduce(t_.size(), bytes, alpha_, beta_, false, sync_ == net::SyncType::kQ8_0);
    const double native_us = sync_ == net::SyncType::kQ8_0 ? -1 : t_.native_sum_us(size_t(bytes));
    if (native_us >= 0 && native_us < plan::allreduce_us(a, t_.size(), bytes, {alpha_, beta_, false}))
      return net::AllReduceAlgo::kMpi;
    return a == plan::AllReduce::kRing ? net::AllReduceAlgo::kRing
           : a == plan::AllReduce::kStar ? net::AllReduceAlgo::kStar
                                         : net::AllReduceAlgo::kAllGather;
  }
  double seconds() const { return one_.stats().seconds + many_.stats().seconds; }

 private:
  net::Transport& t_;
  net::SyncType sync_;
  int forced_;
  double alpha_, beta_;
  int dim_;
  net::Collectives one_, many_;
};

}  // namespace runtime
