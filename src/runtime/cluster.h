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
// Recovery (ClusterOptions::recover, on by default): a step that fails because a worker
// died, timed out or answered nonsense is not the end. The root drops every link (the
// survivors go back to listening), puts an idle --spare in the dead worker's place (the
// plan is then unchanged) or re-plans over the survivors, connects again, sends each node
// the slice it lacks (a worker keeps the slices of earlier sessions; a --model worker
// slices its own file), replays every KV slot's history (SlotHistory, below) and runs the
// failed step again. Under exact sync the tokens are then exactly those of an undisturbed
// run on any node count. Between steps, a dead worker's address is tried every
// rejoin_every_s; one that answers (and passes the handshake on its own first) is taken
// back the same way. One that dies again within flap_window_s of coming back stays out.
// Under MPI (ClusterOptions::transport) the ranks are the workers: everything above is the
// same but the connecting, and there is no recovery.
// Deliberately no tokenizer, no text and no scheduling.
#pragma once
#include <atomic>
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
  std::string device;                // the root's device description; empty: cpu_description()
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

// Every step's segments of one KV slot since the cluster started, pruned to those whose
// rows can still be read: the KV rows of a slot are a function of this history alone
// (transformer.h: a row depends only on its own segment and slot), so evaluating the same
// segments again, in order, rebuilds the slot bit for bit on any node count. A segment at
// position p makes every earlier segment starting at >= p dead, so the list stays sorted
// by position; one that starts before p and reaches past it is kept whole.
// A rowwise segment (vec_dot order, model::Segment::rowwise) that reaches past p is cut
// at p instead: its rows do not depend on how many there are (verified drafts, rejected
// in part, leave only the accepted rows so).
class SlotHistory {
 public:
  struct Seg {
    int pos = 0, n = 0;
    size_t offset = 0;  // into tokens()
    bool rowwise = false;
  };
  void add(int pos, std::span<const int32_t> tokens, bool rowwise = false);
  const std::vector<Seg>& segs() const { return segs_; }
  std::span<const int32_t> tokens(const Seg& g) const { return {tokens_.data() + g.offset, size_t(g.n)}; }
  size_t n_tokens() const { return tokens_.size(); }

 private:
  std::vector<Seg> segs_;
  std::vector<int32_t> tokens_;
};

// What recovery does about a failed attempt to form the cluster, chosen by the failure's
// kind (util::Status::Code) and whether it blames one member (its rank): kGiveUp when
// fewer nodes would not help (a node has too little memory); kPutOut when the member is
// there but refuses (another key, protocol or link setting, or it said why): it is not
// tried again automatically; else kLose: the member blamed, and every active one whose
// port no longer answers, are lost, and the cluster is formed without them.
enum class Remedy : uint8_t { kGiveUp, kPutOut, kLose };
Remedy remedy_for(const util::Status& st, bool blames_member);

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

  int max_rows() const { return o_.batch; }
  int n_slots() const { return o_.n_slots; }
  int ctx() const { return o_.ctx; }  // positions per slot
  int n_vocab() const { return m_.config.n_vocab; }
  int n_nodes() const { return int(nodes_.size()); }
  const plan::Plan& plan() const { return plan_; }
  // Totals per node (root first) since the cluster was last formed; workers' as of their
  // last reply.
  std::vector<NodeStats> stats() const;
  ClusterHealth health() const;
  std::string describe() const;  // "3 nodes, sync q8_0, all-reduce auto (alpha .. us, beta .. Gbit/s)"
  std::string root_device() const;  // what runs the root's part: "cpu (2 threads)", "Vulkan device 0 (...)"

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
  // What a re-forming did, for its report line.
  struct Reform {
    uint64_t streamed_bytes = 0;
    int streamed_to = 0, replay_tokens = 0, replay_steps = 0;
  };
  Setup session_setup() const;
  net::TcpOptions tcp_options() const;
  util::Status probe_links();
  util::Status measure_shares();  // ClusterOptions::shares_mode: sets home_shares_
  util::Status choose_sync(const plan::ModelShape& shape, const std::vector<double>& shares, bool loopback);
  // Connects to the members at places_, plans, sets every node up; *failed: the member
  // to blame when it fails because of one (else -1).
  util::Status form(Reform* rep, int* failed);
  util::Status setup_workers(uint64_t* streamed, int* streamed_to, int* failed);
  // After a failed step: who is lost, re-form, replay; fails when no cluster can be formed.
  util::Status recover(const util::Status& why);
  util::Status reform(const std::string& event, double t0);
  void maybe_rejoin();
  void fill_places();  // empty places: a member back takes its own, idle spares the rest
  bool verify_alone(Member& mb);  // a session of its own: handshake, then shutdown
  void lose(int member, const std::string& why);
  int lose_unreachable(const std::string& why, int named);  // named (or -1) and the silent; how many
  int member_of(const util::Status& st) const;  // the active member a failure blames (its rank), or -1
  static bool reachable(const std::string& addr);  // its port accepts a TCP connection
  util::Status replay(Reform* rep);
  // One step's I/O and compute: embedding rows of `tokens` (the step's rows in order) to
  // every worker, the root's part, every worker's reply.
  util::Expected<StepReply> execute(Step& s, std::span<const int32_t> tokens, std::vector<StepReply>* replies);
  void publish_health();
  struct StreamProgress {  // one worker's weight stream, shared with the progress printer
    bool active = false;
    std::atomic<bool> done{false};
    std::atomic<uint64_t> total{0}, sent{0};
    std::atomic<double> seconds{0};
  };
  util::Status stream_slices(const std::vector<bool>& have, uint64_t* streamed, int* failed);
  util::Status stream_slice(int rank, const plan::NodeSlice& s, StreamProgress* prog, const std::atomic<bool>& abort);
  util::Status send_step(std::span<const int32_t> tokens, Step& s);
  util::Status collect_replies(std::vector<StepReply>* replies);

  const model::LoadedModel& m_;
  util::ThreadPool& pool_;
  ClusterOptions o_;
  std::shared_ptr<net::Transport> t_;
  plan::Plan plan_;
  int forced_algo_ = -1;
  double alpha_us_ = 50, beta_gbps_ = 1;
  std::string sync_note_;           // why auto sync chose what it did
  std::string shares_note_;         // measured shares: each node's device, speed and share
  NodeModel root_slice_;
  std::unique_ptr<AutoCollective> coll_;
  std::unique_ptr<NodeExecutor> exec_;
  std::vector<NodeStats> nodes_;
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
  double next_rejoin_check_ = 0;
  bool step_ok_since_recovery_ = true;
  util::Status broken_;              // recovery failed: every later step fails with this
  ClusterHealth health_;
  mutable std::mutex health_mu_;     // guards health_snapshot_
  ClusterHealth health_snapshot_;
};

}  // namespace runtime
