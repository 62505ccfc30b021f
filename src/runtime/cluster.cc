// cluster.cc: the root's cluster as a whole (cluster.h): start, a step (build, execute with
// recovery, merge, record) and what it reports. Forming is in forming.cc, the step's parts
// in stepping.cc, slot histories in history.cc, membership and recovery in membership.cc.
#include "runtime/cluster.h"

#include <algorithm>
#include <cstdio>

#include "kernels/kernels.h"
#include "runtime/stepping.h"
#include "util/sha256.h"
#include "util/timer.h"

namespace runtime {

using util::Expected;
using util::Status;

namespace {

// The options that no cluster can run; n: nodes.
Status check_options(const model::LoadedModel& m, const ClusterOptions& o, int n) {
  if (o.transport && (!o.workers.empty() || !o.spares.empty()))
    return Status::error("--workers and --spare are for --transport tcp: under MPI every rank but 0 is a worker");
  if (!o.shares.empty() && int(o.shares.size()) != n)
    return Status::error("--shares lists " + std::to_string(o.shares.size()) + " values for " + std::to_string(n) +
                         " nodes (the root and " + std::to_string(n - 1) +
                         " workers): give one share per node, the root's first");
  if (o.algo != "auto") {
    auto a = net::algo_from_name(o.algo);
    if (!a) return Status::error("--allreduce must be auto, all-gather, star, ring or mpi, not '" + o.algo + "'");
    if (*a == net::AllReduceAlgo::kMpi && (!o.transport || o.exact || o.auto_sync || o.sync == net::SyncType::kQ8_0))
      return Status::error("--allreduce mpi needs --transport mpi and --sync-type f32 or f16");
  }
  if (!o.exact && !o.auto_sync && o.sync == net::SyncType::kQ8_0 && m.config.dim % 32 != 0)
    return Status::error("dim " + std::to_string(m.config.dim) + " is not a multiple of 32: use --sync-type f16");
  if (std::string why = model::attention_unsupported(m.config, o.run.kv_type, o.run.attention, o.run.attn_bf16); !why.empty())
    return Status::error(why);
  if (n == 1 && !o.spares.empty()) return Status::error("--spare needs --workers: a spare takes a lost worker's place");
  return util::ok_status();
}

}  // namespace

Expected<std::unique_ptr<Cluster>> Cluster::start(const model::LoadedModel& m, const std::string& model_path,
                                                  const ClusterOptions& o, util::ThreadPool& pool) {
  const int n = o.transport ? o.transport->size() : int(o.workers.size()) + 1;
  RETURN_IF_ERROR(check_options(m, o, n));
  std::unique_ptr<Cluster> c(new Cluster(m, pool));
  c->o_ = o;
  if (o.algo != "auto") c->forced_algo_ = int(*net::algo_from_name(o.algo));
  if (n == 1) c->o_.exact = false;
  c->model_path_ = model_path;
  c->shape_ = shape_of(m.config, m.weights);
  c->home_shares_ = o.shares.empty() ? std::vector<double>(size_t(n), 1.0) : o.shares;
  c->history_.resize(size_t(std::max(1, o.run.n_slots)));
  c->ring_end_.assign(size_t(std::max(1, o.run.n_slots)), -1);
  c->ring_ = o.run.ctx;
  for (int r : model::kv_layer_ctx(m.config, o.run.ctx, std::max(1, o.run.max_batch))) c->ring_ = std::min(c->ring_, r);
  c->blocks_ = BlockPool(o.run.kv_blocks > 0 ? o.run.kv_blocks : std::max(1, o.run.n_slots) * model::kv_blocks_for(o.run.ctx),
                         std::max(1, o.run.n_slots));
  for (size_t i = 0; i < o.workers.size(); ++i) {
    c->members_.push_back({o.workers[i], int(i), Member::State::kActive, util::now_seconds(), false});
    c->places_.push_back(int(i));
  }
  for (const std::string& a : o.spares) c->members_.push_back({a, -1, Member::State::kIdle, 0, false});
  if (n > 1) {
    auto hash = util::sha256_file_cached(model_path);
    if (!hash) return hash.status();
    c->model_hash_ = *hash;
  }
  Reform rep;
  int failed = -1;
  RETURN_IF_ERROR(c->form(&rep, &failed));
  c->blocks_.set_host_capacity(c->no_prefix_sharing().empty() ? o.run.kv_host_blocks : 0);
  c->check_spares();
  c->health_.nodes_planned = n;
  c->publish_health();
  return c;
}

Cluster::~Cluster() {
  if (!t_) return;
  for (int r = 1; r < t_->size(); ++r) (void)t_->send(r, msg_type(Msg::kShutdown), {}, 1.0);
}

void Cluster::release(Sequence& seq) {
  seq.truncate(0);
  blocks_.release(seq.slot());
  history_[size_t(seq.slot())] = SlotHistory();
}

bool Cluster::keep_own(Sequence& seq, int n) {
  if (!blocks_.truncate(seq.slot(), n)) return false;
  seq.truncate(n);
  history_[size_t(seq.slot())].truncate(n);  // a re-forming before its next step replays no more
  return true;
}

bool Cluster::can_rewind(int slot, int pos) const {
  const int w = m_.config.n_swa;
  if (pos <= 0 || w <= 0 || ring_ >= o_.run.ctx) return true;
  return std::max(0, pos - w + 1) > ring_end_[size_t(slot)] - ring_;
}

bool Cluster::order_matters() const {
  if (!o_.run.lane_order) return false;
  if (!m_.file) return true;
  for (const gguf::TensorInfo& t : m_.file->tensors())
    if (t.ne.size() >= 2 && t.ne[1] > 1 && kernels::lane_order_type(t.type)) return true;
  return false;
}

std::vector<int8_t> Cluster::row_orders(int slot, int n) const {
  std::vector<int8_t> out(size_t(std::max(n, 0)), int8_t(-1));
  // Segments in the order they ran: a later one overwrote the rows it shares with an earlier
  // (a lane-order segment kept whole past a cut, SlotHistory::truncate).
  for (const SlotHistory::Seg& g : history_[size_t(slot)].segs())
    for (int p = std::max(g.pos, 0); p < std::min(g.pos + g.n, n); ++p) out[size_t(p)] = g.rowwise ? 0 : 1;
  return out;
}

std::string Cluster::no_prefix_sharing() const {
  // (A Vulkan node reads its cache through the same block tables as a CPU node.)
  if (m_.config.n_swa > 0) return "sliding-window layers keep their rows per slot";
  return "";
}

int Cluster::shared_prefix(std::span<const int32_t> prompt, int max_tokens, bool host, bool any_room) const {
  if (!no_prefix_sharing().empty()) return 0;
  return blocks_.prefix_blocks(prompt, max_tokens / model::kKvBlockRows, !o_.run.lane_order, host, any_room) *
         model::kKvBlockRows;
}

int Cluster::share_prefix(Sequence& seq, std::span<const int32_t> prompt, int max_tokens, bool host) {
  release(seq);
  if (!no_prefix_sharing().empty()) return 0;
  const int n = blocks_.attach_prefix(seq.slot(), prompt, max_tokens / model::kKvBlockRows, !o_.run.lane_order, host) *
                model::kKvBlockRows;
  const std::span<const int32_t> prefix = prompt.first(size_t(n));
  seq.append(prefix);
  // The history rebuilds the shared rows too (a re-forming replays every slot; the
  // sequence that wrote them may be gone): segments of a block or as many rows as a step
  // holds, in the order the rows were computed (all lane order unless lane order is off).
  const int chunk = std::min(model::kKvBlockRows, max_rows());
  for (int p = 0; p < n; p += chunk)
    history_[size_t(seq.slot())].add(p, prefix.subspan(size_t(p), size_t(std::min(chunk, n - p))), !o_.run.lane_order);
  return n;
}

Expected<std::vector<Cluster::SeqResult>> Cluster::run(const std::vector<SeqStep>& batch) {
  auto s = build_step(batch, m_.config, o_.run.ctx, o_.run.n_slots, o_.run.max_batch, &step_tokens_);
  if (!s) return s.status();
  int need = 0;
  for (const SeqStep& q : batch) {
    // A log cut short outside keep_own (a rollback, bench, perplexity): the blocks it will
    // write again are no longer the registered prefix, and a re-forming in this step
    // replays the history as far as the log (SlotHistory::truncate).
    if (blocks_.registered(q.seq->slot()) > q.seq->n_past() && !blocks_.truncate(q.seq->slot(), q.seq->n_past()))
      return Status::error("internal: a step would write into a KV block another sequence shares (slot " +
                           std::to_string(q.seq->slot()) + ", position " + std::to_string(q.seq->n_past()) + ")");
    history_[size_t(q.seq->slot())].truncate(q.seq->n_past());
    need += kv_blocks_needed(*q.seq, int(q.tokens.size()));
  }
  if (need > blocks_.free_blocks())
    return Status::error("the KV pool is full: the step needs " + std::to_string(need) + " more blocks of " +
                         std::to_string(model::kKvBlockRows) + " positions and " +
                         std::to_string(blocks_.free_blocks()) + " of " + std::to_string(blocks_.n_blocks()) +
                         " are free");
  for (const SeqStep& q : batch) CHECK(blocks_.reserve(q.seq->slot(), q.seq->n_past() + int(q.tokens.size())));
  std::vector<StepReply> replies;
  auto mine = execute_recovering(*s, &replies);
  if (!mine) return mine.status();
  auto out = merge_step(batch, *s, *mine, replies);
  if (!out) return out.status();
  record(batch, *s, *out);
  return out;
}

void Cluster::record(const std::vector<SeqStep>& batch, const Step& s, const std::vector<SeqResult>& out) {
  for (size_t i = 0; i < batch.size(); ++i) {
    const SeqStep& q = batch[i];
    const StepSegment& g = s.segs[i];
    // rowwise as the transformer ran it (short segments take vec_dot order)
    const bool rowwise = !model::lane_ordered(g.n, g.rowwise, o_.run.lane_order, o_.run.decode_lanes);
    // drafts: only the kept guesses stay (the last drawn token is evaluated next step)
    const size_t keep = q.drafts > 0 ? out[i].tokens.size() : q.tokens.size();
    ring_end_[size_t(q.seq->slot())] = q.seq->n_past() + int(q.tokens.size()) - 1;
    history_[size_t(q.seq->slot())].add(q.seq->n_past(), q.tokens.first(keep), rowwise);
    blocks_.note_rows(q.seq->slot(), q.seq->n_past(), int(keep), rowwise);
    q.seq->append(q.tokens.first(keep));
    blocks_.register_full(q.seq->slot(), q.seq->tokens());
  }
}

Expected<int32_t> Cluster::extend(Sequence& seq, std::span<const int32_t> tokens, bool sample) {
  int32_t next = -1;
  for (size_t i = 0; i < tokens.size(); i += size_t(o_.run.max_batch)) {
    const size_t n = std::min(tokens.size() - i, size_t(o_.run.max_batch));
    const bool last = i + n == tokens.size();
    auto r = run({SeqStep{&seq, tokens.subspan(i, n), sample && last ? Want::kCandidates : Want::kNothing, {}}});
    if (!r) return r.status();
    if (!(*r)[0].tokens.empty()) next = (*r)[0].tokens[0];
  }
  return next;
}

Expected<std::vector<double>> Cluster::score(Sequence& seq, std::span<const int32_t> tokens,
                                             std::span<const int32_t> targets) {
  CHECK(tokens.size() == targets.size());
  std::vector<double> nll;
  for (size_t i = 0; i < tokens.size(); i += size_t(o_.run.max_batch)) {
    const size_t n = std::min(tokens.size() - i, size_t(o_.run.max_batch));
    auto r = run({SeqStep{&seq, tokens.subspan(i, n), Want::kScores, targets.subspan(i, n)}});
    if (!r) return r.status();
    nll.insert(nll.end(), (*r)[0].nll.begin(), (*r)[0].nll.end());
  }
  return nll;
}

std::vector<NodeStats> Cluster::stats() const { return nodes_; }

std::string Cluster::root_device() const { return node_.exec->model().backend().describe(); }

std::string Cluster::describe() const {
  const std::string note =
      (sync_note_.empty() ? "" : "; " + sync_note_) + (shares_note_.empty() ? "" : "; " + shares_note_);
  if (o_.exact)
    return std::to_string(n_nodes()) + " nodes, sync exact (4 gathers per layer, bit-identical to one node)" + note;
  char buf[256];
  const std::string algo = forced_algo_ >= 0 ? net::algo_name(net::AllReduceAlgo(forced_algo_)) : "auto";
  std::snprintf(buf, sizeof buf, "%d nodes, sync %s, all-reduce %s", n_nodes(), net::sync_type_name(o_.sync),
                algo.c_str());
  std::string s = buf;
  if (t_ && forced_algo_ < 0) {
    std::snprintf(buf, sizeof buf, " (alpha %.0f us, beta %.2f Gbit/s: decode %s)", link_.alpha_us,
                  link_.beta_gbps, net::algo_name(node_.coll->algo_for(size_t(m_.config.dim))));
    s += buf;
  }
  return s + note;
}

}  // namespace runtime
