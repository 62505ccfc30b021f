// cluster.h: the root's side of a cluster (generate, bench, perplexity, chat and serve).
// start() forms the cluster (runtime/forming.cc): connects to the workers (mesh bootstrap
// and cluster-key handshake in net/), probes the links (α from small ping/pongs, β from
// 1 MiB ones) unless an algorithm is forced, plans the slices (plan::make_plan over the
// shares), asks every worker whether it already holds its slice and streams the weights to
// all those that do not at once (a thread per worker; progress through
// ClusterOptions::on_progress, which the CLI draws), then keeps its own slice (node 0, with
// the token embedding) as a Node (runtime/node.h) built as every worker builds its own.
// run() evaluates one step of rows of many sequences (runtime/sequence.h): build the step
// (runtime/stepping.cc: per segment slot, position, what to return), execute it with
// recovery (the token embedding rows to every worker, the root's part with the same
// NodeExecutor a worker runs, every worker's reply), merge (per sampled sequence every
// node's top candidates, drawn exactly with that sequence's sampler, sampler/distributed.h;
// drafts kept while they match), and record (runtime/history.h). With no workers it is one
// node.
// --sync-type auto (the default) picks exact sync, whose tokens are one node's, unless the
// link model predicts q8_0 saves kAutoSyncSaving of the time per token (then q8_0), and
// says so in describe().
// Recovery (ClusterOptions::recover, on by default; runtime/membership.cc): a step that
// fails because a worker died, timed out or answered nonsense is not the end. The root
// drops every link (the survivors go back to listening), puts an idle --spare in the dead
// worker's place (the plan is then unchanged) or re-plans over the survivors, connects
// again, sends each node the slice it lacks (a worker keeps the slices of earlier sessions;
// a --model worker slices its own file), replays every KV slot's history (SlotHistory) and
// runs the failed step again. What to do about a failure is chosen by its kind
// (remedy_for). Under exact sync the tokens are then exactly those of an undisturbed run on
// any node count. Between steps, a dead worker's address is tried every rejoin_every_s; one
// that answers (and passes the handshake on its own first) is taken back the same way. One
// that dies again within flap_window_s of coming back stays out.
// Under MPI (ClusterOptions::transport) the ranks are the workers: everything above is the
// same but the connecting, and there is no recovery.
// Deliberately no tokenizer, no text, no terminal and no scheduling.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/backend.h"
#include "model/loader.h"
#include "model/transformer.h"
#include "net/collectives.h"
#include "net/tcp_transport.h"
#include "net/transport.h"
#include "plan/plan.h"
#include "runtime/auto_collective.h"
#include "runtime/history.h"
#include "runtime/kv_blocks.h"
#include "runtime/forming.h"
#include "runtime/membership.h"
#include "runtime/node.h"
#include "runtime/protocol.h"
#include "runtime/sequence.h"
#include "runtime/slicer.h"
#include "sampler/distributed.h"
#include "util/thread_pool.h"

