// cluster.cc: cluster formation, link probes, weight streaming and the root's step.
#include "runtime/cluster.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "kernels/kernels.h"
#include "net/tcp_transport.h"
#include "util/sha256.h"
#include "util/timer.h"

namespace runtime {

using util::Expected;
using util::Status;

namespace {

// Why a step failed, with what to do.
Status step_failed(const Status& st) {
  return Status::error(st.message() + " (the cluster cannot go on; check that worker process and its network, "
                                      "then start the root again)");
}

Status check_tokens(const model::Config& cfg, const int32_t* tokens, int n) {
  for (int b = 0; b < n; ++b)
    if (tokens[b] < 0 || tokens[b] >= cfg.n_vocab)
      return Status::error("token id " + std::to_string(tokens[b]) + " is outside the vocabulary");
  return util::ok_status();
}

}  // namespace

Expected<std::unique_ptr<Cluster>> Cluster::start(const model::LoadedModel& m, const std::string& model_path,
                                                  const ClusterOptions& o, util::ThreadPool& pool) {
  std::unique_ptr<Cluster> c(new Cluster(m, pool));
  c->o_ = o;
  const int n = int(o.workers.size()) + 1;
  std::vector<double> shares = o.shares;
  if (shares.empty()) shares.assign(n, 1.0);
  if (int(shares.size()) != n)
    return Status::error("--shares lists " + std::to_string(shares.size()) + " values for " + std::to_string(n) +
                         " nodes (the root and " + std::to_string(n - 1) +
                         " workers): give one share per node, the root's first");
  if (o.algo != "auto") {
    auto a = net::algo_from_name(o.algo);
    if (!a) return Status::error("--allreduce must be auto, all-gather, star or ring, not '" + o.algo + "'");
    c->forced_algo_ = int(*a);
  }
  if (!o.exact && !o.auto_sync && o.sync == net::SyncType::kQ8_0 && m.config.dim % 32 != 0)
    return Status::error("dim " + std::to_string(m.config.dim) + " is not a multiple of 32: use --sync-type f16");
  if (std::string why = model::attention_unsupported(m.config, o.kv_type, o.attention); !why.empty())
    return Status::error(why);
  const plan::ModelShape shape = shape_of(m.config, m.weights);
  c->nodes_.push_back({"root", {}});
  if (n > 1) {
    auto hash = util::sha256_file_cached(model_path);
    if (!hash) return hash.status();
    net::TcpOptions topt;
    topt.cluster_key = o.cluster_key;
    topt.link_encryption = o.link_encryption;
    topt.software_version = o.software_version;
    auto t = net::TcpTransport::connect_root(o.workers, topt);
    if (!t) return t.status();
    c->t_ = std::move(*t);
    for (int r = 1; r < n; ++r) c->nodes_.push_back({c->t_->peer_name(r), {}});
    if (c->forced_algo_ < 0 || o.auto_sync) RETURN_IF_ERROR(c->probe_links());
    if (o.auto_sync) RETURN_IF_ERROR(c->choose_sync(shape, shares));
    auto p = plan::make_plan(shape, shares, c->o_.exact);
    if (!p) return p.status();
    c->plan_ = std::move(*p);
    RETURN_IF_ERROR(c->setup_workers(*hash));
    c->t_->reset_counters();
    c->coll_ = std::make_unique<AutoCollective>(*c->t_, ExactRows::of(c->plan_.nodes[0]), c->o_.sync,
                                                c->forced_algo_, c->alpha_us_, c->beta_gbps_, m.config.dim,
                                                o.step_timeout_s, o.batch);
  } else {
    c->o_.exact = false;
    auto p = plan::make_plan(shape, shares, false);
    if (!p) return p.status();
    c->plan_ = std::move(*p);
  }
  c->root_slice_ = slice_weights(m.config, m.weights, c->plan_.nodes[0]);
  c->exec_ = std::make_unique<NodeExecutor>(m.config, c->root_slice_.weights, c->root_slice_.part, pool,
                                            c->session_setup().run_config(), c->coll_.get());
  return c;
}

// What every node's session shares (each worker's slice is added per rank).
Setup Cluster::session_setup() const {
  Setup s;
  s.config = m_.config;
  s.sync = o_.sync;
  s.forced_algo = int8_t(forced_algo_);
  s.alpha_us = alpha_us_;
  s.beta_gbps = beta_gbps_;
  s.ctx = o_.ctx;
  s.batch = o_.batch;
  s.n_slots = o_.n_slots;
  s.kv_type = o_.kv_type;
  s.attention = o_.attention;
  s.lane_order = o_.lane_order;
  s.decode_lanes = o_.decode_lanes;
  s.step_timeout_s = o_.step_timeout_s;
  return s;
}

// Exact sync gives one node's tokens; q8_0 all-reduces are cheaper on a slow link. Both
// plans are costed under the measured link and an assumed modest memory bandwidth; q8_0
// wins only when it saves kAutoSyncSaving of the predicted time per token.
Status Cluster::choose_sync(const plan::ModelShape& shape, const std::vector<double>& shares) {
  auto exact = plan::make_plan(shape, shares, true);
  if (!exact) return exact.status();
  plan::CostParams cp;
  cp.link.alpha_us = alpha_us_;
  cp.link.beta_gbps = beta_gbps_;
  cp.mem_gbps = {kAutoSyncMemGbps};
  const double t_exact = plan::cluster_cost(*exact, cp).total_ms;
  double t_q8 = 1e30;
  if (m_.config.dim % 32 == 0) {
    auto q8 = plan::make_plan(shape, shares, false);
    if (!q8) return q8.status();
    cp.sync_type = tensor::Type::Q8_0;
    t_q8 = plan::cluster_cost(*q8, cp).total_ms;
  }
  const bool use_q8 = t_q8 <= (1 - kAutoSyncSaving) * t_exact;
  o_.exact = !use_q8;
  o_.sync = use_q8 ? net::SyncType::kQ8_0 : net::SyncType::kF32;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "sync auto chose %s: predicted %.2f ms per token exact, %.2f ms q8_0 (q8_0 is taken when it saves "
                "%.0f%%; force one with --sync-type)",
                use_q8 ? "q8_0" : "exact", t_exact, t_q8 < 1e29 ? t_q8 : 0.0, kAutoSyncSaving * 100);
  sync_note_ = buf;
  return util::ok_status();
}

