// forming.h: the parts of forming a cluster that need only a transport (cluster.h's
// start() and recovery use them through Cluster::form, forming.cc): probing the links,
// choosing the sync from them, measuring every node's speed for the shares, and streaming
// the slices to the workers that lack theirs, with progress reported to a callback (the
// CLI draws it: cli/progress.h). Deliberately no terminal output.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/backend.h"
#include "model/loader.h"
#include "net/collectives.h"
#include "net/transport.h"
#include "plan/plan.h"
#include "runtime/speed.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace runtime {

// auto sync takes q8_0 only when predicted to save this share of the time per token.
constexpr double kAutoSyncSaving = 1.0 / 3;
// Memory bandwidth the auto choice assumes per node (a modest machine; GB/s).
constexpr double kAutoSyncMemGbps = 10;

// The links' latency α and bandwidth β, from the best round trips to any worker, and
// each worker's own α (rank order, 0 for the root; empty when not probed).
struct LinkModel {
  double alpha_us = 50, beta_gbps = 1;
  std::vector<double> alpha_us_per_rank;
};
util::Expected<LinkModel> probe_links(net::Transport& t);

// Exact sync gives one node's tokens; q8_0 all-reduces are cheaper on a slow link (see
// forming.cc). note: the choice and its prediction, for describe().
struct SyncChoice {
  bool exact = true;
  net::SyncType sync = net::SyncType::kF32;
  std::string note;
};
util::Expected<SyncChoice> choose_sync(const plan::ModelShape& shape, const std::vector<double>& shares, int dim,
                                       const LinkModel& link, bool loopback);

// Every node's device (rank 0: root_device, this process) and, when measure or when the
// devices are not all alike, its decode speed on one layer of the model's width, one node
// at a time. shares: one per rank from measured speed, or empty when not measured (alike).
struct MeasuredShares {
  std::vector<double> shares;
  std::string note;  // each node's device, speed and share
  std::vector<std::string> devices;  // one per rank, the root's first
};
// Worker r's device description (a speed probe that measures nothing: one round trip;
// shape: any valid one, probe_shape of the model).
util::Expected<std::string> ask_device(net::Transport& t, int r, const ProbeShape& shape);
util::Expected<MeasuredShares> measure_shares(net::Transport& t, const model::LoadedModel& m, bool measure,
                                              const std::string& root_device, util::ThreadPool& pool,
                                              const model::BackendFactory& backend);

// One worker's weight stream while the cluster forms (for a WeightProgress).
struct WeightStream {
  std::string peer;
  uint64_t sent = 0, total = 0;
  double seconds = 0;                 // so far, or in all once done
  bool done = false, failed = false;  // failed: stopped (its own error, or another stream's)
};
// Called about every 50 ms while weights stream (the streams in rank order), and once more
// with final set when every stream is done.
using WeightProgress = std::function<void(const std::vector<WeightStream>& streams, bool final)>;

// Every rank r >= 1 without have[r] gets its slice of plan from m at once (a thread per
// worker). *streamed: bytes sent; *failed: the rank whose stream failed first (its error
// is returned; the others stop). progress may be empty.
util::Status stream_slices(net::Transport& t, const model::LoadedModel& m, const plan::Plan& plan,
                           const std::vector<bool>& have, const WeightProgress& progress, uint64_t* streamed,
                           int* failed);

}  // namespace runtime