namespace runtime {

// How the nodes' shares are set when ClusterOptions::shares is empty. kAuto: every node
// names its device (speed probe, protocol.h); when they are not all alike (a Vulkan node
// beside CPU ones, two kinds of GPU, CPUs of another ISA or thread count), shares are taken
// from measured speed as with kMeasured, else they are equal. kMeasured: each node's decode
// speed on one layer of the model's width (runtime/speed.h), measured one node at a time
// when the cluster first forms. kEqual: equal.
enum class SharesMode : uint8_t { kAuto, kMeasured, kEqual };

struct ClusterOptions {
  std::vector<std::string> workers;  // "host:port"; empty: one node
  std::vector<double> shares;        // one per node (root first); empty: by shares_mode
  SharesMode shares_mode = SharesMode::kAuto;
  std::string device;                // the root's device description; empty: model::cpu_description()
  net::SyncType sync = net::SyncType::kQ8_0;  // all-reduce encoding (unused when exact)
  bool exact = false;                // gathers instead of all-reduces (runtime/reduce.h)
  bool auto_sync = false;            // choose exact or q8_0 from the measured links (above)
  std::string algo = "auto";         // auto | all-gather | star | ring
  std::string cluster_key;
  bool link_encryption = true;       // with a key: seal every frame (net/handshake.h)
  std::string software_version = "dev";
  // How every node runs the model, sent to each in its setup: positions per slot (ctx),
  // sequences in the KV cache at once (n_slots), rows per step (max_batch), KV type,
  // attention mode, batch order, the KV pool's blocks and the host KV cache's (off where
  // prefixes are not shared).
  model::RunConfig run{.max_batch = 128};
  double step_timeout_s = 4.0;       // collectives and replies; + 0.25 s per batch row
  bool progress = true;              // report weight streaming to on_progress
  WeightProgress on_progress;        // empty: not reported (the CLI draws it on stderr)
  std::vector<std::string> spares;   // idle workers ("host:port") that take a dead one's place
  bool recover = true;               // re-form and replay when a worker is lost (else the error ends it)
  double rejoin_every_s = 2;         // how often a lost worker's address is tried again
  double flap_window_s = 60;         // a worker lost again this soon after rejoining stays out
  // A transport formed already (--transport mpi): its ranks 1.. are the workers, in place
  // of `workers`; no recovery (a lost rank ends the job).
  std::shared_ptr<net::Transport> transport;
  // The root's backend for its slice (`--device`); empty: the CPU on the cluster's pool.
  model::BackendFactory backend;
};

// What the cluster is now, for /health and /metrics (safe to read from any thread).
struct ClusterHealth {
  int nodes = 1, nodes_planned = 1;  // now, and as started (the root and its --workers)
  uint64_t recoveries = 0;           // re-formings after a loss or for a rejoin
  uint64_t lost = 0;                 // workers lost (died, timed out, answered nonsense)
  std::string last_recovery;         // the latest recovery's one-line report
};

struct NodeStats {
  std::string name;  // "root", "worker 127.0.0.1:9001"
  NodeCounters counters;
  std::string device;         // its device description (a worker's from its speed-probe reply)
  double link_alpha_us = -1;  // the root's link to it: latency α (µs) from the link probe; -1: not probed
};

class Cluster {
 public:
  static util::Expected<std::unique_ptr<Cluster>> start(const model::LoadedModel& m, const std::string& model_path,
                                                        const ClusterOptions& o, util::ThreadPool& pool);
  ~Cluster();

  // One sequence's rows in a step: tokens evaluated at positions seq->n_past().., then
  // appended to its log. kCandidates: the next token is drawn from the last row with the
  // sequence's sampler (penalties over its log, its logit_bias; with its log-probabilities
  // when the sampler's top_logprobs >= 0); kScores: -log p(target) per row whose
  // target is >= 0 (workers send only per-row (max, sum of exp, target logit)).
  // drafts > 0 (kCandidates, tokens = [the last drawn token, then `drafts` guesses of the
  // tokens after it]): every row is drawn, in vec_dot order, and the guesses are kept while
  // each equals the token drawn before it; the log then ends after the kept guesses. The
  // tokens are exactly those decoding one row per step would draw (sampler.h: a draw
  // depends only on the row's logits, the seed and the position).
  struct SeqStep {
    Sequence* seq = nullptr;
    std::span<const int32_t> tokens;
    Want want = Want::kNothing;
    std::span<const int32_t> targets;  // kScores: one per token
    int drafts = 0;
    // kCandidates without drafts: the tokens the draw may take (a bitmap over the
    // vocabulary, TokenConstraint::allowed()); each node masks its range before its top-k.
    const std::vector<uint64_t>* allowed = nullptr;
    // Every row in vec_dot order (model::Segment::rowwise): decode rows evaluated again
    // after a preemption, with the bits they had one by one.
    bool rowwise = false;
  };
  struct SeqResult {
    // kCandidates: the drawn tokens in order, 1 + the guesses kept (the last one is new).
    std::vector<int32_t> tokens;
    std::vector<sampler::Logprobs> logprobs;  // one per drawn token when top_logprobs >= 0
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