Cluster::~Cluster() {
  if (!t_) return;
  for (int r = 1; r < t_->size(); ++r) (void)t_->send(r, msg_type(Msg::kShutdown), {}, 1.0);
}

Status Cluster::probe_links() {
  // α: half the best round trip of a small message; β from the best 1 MiB round trip.
  double best_small = 1e9, best_big = 1e9;
  std::vector<uint8_t> small(64, 0x5a), big(size_t(1) << 20, 0xa5);
  for (int r = 1; r < t_->size(); ++r) {
    for (int i = 0; i < 5; ++i) {
      util::Timer tm;
      RETURN_IF_ERROR(t_->send(r, net::MessageType::kPing, small, 5.0));
      auto pong = t_->recv_expect(r, net::MessageType::kPong, 5.0);
      if (!pong) return pong.status();
      best_small = std::min(best_small, tm.seconds());
    }
    for (int i = 0; i < 3; ++i) {
      util::Timer tm;
      RETURN_IF_ERROR(t_->send(r, net::MessageType::kPing, big, 10.0));
      auto pong = t_->recv_expect(r, net::MessageType::kPong, 10.0);
      if (!pong) return pong.status();
      best_big = std::min(best_big, tm.seconds());
    }
  }
  alpha_us_ = best_small / 2 * 1e6;
  const double transfer_s = std::max(best_big - best_small, 1e-6) / 2;  // one way, one MiB
  beta_gbps_ = double(big.size()) * 8 / transfer_s / 1e9;
  return util::ok_status();
}

Status Cluster::setup_workers(const std::string& model_hash) {
  const int n = t_->size();
  std::vector<bool> have(n, false);
  for (int r = 1; r < n; ++r) {
    Setup s = session_setup();
    s.model_hash = model_hash;
    s.slice = plan_.nodes[r];
    RETURN_IF_ERROR(t_->send(r, msg_type(Msg::kSetup), encode_setup(s), 10.0));
    auto rep = t_->recv_expect(r, msg_type(Msg::kSetupReply), 120.0);  // a --model worker may be slicing
    if (!rep) return rep.status();
    auto h = parse_u64(rep->payload, "setup reply from " + t_->peer_name(r));
    if (!h) return h.status();
    have[r] = *h != 0;
  }
  RETURN_IF_ERROR(stream_slices(have));
  for (int r = 1; r < n; ++r) {
    auto ready = t_->recv_expect(r, msg_type(Msg::kReady), 120.0);
    if (!ready) return ready.status();
  }
  return util::ok_status();
}

