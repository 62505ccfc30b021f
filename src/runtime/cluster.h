// cluster.h: the root's side of a cluster (generate, bench; later perplexity, chat and
// serve). start() connects to the workers (mesh bootstrap and cluster-key handshake in
// net/), probes the links (α from small ping/pongs, β from 1 MiB ones) unless an
// algorithm is forced, plans the slices (plan::make_plan over the shares), asks every
// worker whether it already holds its slice and streams the weights to all those that do
// not at once (a thread per worker; a progress line per worker on stderr), then keeps its
// own slice (node 0, with the token embedding).
// step() sends every worker the step (positions and the token embedding rows in their
// file type), computes the root's part, and, when sampling, merges every node's top
// candidates and draws exactly (sampler/distributed.h). With no workers it is one node.
// Deliberately no tokenizer, no text and no retry: a lost worker ends the session with an
// error that names it.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "model/loader.h"
#include "model/transformer.h"
#include "net/collectives.h"
#include "net/transport.h"
#include "plan/plan.h"
#include "runtime/auto_collective.h"
#include "runtime/protocol.h"
#include "runtime/slicer.h"
#include "sampler/distributed.h"
#include "util/thread_pool.h"

namespace runtime {

struct ClusterOptions {
  std::vector<std::string> workers;  // "host:port"; empty: one node
  std::vector<double> shares;        // one per node (root first); empty: equal
  net::SyncType sync = net::SyncType::kQ8_0;  // all-reduce encoding (unused when exact)
  bool exact = false;                // gathers instead of all-reduces (model::Partition::exact)
  std::string algo = "auto";         // auto | all-gather | star | ring
  std::string cluster_key;
  std::string software_version = "dev";
  int ctx = 4096;
  model::KvType kv_type = model::KvType::kF16;
  model::AttentionMode attention = model::AttentionMode::kExact;
  bool lane_order = true;            // kernels::set_lane_order, here and on every worker
  int batch = 128;
  double step_timeout_s = 4.0;       // collectives and replies; + 0.25 s per batch row
  bool progress = true;              // weight streaming progress on stderr
};

struct NodeStats {
  std::string name;  // "root", "worker 127.0.0.1:9001"
  NodeCounters counters;
};

class Cluster {
 public:
  static util::Expected<std::unique_ptr<Cluster>> start(const model::LoadedModel& m, const std::string& model_path,
                                                        const ClusterOptions& o, util::ThreadPool& pool);
  ~Cluster();

  // Evaluates tokens[0..n) at pos..pos+n-1 on every node. With a sampler, returns the
  // next token drawn from the last row's logits (penalties from `history`); else -1.
  util::Expected<int32_t> step(const int32_t* tokens, int n, int pos, sampler::DistributedSampler* smp,
                               const std::vector<int32_t>& history);

  // Evaluates tokens[0..n) at pos..pos+n-1 like step() and returns, for every row b with
  // targets[b] >= 0, -log p(targets[b]) from that row's logits (in row order). Workers
  // send per row only their vocabulary range's (max, sum of exp) and the target's logit
  // (runtime/scoring.h), never whole logit rows.
  util::Expected<std::vector<double>> score(const int32_t* tokens, int n, int pos, const int32_t* targets);

  int n_nodes() const { return int(nodes_.size()); }
  const plan::Plan& plan() const { return plan_; }
  // Totals per node (root first) since start; workers' as of their last reply.
  std::vector<NodeStats> stats() const;
  std::string describe() const;  // "3 nodes, sync q8_0, all-reduce auto (alpha .. us, beta .. Gbit/s)"

 private:
  Cluster(const model::LoadedModel& m, util::ThreadPool& pool) : m_(m), pool_(pool) {}
  util::Status probe_links();
  util::Status setup_workers(const std::string& model_hash);
  struct StreamProgress {  // one worker's weight stream, shared with the progress printer
    bool active = false;
    std::atomic<bool> done{false};
    std::atomic<uint64_t> total{0}, sent{0};
    std::atomic<double> seconds{0};
  };
  util::Status stream_slices(const std::vector<bool>& have);
  util::Status stream_slice(int rank, const plan::NodeSlice& s, StreamProgress* prog, const std::atomic<bool>& abort);
  // step()'s halves: send every worker the step; compute the root's rows (logits into
  // logits_ when logits is set); collect the workers' replies into *replies.
  util::Status send_step(const int32_t* tokens, int n, Step& s);
  util::Status root_forward(const int32_t* tokens, int n, int pos, bool logits, bool all_logits);
  util::Status collect_replies(std::vector<StepReply>* replies);

  const model::LoadedModel& m_;
  util::ThreadPool& pool_;
  ClusterOptions o_;
  std::unique_ptr<net::Transport> t_;
  plan::Plan plan_;
  int forced_algo_ = -1;
  double alpha_us_ = 50, beta_gbps_ = 1;
  NodeModel root_slice_;
  std::unique_ptr<AutoCollective> coll_;
  std::unique_ptr<model::Transformer> tf_;
  std::vector<NodeStats> nodes_;
  std::vector<float> logits_;       // [n_vocab local] root's logits range ([n][...] when scoring)
  std::vector<uint8_t> rows_;       // [n][row bytes] embedding rows of a step
};

}  // namespace runtime