  int max_rows() const { return o_.run.max_batch; }
  int n_slots() const { return o_.run.n_slots; }
  // The paged KV cache's pool (kv_blocks.h): run() grows each segment's table and fails,
  // naming the pool, when it is short; the scheduler frees blocks first (release).
  const BlockPool& kv_pool() const { return blocks_; }
  int kv_blocks_needed(const Sequence& seq, int n) const { return blocks_.needed(seq.slot(), seq.n_past() + n); }
  // Forgets seq's cached rows: its log is emptied, its blocks go back to the pool (the
  // registered ones stay cached for other sequences) and its history is dropped.
  void release(Sequence& seq);
  // A sequence starts a new prompt: keeps its own first n positions (a next turn; false,
  // nothing changed, when one of its blocks from n on is shared), or (share_prefix) is
  // released and takes the registered blocks of prompt's prefix, at most max_tokens
  // positions (kv_blocks.h), whose rows are all in lane order (vec_dot order with lane
  // order off): returns the positions it now holds, whose rows are not evaluated again.
  // shared_prefix: how many share_prefix would take. Both 0 when no_prefix_sharing().
  // host: the host cache's blocks that continue the pool's are restored and taken too.
  bool keep_own(Sequence& seq, int n);
  // The order each of a slot's rows [0, n) ran in, from its history: 1 lane order, 0
  // vec_dot order, -1 not in the history (for the scheduler's own-prefix reuse).
  std::vector<int8_t> row_orders(int slot, int n) const;
  // any_room: with every host block, as if the pool had blocks for them all.
  int shared_prefix(std::span<const int32_t> prompt, int max_tokens, bool host = false, bool any_room = false) const;
  int share_prefix(Sequence& seq, std::span<const int32_t> prompt, int max_tokens, bool host = false);
  // Bytes of one KV block of the whole model (every KV head; a node keeps its heads' share).
  size_t kv_block_bytes() const {
    return model::KvCache::bytes_per_position(m_.config.n_layers, m_.config.n_kv_heads, m_.config.head_dim,
                                              o_.run.kv_type) *
           model::kKvBlockRows;
  }
  // Why blocks cannot be shared here ("" when they can): sliding-window layers (their
  // rings are per slot).
  std::string no_prefix_sharing() const;
  // The batch-order policy every node runs (model::lane_ordered's flags).
  bool lane_order() const { return o_.run.lane_order; }
  bool decode_lanes() const { return o_.run.decode_lanes; }
  // Whether a row's bits can depend on the order it ran in (lane or vec_dot): lane order is
  // on and some matrix of the model has a type that sums batches in lane order
  // (kernels::lane_order_type). When not, any cached row is what the prompt alone computes.
  bool order_matters() const;
  int ctx() const { return o_.run.ctx; }  // positions per slot
  int n_vocab() const { return m_.config.n_vocab; }
  // Whether a slot can go on from position pos, keeping its rows before pos: a sliding-window
  // model's rings keep only their last rows (kv_layer_ctx), and pos's window must not start
  // in rows its latest step overwrote (model::Transformer::check_rings' rule). That step's
  // rows count, rejected guesses included: they are written though the sequence drops them.
  bool can_rewind(int slot, int pos) const;
  int n_nodes() const { return int(nodes_.size()); }
  const plan::Plan& plan() const { return plan_; }
  // Totals per node (root first) since the cluster was last formed; workers' as of their
  // last reply.
  std::vector<NodeStats> stats() const;
  ClusterHealth health() const;
  std::string describe() const;  // "3 nodes, sync q8_0, all-reduce auto (alpha .. us, beta .. Gbit/s)"
  std::string root_device() const;  // what runs the root's part: "cpu (avx512, 2 threads)", "Vulkan device 0 (...)"

 private:
  Cluster(const model::LoadedModel& m, util::ThreadPool& pool) : m_(m), pool_(pool) {}
  // A worker the root knows: one of --workers (home: its place in the list) or a spare.
  struct Member {
    enum class State { kActive, kIdle, kLost, kOut };  // kOut: not taken back automatically
    std::string addr;
    int home = -1;             // index in --workers, or -1 for a spare
    State state = State::kIdle;
    double since = 0;          // when it came back (rejoined) or was lost
    bool rejoined = false;     // active again after a loss (flap_window_s applies)
    double next_try = 0, backoff_s = 0;  // lost: when its address is tried again
  };
  // What the root learned of a worker (by peer name) when it first formed with it.
  struct PeerInfo {
    std::string device;
    double alpha_us = -1;  // -1: the link probe did not run (a forced algorithm, a spare)
  };
  // What a forming did, for a re-forming's report line.
  struct Reform {
    uint64_t streamed_bytes = 0;
    int streamed_to = 0;
    ReplayCount replayed;
  };