// Every worker that lacks its slice gets it at once: one thread per worker slices and sends
// (each thread drives only its own peer's connection, which TcpTransport allows), while
// this thread prints the progress. The first failure stops the other streams.
Status Cluster::stream_slices(const std::vector<bool>& have) {
  const int n = t_->size();
  std::vector<StreamProgress> prog(n);
  std::vector<Status> result(n);
  std::atomic<bool> abort{false};
  std::atomic<int> first_failed{-1};  // its error is the one to report, not "stopped"
  std::vector<std::thread> threads;
  for (int r = 1; r < n; ++r) {
    if (have[r]) continue;
    prog[r].active = true;
    threads.emplace_back([&, r] {
      result[r] = stream_slice(r, plan_.nodes[r], &prog[r], abort);
      if (!result[r].ok()) {
        int none = -1;
        first_failed.compare_exchange_strong(none, r);
        abort = true;
      }
      prog[r].done = true;
    });
  }
  if (threads.empty()) return util::ok_status();
  util::Timer timer;
  const bool tty = ::isatty(STDERR_FILENO);
  int drawn = 0;  // lines drawn on a terminal, redrawn in place
  std::vector<bool> reported(n, false);
  auto line = [&](int r) {
    const StreamProgress& p = prog[r];
    if (p.done && !result[r].ok())
      return "weights to " + t_->peer_name(r) + ": stopped after " + std::to_string(p.sent / 1000000) + " MB";
    const double s = p.done ? p.seconds.load() : timer.seconds();
    const double sent = double(p.sent), total = double(p.total);
    const double mbs = s > 0 ? sent / s / 1e6 : 0;
    const double eta = sent > 0 && mbs > 0 ? (total - sent) / 1e6 / mbs : 0;  // 0 until data flows
    char buf[256];
    std::snprintf(buf, sizeof buf, "weights to %s: %.1f / %.1f MB, %.1f MB/s, %s %.1f s", t_->peer_name(r).c_str(),
                  sent / 1e6, total / 1e6, mbs, p.done ? "took" : "ETA", p.done ? s : eta);
    return std::string(buf);
  };
  for (bool all_done = false; !all_done;) {
    all_done = true;
    for (int r = 1; r < n; ++r) all_done = all_done && (!prog[r].active || prog[r].done);
    if (!o_.progress) {
      if (!all_done) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    if (tty) {  // one line per worker, redrawn
      if (drawn) std::fprintf(stderr, "\x1b[%dA", drawn);
      drawn = 0;
      for (int r = 1; r < n; ++r)
        if (prog[r].active) { std::fprintf(stderr, "\r\x1b[K%s\n", line(r).c_str()); ++drawn; }
    } else {    // a log: one line per worker when it is done
      for (int r = 1; r < n; ++r)
        if (prog[r].active && prog[r].done && !reported[r]) {
          std::fprintf(stderr, "%s\n", line(r).c_str());
          reported[r] = true;
        }
    }
    if (!all_done) std::this_thread::sleep_for(std::chrono::milliseconds(tty ? 200 : 50));
  }
  for (auto& th : threads) th.join();
  return first_failed >= 0 ? result[first_failed] : util::ok_status();
}

Status Cluster::stream_slice(int rank, const plan::NodeSlice& s, StreamProgress* prog,
                             const std::atomic<bool>& abort) {
  NodeModel nm = slice_weights(m_.config, m_.weights, s);
  uint64_t total = 0, count = 0;
  TensorVisitor sizes;
  sizes.matrix = [&](const std::string&, model::Matrix* m) { total += m->bytes(); return util::ok_status(); };
  sizes.vector = [&](const std::string&, model::Vector* v) { total += v->size() * 4; return util::ok_status(); };
  RETURN_IF_ERROR(visit_tensors(nm.weights, m_.config.n_layers, sizes));
  prog->total = total;
  util::Timer timer;
  auto send = [&](const std::string& name, tensor::Type type, uint64_t rows, uint64_t cols, const uint8_t* data,
                  uint64_t bytes) -> Status {
    uint64_t off = 0;
    do {
      if (abort) return Status::error("weight streaming stopped: another worker failed");
      const uint64_t len = std::min<uint64_t>(kMaxChunkBytes, bytes - off);
      TensorChunk c{name, type, rows, cols, bytes, off, std::span<const uint8_t>(data + off, len)};
      RETURN_IF_ERROR(t_->send(rank, msg_type(Msg::kTensor), encode_tensor_chunk(c), 60.0));
      off += len;
      prog->sent += len;
    } while (off < bytes);
    ++count;
    return util::ok_status();
  };
  TensorVisitor v;
  v.matrix = [&](const std::string& name, model::Matrix* m) {
    return send(name, m->type, uint64_t(m->rows), uint64_t(m->cols), m->data, m->bytes());
  };
  v.vector = [&](const std::string& name, model::Vector* vec) -> Status {
    if (vec->empty()) return util::ok_status();
    return send(name, tensor::Type::F32, 1, vec->size(), reinterpret_cast<const uint8_t*>(vec->data()),
                vec->size() * 4);
  };
  RETURN_IF_ERROR(visit_tensors(nm.weights, m_.config.n_layers, v));
  RETURN_IF_ERROR(t_->send(rank, msg_type(Msg::kWeightsDone), encode_u64(count), 10.0));
  prog->seconds = timer.seconds();
  return util::ok_status();
}

Status Cluster::send_step(const std::vector<SeqStep>& batch, Step& s) {
  if (!t_) return util::ok_status();
  const model::Matrix& embd = m_.weights.token_embd;
  size_t rows = 0;
  for (const SeqStep& q : batch) rows += q.tokens.size();
  rows_.resize(embd.row_bytes * rows);
  size_t b = 0;
  for (const SeqStep& q : batch)
    for (int32_t id : q.tokens) std::memcpy(rows_.data() + embd.row_bytes * b++, embd.row(id), embd.row_bytes);
  s.embd_type = embd.type;
  s.rows = rows_;
  const std::vector<uint8_t> payload = encode_step(s);
  for (int r = 1; r < t_->size(); ++r) {
    Status st = t_->send(r, msg_type(Msg::kStep), payload, o_.step_timeout_s);
    if (!st.ok()) return step_failed(st);
  }
  return util::ok_status();
}

Status Cluster::collect_replies(std::vector<StepReply>* replies) {
  replies->clear();
  if (!t_) return util::ok_status();
  for (int r = 1; r < t_->size(); ++r) {
    auto m = t_->recv_expect(r, msg_type(Msg::kStepReply), o_.step_timeout_s);
    if (!m) return step_failed(m.status());
    auto rep = parse_step_reply(m->payload, t_->peer_name(r));
    if (!rep) return step_failed(rep.status());
    nodes_[r].counters = rep->counters;
    replies->push_back(std::move(*rep));
  }
  const net::ByteCounters bc = t_->counters();
  nodes_[0].counters.bytes_sent = bc.bytes_sent;
  nodes_[0].counters.bytes_received = bc.bytes_received;
  return util::ok_status();
}

Expected<std::vector<Cluster::SeqResult>> Cluster::run(const std::vector<SeqStep>& batch) {
  const model::Config& cfg = m_.config;
  size_t rows = 0;
  Step s;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SeqStep& q = batch[i];
    CHECK(q.seq != nullptr && !q.tokens.empty());
    CHECK(q.want != Want::kScores || q.targets.size() == q.tokens.size());
    RETURN_IF_ERROR(check_tokens(cfg, q.tokens.data(), int(q.tokens.size())));
    for (int32_t t : q.targets)
      if (t >= cfg.n_vocab) return Status::error("target id " + std::to_string(t) + " is outside the vocabulary");
    if (q.seq->slot() < 0 || q.seq->slot() >= o_.n_slots) return Status::error("internal: no such KV slot");
    for (size_t j = 0; j < i; ++j)
      if (batch[j].seq->slot() == q.seq->slot()) return Status::error("internal: a KV slot appears twice in a step");
    if (q.seq->n_past() + int64_t(q.tokens.size()) > o_.ctx)
      return Status::error("the sequence would pass the context of " + std::to_string(o_.ctx) + " tokens");
    rows += q.tokens.size();
    StepSegment g;
    g.slot = q.seq->slot();
    g.pos = q.seq->n_past();
    g.n = int(q.tokens.size());
    g.want = q.want;
    if (q.want == Want::kScores) {
      g.targets.assign(q.targets.begin(), q.targets.end());
      if (std::none_of(g.targets.begin(), g.targets.end(), [](int32_t t) { return t >= 0; })) g.want = Want::kNothing;
    }
    if (q.want == Want::kCandidates) {
      sampler::DistributedSampler& smp = q.seq->sampler();
      g.k = smp.k();
      g.penalties = sampler::penalty_counts(smp.params(), q.seq->tokens(), q.tokens);
      g.repeat_penalty = smp.params().repeat_penalty;
      g.presence_penalty = smp.params().presence_penalty;
      g.frequency_penalty = smp.params().frequency_penalty;
    }
    s.segs.push_back(std::move(g));
  }
  if (rows == 0 || int(rows) > o_.batch)
    return Status::error("internal: a step of " + std::to_string(rows) + " rows (1.." + std::to_string(o_.batch) + ")");
  RETURN_IF_ERROR(send_step(batch, s));
  const int D = cfg.dim;
  x_.resize(rows * D);
  size_t b = 0;
  for (const SeqStep& q : batch)
    for (int32_t id : q.tokens) exec_->embed(id, &x_[D * b++]);
  auto mine = exec_->run(s, x_.data());
  if (!mine) return step_failed(mine.status());
  nodes_[0].counters.compute_s = exec_->counters().compute_s;
  nodes_[0].counters.sync_s = exec_->counters().sync_s;
  nodes_[0].counters.steps = exec_->counters().steps;
  std::vector<StepReply> replies;
  RETURN_IF_ERROR(collect_replies(&replies));
  for (size_t r = 0; r < replies.size(); ++r)
    if (replies[r].sampled.size() != mine->sampled.size() || replies[r].scores.size() != mine->scores.size())
      return step_failed(Status::error(t_->peer_name(int(r) + 1) + " answered a step with the wrong number of "
                                       "candidate lists or row scores"));
  std::vector<SeqResult> out(batch.size());
  size_t si = 0, ri = 0;  // sampled segment, scored row
  std::vector<std::vector<sampler::Candidate>> parts;
  std::vector<RowScore> pieces;
  for (size_t i = 0; i < batch.size(); ++i) {
    const StepSegment& g = s.segs[i];
    if (g.want == Want::kCandidates) {
      parts.clear();
      parts.push_back(std::move(mine->sampled[si].cand));
      for (auto& rep : replies) parts.push_back(std::move(rep.sampled[si].cand));
      out[i].token = batch[i].seq->sampler().sample(parts);
      ++si;
    } else if (g.want == Want::kScores) {
      for (int32_t t : g.targets) {
        if (t < 0) continue;
        pieces.assign(1, mine->scores[ri]);
        for (auto& rep : replies) pieces.push_back(rep.scores[ri]);
        auto v = combine_row_scores(pieces);
        if (!v) return step_failed(v.status());
        out[i].nll.push_back(*v);
        ++ri;
      }
    }
  }
  for (const SeqStep& q : batch) q.seq->append(q.tokens);
  return out;
}

