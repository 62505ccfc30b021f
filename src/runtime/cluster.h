// cluster.h: the root's side of a cluster (generate, bench; later perplexity, chat and
// serve). start() connects to the workers (mesh bootstrap and cluster-key handshake in
// net/), probes the links (α from small ping/pongs, β from 1 MiB ones) unless an
// algorithm is forced, plans the slices (plan::make_plan over the shares), asks every
// worker whether it already holds its slice and streams the weights to all those that do
// not at once (a thread per worker; a progress line per worker on stderr), then keeps its
// own slice (node 0, with the token embedding).
// run() evaluates one step of rows of many sequences (runtime/sequence.h): it sends every
// worker the step (per segment slot, position, what to return; the token embedding rows
// in their file type), computes the root's part with the same NodeExecutor a worker runs,
// and per sampled sequence merges every node's top candidates and draws exactly with that
// sequence's sampler (sampler/distributed.h). With no workers it is one node.
// --sync-type auto (the default) picks exact sync, whose tokens are one node's, unless the
// link model predicts q8_0 saves kAutoSyncSaving of the time per token (then q8_0), and
// says so in describe().
// Deliberately no tokenizer, no text, no scheduling and no retry: a lost worker ends the
// session with an error that names it.
#pragma once
#include <atomic>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/loader.h"
#include "model/transformer.h"
#include "net/collectives.h"
#include "net/transport.h"
#include "plan/plan.h"
#include "runtime/auto_collective.h"
#include "runtime/executor.h"
#include "runtime/protocol.h"
#include "runtime/sequence.h"
#include "runtime/slicer.h"
#include "sampler/distributed.h"
#include "util/thread_pool.h"

namespace runtime {

// auto sync takes q8_0 only when predicted to save this share of the time per token.
constexpr double kAutoSyncSaving = 1.0 / 3;
// Memory bandwidth the auto choice assumes per node (a modest machine; GB/s).
constexpr double kAutoSyncMemGbps = 10;

struct ClusterOptions {
  std::vector<std::string> workers;  // "host:port"; empty: one node
  std::vector<double> shares;        // one per node (root first); empty: equal
  net::SyncType sync = net::SyncType::kQ8_0;  // all-reduce encoding (unused when exact)
  bool exact = false;                // gathers instead of all-reduces (runtime/reduce.h)
  bool auto_sync = false;            // choose exact or q8_0 from the measured links (above)
  std::string algo = "auto";         // auto | all-gather | star | ring
  std::string cluster_key;
  bool link_encryption = true;       // with a key: seal every frame (net/handshake.h)
  std::string software_version = "dev";
  int ctx = 4096;
  model::KvType kv_type = model::KvType::kF16;
  model::AttentionMode attention = model::AttentionMode::kExact;
  bool lane_order = true;            // model::RunConfig::lane_order, here and on every worker
  bool decode_lanes = false;         // model::RunConfig::decode_lanes, the same
  int batch = 128;                   // rows per step
  int n_slots = 1;                   // sequences in the KV cache at once (ctx positions each)
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

  // One sequence's rows in a step: tokens evaluated at positions seq->n_past().., then
  // appended to its log. kCandidates: the next token is drawn from the last row with the
  // sequence's sampler (penalties over its log); kScores: -log p(target) per row whose
  // target is >= 0 (workers send only per-row (max, sum of exp, target logit)).
  struct SeqStep {
    Sequence* seq = nullptr;
    std::span<const int32_t> tokens;
    Want want = Want::kNothing;
    std::span<const int32_t> targets;  // kScores: one per token
  };
  struct SeqResult {
    int32_t token = -1;        // kCandidates
    std::vector<double> nll;   // kScores: in row order, scored rows only
  };
  // One step of at most max_rows() rows; each sequence at most once, in its own slot.
  util::Expected<std::vector<SeqResult>> run(const std::vector<SeqStep>& batch);
  // One sequence's tokens in steps of max_rows(); returns the token drawn after the last
  // (sample) or -1.
  util::Expected<int32_t> extend(Sequence& seq, std::span<const int32_t> tokens, bool sample);
  // The same, scoring; -log p(targets[b]) for every b with targets[b] >= 0.
  util::Expected<std::vector<double>> score(Sequence& seq, std::span<const int32_t> tokens,
                                            std::span<const int32_t> targets);

  int max_rows() const { return o_.batch; }
  int n_slots() const { return o_.n_slots; }
  int ctx() const { return o_.ctx; }  // positions per slot
  int n_vocab() const { return m_.config.n_vocab; }
  int n_nodes() const { return int(nodes_.size()); }
  const plan::Plan& plan() const { return plan_; }
  // Totals per node (root first) since start; workers' as of their last reply.
  std::vector<NodeStats> stats() const;
  std::string describe() const;  // "3 nodes, sync q8_0, all-reduce auto (alpha .. us, beta .. Gbit/s)"

 private:
  Cluster(const model::LoadedModel& m, util::ThreadPool& pool) : m_(m), pool_(pool) {}
  Setup session_setup() const;
  util::Status probe_links();
  util::Status choose_sync(const plan::ModelShape& shape, const std::vector<double>& shares);
  util::Status setup_workers(const std::string& model_hash);
  struct StreamProgress {  // one worker's weight stream, shared with the progress printer
    bool active = false;
    std::atomic<bool> done{false};
    std::atomic<uint64_t> total{0}, sent{0};
    std::atomic<double> seconds{0};
  };
  util::Status stream_slices(const std::vector<bool>& have);
  util::Status stream_slice(int rank, const plan::NodeSlice& s, StreamProgress* prog, const std::atomic<bool>& abort);
  util::Status send_step(const std::vector<SeqStep>& batch, Step& s);
  util::Status collect_replies(std::vector<StepReply>* replies);

  const model::LoadedModel& m_;
  util::ThreadPool& pool_;
  ClusterOptions o_;
  std::unique_ptr<net::Transport> t_;
  plan::Plan plan_;
  int forced_algo_ = -1;
  double alpha_us_ = 50, beta_gbps_ = 1;
  std::string sync_note_;           // why auto sync chose what it did
  NodeModel root_slice_;
  std::unique_ptr<AutoCollective> coll_;
  std::unique_ptr<NodeExecutor> exec_;
  std::vector<NodeStats> nodes_;
  std::vector<uint8_t> rows_;       // [rows][row bytes] embedding rows of a step
  std::vector<float> x_;            // [rows][dim] the same rows embedded
};

}  // namespace runtime