  // Forming (forming.cc).
  Setup session_setup() const;
  net::TcpOptions tcp_options() const;
  // Connects to the members at places_, plans, sets every node up; *failed: the member
  // to blame when it fails because of one (else -1).
  util::Status form(Reform* rep, int* failed);
  util::Status connect(std::vector<double>* shares, int* failed);
  util::Status first_measures(std::vector<double>* shares);
  util::Status root_fits() const;
  util::Status setup_workers(uint64_t* streamed, int* streamed_to, int* failed);

  // Stepping (stepping.cc): one step's I/O and compute: embedding rows of `tokens` (the
  // step's rows in order) to every worker, the root's part, every worker's reply.
  util::Expected<StepReply> execute(Step& s, std::span<const int32_t> tokens, std::vector<StepReply>* replies);
  util::Status send_step(std::span<const int32_t> tokens, Step& s);
  util::Status collect_replies(std::vector<StepReply>* replies);
  // Every sequence's rows in its slot's history and its log (cluster.cc).
  void record(const std::vector<SeqStep>& batch, const Step& s, const std::vector<SeqResult>& out);

  // Membership and recovery (membership.cc).
  // execute(), re-forming and running the step again while a worker is lost.
  util::Expected<StepReply> execute_recovering(Step& s, std::vector<StepReply>* replies);
  // After a failed step: who is lost, re-form, replay; fails when no cluster can be formed.
  util::Status recover(const util::Status& why);
  util::Status reform(const std::string& event, double t0);
  void reformed(const std::string& event, const Reform& rep, double t0);
  void maybe_rejoin();
  void check_spares();  // a spare that is there but refuses is put out (named) now
  void fill_places();  // empty places: a member back takes its own, idle spares the rest
  bool verify_alone(Member& mb);  // a session of its own: handshake, then shutdown
  void lose(int member, const std::string& why);
  int lose_unreachable(const std::string& why, int named);  // named (or -1) and the silent; how many
  int member_of(const util::Status& st) const;  // the active member a failure blames (its rank), or -1
  void drop_links();  // the node and the transport: every worker's session ends
  void publish_health();

  const model::LoadedModel& m_;
  util::ThreadPool& pool_;
  ClusterOptions o_;
  std::shared_ptr<net::Transport> t_;
  plan::Plan plan_;
  int forced_algo_ = -1;
  LinkModel link_;
  std::string sync_note_;           // why auto sync chose what it did
  std::string shares_note_;         // measured shares: each node's device, speed and share
  NodeModel root_slice_;
  Node node_;                       // the root's collective and executor
  std::vector<NodeStats> nodes_;
  std::map<std::string, PeerInfo> peers_;  // every worker formed with so far
  std::vector<uint8_t> rows_;       // [rows][row bytes] embedding rows of a step
  std::vector<float> x_;            // [rows][dim] the same rows embedded
  std::vector<int32_t> step_tokens_;  // a step's rows' tokens in order

  std::string model_path_, model_hash_;
  plan::ModelShape shape_;
  std::vector<double> home_shares_;  // the root's, then one per --workers entry
  std::vector<Member> members_;      // --workers in order, then --spare
  std::vector<int> places_;          // per --workers entry: the member computing its share, or -1
  std::vector<int> rank_member_;     // rank -> member (rank 0: -1, the root)
  std::vector<SlotHistory> history_; // per KV slot
  std::vector<int> ring_end_;        // per KV slot: the last position its latest step wrote
  int ring_ = 0;                     // rows the smallest sliding-window ring keeps (ctx: none)
  BlockPool blocks_{1, 1};           // the root's allocation of every node's KV pool
  double next_rejoin_check_ = 0;
  bool step_ok_since_recovery_ = true;
  util::Status broken_;              // recovery failed: every later step fails with this
  ClusterHealth health_;
  mutable std::mutex health_mu_;     // guards health_snapshot_
  ClusterHealth health_snapshot_;
};

}  // namespace runtime