Expected<int32_t> Cluster::extend(Sequence& seq, std::span<const int32_t> tokens, bool sample) {
  int32_t next = -1;
  for (size_t i = 0; i < tokens.size(); i += size_t(o_.batch)) {
    const size_t n = std::min(tokens.size() - i, size_t(o_.batch));
    const bool last = i + n == tokens.size();
    auto r = run({SeqStep{&seq, tokens.subspan(i, n), sample && last ? Want::kCandidates : Want::kNothing, {}}});
    if (!r) return r.status();
    next = (*r)[0].token;
  }
  return next;
}

Expected<std::vector<double>> Cluster::score(Sequence& seq, std::span<const int32_t> tokens,
                                             std::span<const int32_t> targets) {
  CHECK(tokens.size() == targets.size());
  std::vector<double> nll;
  for (size_t i = 0; i < tokens.size(); i += size_t(o_.batch)) {
    const size_t n = std::min(tokens.size() - i, size_t(o_.batch));
    auto r = run({SeqStep{&seq, tokens.subspan(i, n), Want::kScores, targets.subspan(i, n)}});
    if (!r) return r.status();
    nll.insert(nll.end(), (*r)[0].nll.begin(), (*r)[0].nll.end());
  }
  return nll;
}

std::vector<NodeStats> Cluster::stats() const { return nodes_; }

std::string Cluster::describe() const {
  const std::string note = sync_note_.empty() ? "" : "; " + sync_note_;
  if (o_.exact)
    return std::to_string(n_nodes()) + " nodes, sync exact (4 gathers per layer, bit-identical to one node)" + note;
  char buf[256];
  const std::string algo = forced_algo_ >= 0 ? net::algo_name(net::AllReduceAlgo(forced_algo_)) : "auto";
  std::snprintf(buf, sizeof buf, "%d nodes, sync %s, all-reduce %s", n_nodes(), net::sync_type_name(o_.sync),
                algo.c_str());
  std::string s = buf;
  if (t_ && forced_algo_ < 0) {
    std::snprintf(buf, sizeof buf, " (alpha %.0f us, beta %.2f Gbit/s: decode %s)", alpha_us_, beta_gbps_,
                  net::algo_name(coll_->algo_for(size_t(m_.config.dim))));
    s += buf;
  }
  return s + note;
}

}  // namespace runtime
