// cluster.cc: cluster formation, link probes, weight streaming and the root's step.
#include "runtime/cluster.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "kernels/kernels.h"
#include "net/tcp_transport.h"
#include "util/memory.h"
#include "util/sha256.h"
#include "util/timer.h"

namespace runtime {

using util::Expected;
using util::Status;

namespace {

// Why a step failed, with what to do.
Status step_failed(const Status& st) {
  return st.wrap("", " (the cluster cannot go on; check that worker process and its network, "
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
  if (o.transport && (!o.workers.empty() || !o.spares.empty()))
    return Status::error("--workers and --spare are for --transport tcp: under MPI every rank but 0 is a worker");
  const int n = o.transport ? o.transport->size() : int(o.workers.size()) + 1;
  std::vector<double> shares = o.shares;
  if (shares.empty()) shares.assign(n, 1.0);
  if (int(shares.size()) != n)
    return Status::error("--shares lists " + std::to_string(shares.size()) + " values for " + std::to_string(n) +
                         " nodes (the root and " + std::to_string(n - 1) +
                         " workers): give one share per node, the root's first");
  if (o.algo != "auto") {
    auto a = net::algo_from_name(o.algo);
    if (!a) return Status::error("--allreduce must be auto, all-gather, star, ring or mpi, not '" + o.algo + "'");
    c->forced_algo_ = int(*a);
    if (*a == net::AllReduceAlgo::kMpi && (!o.transport || o.exact || o.auto_sync || o.sync == net::SyncType::kQ8_0))
      return Status::error("--allreduce mpi needs --transport mpi and --sync-type f32 or f16");
  }
  if (!o.exact && !o.auto_sync && o.sync == net::SyncType::kQ8_0 && m.config.dim % 32 != 0)
    return Status::error("dim " + std::to_string(m.config.dim) + " is not a multiple of 32: use --sync-type f16");
  if (std::string why = model::attention_unsupported(m.config, o.kv_type, o.attention); !why.empty())
    return Status::error(why);
  if (n == 1) {
    if (!o.spares.empty()) return Status::error("--spare needs --workers: a spare takes a lost worker's place");
    c->o_.exact = false;
  }
  c->model_path_ = model_path;
  c->shape_ = shape_of(m.config, m.weights);
  c->home_shares_ = shares;
  c->history_.resize(size_t(std::max(1, o.n_slots)));
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
  // A spare that is there but refuses (another version, another key) is named now; one that
  // is not there yet is tried when it is needed.
  for (Member& mb : c->members_)
    if (mb.home < 0 && reachable(mb.addr)) c->verify_alone(mb);
  c->health_.nodes_planned = n;
  c->publish_health();
  return c;
}

net::TcpOptions Cluster::tcp_options() const {
  net::TcpOptions t;
  t.cluster_key = o_.cluster_key;
  t.link_encryption = o_.link_encryption;
  t.software_version = o_.software_version;
  return t;
}

// Connects to the members at places_ (in --workers order), measures the links and picks
// the sync the first time, plans over their shares and sets every node up.
Status Cluster::form(Reform* rep, int* failed) {
  *failed = -1;
  exec_.reset();
  coll_.reset();
  t_.reset();
  const bool first = nodes_.empty();
  std::vector<std::string> addrs;
  std::vector<double> shares = {home_shares_[0]};
  rank_member_.assign(1, -1);
  for (size_t i = 0; i < places_.size(); ++i)
    if (places_[i] >= 0) {
      addrs.push_back(members_[size_t(places_[i])].addr);
      rank_member_.push_back(places_[i]);
      shares.push_back(home_shares_[i + 1]);
    }
  nodes_.assign(1, {"root", {}});
  if (o_.transport) {  // MPI: formed already; every rank is a worker
    t_ = o_.transport;
    shares = home_shares_;
  } else if (!addrs.empty()) {
    int bad = -1;
    auto t = net::TcpTransport::connect_root(addrs, tcp_options(), &bad);
    if (!t) {
      if (bad >= 0) *failed = rank_member_[size_t(bad) + 1];
      return t.status();
    }
    t_ = std::move(*t);
  }
  if (t_) {
    for (int r = 1; r < t_->size(); ++r) nodes_.push_back({t_->peer_name(r), {}});
    if (first && (forced_algo_ < 0 || o_.auto_sync)) RETURN_IF_ERROR(probe_links());
    if (first && o_.shares.empty() && o_.shares_mode != SharesMode::kEqual) {
      RETURN_IF_ERROR(measure_shares());
      shares = home_shares_;  // the first forming has every member in its place
    }
    if (first && o_.auto_sync) {
      bool loopback = !o_.transport;
      for (const std::string& a : addrs) {
        auto hp = net::parse_host_port(a);
        loopback = loopback && hp && hp->loopback();
      }
      RETURN_IF_ERROR(choose_sync(shape_, shares, loopback));
    }
  }
  auto p = plan::make_plan(shape_, shares, o_.exact && t_);
  if (!p) return p.status();
  plan_ = std::move(*p);
  if (!t_ && !members_.empty()) {  // every worker is gone: the root alone, if it can hold the model
    const double need = double(plan::resident_bytes(plan_, 0)) +
                        double(model::KvCache::bytes_per_position(m_.config.n_layers, m_.config.n_kv_heads,
                                                                  m_.config.head_dim, o_.kv_type)) *
                            o_.ctx * o_.n_slots;
    if (need > util::physical_memory_bytes())
      return Status::error("no worker is left, and the root alone cannot hold the model and its KV cache (" +
                           std::to_string(int64_t(need / 1e6)) + " MB, this machine has " +
                           std::to_string(int64_t(util::physical_memory_bytes() / 1e6)) + " MB)");
  }
  if (t_) {
    int bad = -1;
    Status st = setup_workers(&rep->streamed_bytes, &rep->streamed_to, &bad);
    if (!st.ok()) {
      if (bad > 0 && size_t(bad) < rank_member_.size()) *failed = rank_member_[size_t(bad)];  // MPI: none
      return st;
    }
    t_->reset_counters();
    coll_ = std::make_unique<AutoCollective>(*t_, ExactRows::of(plan_.nodes[0]), o_.sync, forced_algo_, alpha_us_,
                                             beta_gbps_, m_.config.dim, o_.step_timeout_s, o_.batch);
  }
  root_slice_ = slice_weights(m_.config, m_.weights, plan_.nodes[0]);
  const model::RunConfig rc = session_setup().run_config();
  std::unique_ptr<model::Backend> backend;
  if (o_.backend) {
    auto b = o_.backend(m_.config, root_slice_.weights, pool_, rc, root_slice_.part);
    if (!b) return b.status();
    backend = std::move(*b);
  }
  exec_ = std::make_unique<NodeExecutor>(m_.config, root_slice_.weights, root_slice_.part, pool_, rc, coll_.get(),
                                         std::move(backend));
  return util::ok_status();
}

std::string Cluster::root_device() const { return exec_->model().backend().describe(); }

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
// wins only when it saves kAutoSyncSaving of the predicted time per token. Workers all on
// this machine (loopback) keep exact sync: their "link" is a memory copy, and what a probe
// measures there is the machine's load (a loaded box would otherwise flip the choice).
Status Cluster::choose_sync(const plan::ModelShape& shape, const std::vector<double>& shares, bool loopback) {
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
  const bool use_q8 = !loopback && t_q8 <= (1 - kAutoSyncSaving) * t_exact;
  o_.exact = !use_q8;
  o_.sync = use_q8 ? net::SyncType::kQ8_0 : net::SyncType::kF32;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "sync auto chose %s: predicted %.2f ms per token exact, %.2f ms q8_0 (q8_0 is taken when it saves "
                "%.0f%%%s; force one with --sync-type)",
                use_q8 ? "q8_0" : "exact", t_exact, t_q8 < 1e29 ? t_q8 : 0.0, kAutoSyncSaving * 100,
                loopback ? " and a worker is on another machine" : "");
  sync_note_ = buf;
  return util::ok_status();
}

Cluster::~Cluster() {
  if (!t_) return;
  for (int r = 1; r < t_->size(); ++r) (void)t_->send(r, msg_type(Msg::kShutdown), {}, 1.0);
}

Status Cluster::probe_links() {
  // α: half the best round trip of a small message; β from the best 1 MiB round trip. The
  // small ones in 8 bursts of 3, 2 ms apart: on a loaded machine (nodes sharing cores with
  // other work) a round trip often waits for the scheduler, which is not the link, for a
  // few ms at a time; a high α would make --sync-type auto leave exact sync (one node's
  // tokens) for q8_0 on a loopback cluster.
  double best_small = 1e9, best_big = 1e9;
  std::vector<uint8_t> small(64, 0x5a), big(size_t(1) << 20, 0xa5);
  for (int r = 1; r < t_->size(); ++r) {
    for (int i = 0; i < 24; ++i) {
      if (i > 0 && i % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
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

Status Cluster::measure_shares() {
  const ProbeShape ps = probe_shape(m_.config, m_.weights);
  const int n = t_->size();
  std::vector<SpeedReply> node(static_cast<size_t>(n));
  node[0].device = o_.device.empty() ? cpu_description(pool_.size()) : o_.device;
  auto ask = [&](int r, bool measure) -> Status {
    RETURN_IF_ERROR(t_->send(r, msg_type(Msg::kSpeedProbe), encode_speed_probe({measure, ps}), 10.0));
    // A slow device (lavapipe) may take a while to upload and time a wide layer.
    auto rep = t_->recv_expect(r, msg_type(Msg::kSpeedReply), measure ? 600.0 : 10.0);
    if (!rep) return rep.status();
    auto p = parse_speed_reply(rep->payload, t_->peer_name(r));
    if (!p) return p.status().at_rank(r);
    node[size_t(r)] = *p;
    return util::ok_status();
  };
  bool measure = o_.shares_mode == SharesMode::kMeasured;
  if (!measure) {
    for (int r = 1; r < n; ++r) RETURN_IF_ERROR(ask(r, false));
    for (int r = 1; r < n; ++r) measure = measure || node[size_t(r)].device != node[0].device;
    if (!measure) return util::ok_status();  // alike: equal shares
  }
  // One node at a time, so that nodes sharing a machine do not slow each other.
  for (int r = 1; r < n; ++r) RETURN_IF_ERROR(ask(r, true));
  auto own = measure_decode_speed(ps, pool_, o_.backend);
  if (!own) return own.status().wrap("root: ");
  node[0].tokens_per_s = *own;
  double total = 0;
  for (const SpeedReply& s : node) total += s.tokens_per_s;
  shares_note_ = "shares from measured speed (decode, one " + std::string(tensor::type_name(ps.type)) +
                 " layer):";
  for (int r = 0; r < n; ++r) {
    const SpeedReply& s = node[size_t(r)];
    if (!(s.tokens_per_s > 0)) return Status::error(nodes_[size_t(r)].name + " measured no speed", Status::Code::kOther, r);
    home_shares_[size_t(r)] = s.tokens_per_s / total;
    char buf[128];
    std::snprintf(buf, sizeof buf, " %.3g/s, share %.3f", s.tokens_per_s, s.tokens_per_s / total);
    shares_note_ += (r ? ", " : " ") + nodes_[size_t(r)].name + " " + s.device + buf;
  }
  return util::ok_status();
}

Status Cluster::setup_workers(uint64_t* streamed, int* streamed_to, int* failed) {
  const int n = t_->size();
  std::vector<bool> have(n, false);
  for (int r = 1; r < n; ++r) {
    *failed = r;
    Setup s = session_setup();
    s.model_hash = model_hash_;
    s.slice = plan_.nodes[r];
    s.slice_bytes = plan::resident_bytes(plan_, r);
    RETURN_IF_ERROR(t_->send(r, msg_type(Msg::kSetup), encode_setup(s), 10.0));
    auto rep = t_->recv_expect(r, msg_type(Msg::kSetupReply), 120.0);  // a --model worker may be slicing
    if (!rep) return rep.status();
    auto h = parse_u64(rep->payload, "setup reply from " + t_->peer_name(r));
    if (!h) return h.status();
    have[r] = *h != 0;
  }
  *failed = -1;
  RETURN_IF_ERROR(stream_slices(have, streamed, failed));
  for (int r = 1; r < n; ++r) {
    if (!have[r]) ++*streamed_to;
    auto ready = t_->recv_expect(r, msg_type(Msg::kReady), 120.0);
    if (!ready) {
      *failed = r;
      return ready.status();
    }
  }
  *failed = -1;
  return util::ok_status();
}

// Every worker that lacks its slice gets it at once: one thread per worker slices and sends
// (each thread drives only its own peer's connection, which TcpTransport allows), while
// this thread prints the progress. The first failure stops the other streams.
Status Cluster::stream_slices(const std::vector<bool>& have, uint64_t* streamed, int* failed) {
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
  for (int r = 1; r < n; ++r) *streamed += prog[r].sent;
  if (first_failed < 0) return util::ok_status();
  *failed = first_failed;
  return result[first_failed];
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

Status Cluster::send_step(std::span<const int32_t> tokens, Step& s) {
  if (!t_) return util::ok_status();
  const model::Matrix& embd = m_.weights.token_embd;
  rows_.resize(embd.row_bytes * tokens.size());
  for (size_t b = 0; b < tokens.size(); ++b)
    std::memcpy(rows_.data() + embd.row_bytes * b, embd.row(tokens[b]), embd.row_bytes);
  s.embd_type = embd.type;
  s.rows = rows_;
  const std::vector<uint8_t> payload = encode_step(s);
  for (int r = 1; r < t_->size(); ++r) RETURN_IF_ERROR(t_->send(r, msg_type(Msg::kStep), payload, o_.step_timeout_s));
  return util::ok_status();
}

Status Cluster::collect_replies(std::vector<StepReply>* replies) {
  replies->clear();
  if (!t_) return util::ok_status();
  for (int r = 1; r < t_->size(); ++r) {
    auto m = t_->recv_expect(r, msg_type(Msg::kStepReply), o_.step_timeout_s);
    if (!m) return m.status();
    auto rep = parse_step_reply(m->payload, t_->peer_name(r));
    if (!rep) return rep.status().at_rank(r);
    nodes_[r].counters = rep->counters;
    replies->push_back(std::move(*rep));
  }
  const net::ByteCounters bc = t_->counters();
  nodes_[0].counters.bytes_sent = bc.bytes_sent;
  nodes_[0].counters.bytes_received = bc.bytes_received;
  return util::ok_status();
}

Expected<StepReply> Cluster::execute(Step& s, std::span<const int32_t> tokens, std::vector<StepReply>* replies) {
  RETURN_IF_ERROR(send_step(tokens, s));
  const int D = m_.config.dim;
  x_.resize(tokens.size() * D);
  for (size_t b = 0; b < tokens.size(); ++b) exec_->embed(tokens[b], &x_[D * b]);
  auto mine = exec_->run(s, x_.data());
  if (!mine) return mine.status();
  nodes_[0].counters.compute_s = exec_->counters().compute_s;
  nodes_[0].counters.sync_s = exec_->counters().sync_s;
  nodes_[0].counters.steps = exec_->counters().steps;
  RETURN_IF_ERROR(collect_replies(replies));
  for (size_t r = 0; r < replies->size(); ++r)
    if ((*replies)[r].sampled.size() != mine->sampled.size() || (*replies)[r].scores.size() != mine->scores.size())
      return Status::error(t_->peer_name(int(r) + 1) + " answered a step with the wrong number of candidate lists "
                           "or row scores", Status::Code::kProtocol, int(r) + 1);
  return mine;
}

Expected<std::vector<Cluster::SeqResult>> Cluster::run(const std::vector<SeqStep>& batch) {
  const model::Config& cfg = m_.config;
  Step s;
  step_tokens_.clear();
  for (size_t i = 0; i < batch.size(); ++i) {
    const SeqStep& q = batch[i];
    CHECK(q.seq != nullptr && !q.tokens.empty());
    CHECK(q.want != Want::kScores || q.targets.size() == q.tokens.size());
    CHECK(q.drafts == 0 || (q.want == Want::kCandidates && q.tokens.size() == size_t(q.drafts) + 1));
    CHECK(!q.allowed || (q.want == Want::kCandidates && q.drafts == 0));
    RETURN_IF_ERROR(check_tokens(cfg, q.tokens.data(), int(q.tokens.size())));
    for (int32_t t : q.targets)
      if (t >= cfg.n_vocab) return Status::error("target id " + std::to_string(t) + " is outside the vocabulary");
    if (q.seq->slot() < 0 || q.seq->slot() >= o_.n_slots) return Status::error("internal: no such KV slot");
    for (size_t j = 0; j < i; ++j)
      if (batch[j].seq->slot() == q.seq->slot()) return Status::error("internal: a KV slot appears twice in a step");
    if (q.seq->n_past() + int64_t(q.tokens.size()) > o_.ctx)
      return Status::error("the sequence would pass the context of " + std::to_string(o_.ctx) + " tokens");
    step_tokens_.insert(step_tokens_.end(), q.tokens.begin(), q.tokens.end());
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
      g.k = smp.k_asked();
      g.every_row = g.rowwise = q.drafts > 0;
      for (size_t r = g.every_row ? 1 : q.tokens.size(); r <= q.tokens.size(); ++r)
        g.penalties.push_back(sampler::penalty_counts(smp.params(), q.seq->tokens(), q.tokens.first(r)));
      g.repeat_penalty = smp.params().repeat_penalty;
      g.presence_penalty = smp.params().presence_penalty;
      g.frequency_penalty = smp.params().frequency_penalty;
      g.logit_bias = smp.params().logit_bias;
      if (q.allowed) {
        if (q.allowed->size() * 64 < size_t(cfg.n_vocab) ||
            std::all_of(q.allowed->begin(), q.allowed->end(), [](uint64_t w) { return w == 0; }))
          return Status::error("internal: a token mask that allows nothing");
        g.allowed = *q.allowed;
      }
    }
    s.segs.push_back(std::move(g));
  }
  const size_t rows = step_tokens_.size();
  if (rows == 0 || int(rows) > o_.batch)
    return Status::error("internal: a step of " + std::to_string(rows) + " rows (1.." + std::to_string(o_.batch) + ")");
  RETURN_IF_ERROR(broken_);
  maybe_rejoin();
  RETURN_IF_ERROR(broken_);
  // A failed step changed nothing the root keeps (logs, samplers): after a recovery it is
  // run again as it was.
  std::vector<StepReply> replies;
  Expected<StepReply> mine = execute(s, step_tokens_, &replies);
  while (!mine) {
    if (!o_.recover || members_.empty()) {
      if (o_.transport) broken_ = step_failed(mine.status());  // MPI: the ranks are out of step for good
      return step_failed(mine.status());
    }
    RETURN_IF_ERROR(recover(mine.status()));
    mine = execute(s, step_tokens_, &replies);
  }
  step_ok_since_recovery_ = true;
  std::vector<SeqResult> out(batch.size());
  size_t si = 0, ri = 0;  // sampled segment, scored row
  std::vector<std::vector<sampler::Candidate>> parts;
  std::vector<float> lses;
  std::vector<RowScore> pieces;
  for (size_t i = 0; i < batch.size(); ++i) {
    const StepSegment& g = s.segs[i];
    if (g.want == Want::kCandidates) {
      const SeqStep& q = batch[i];
      const sampler::DistributedSampler& smp = q.seq->sampler();
      bool drawing = true;  // until a guess differs from the token drawn before it
      for (int row = g.every_row ? 0 : g.n - 1; row < g.n; ++row, ++si) {
        if (!drawing) continue;
        parts.assign(1, std::move(mine->sampled[si].cand));
        lses.assign(1, mine->sampled[si].lse);
        for (auto& rep : replies) {
          parts.push_back(std::move(rep.sampled[si].cand));
          lses.push_back(rep.sampled[si].lse);
        }
        const int32_t t = smp.sample(parts, int64_t(g.pos) + row + 1);  // the position t takes
        out[i].tokens.push_back(t);
        if (smp.params().top_logprobs >= 0)
          out[i].logprobs.push_back(sampler::logprobs(parts, sampler::merge_lse(lses), t, smp.params().top_logprobs));
        drawing = row + 1 < g.n && q.tokens[size_t(row + 1)] == t;
      }
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
  for (size_t i = 0; i < batch.size(); ++i) {
    const SeqStep& q = batch[i];
    const StepSegment& g = s.segs[i];
    // rowwise as the transformer ran it (transformer.h: short segments take vec_dot order)
    const bool rowwise = g.rowwise || !o_.lane_order || (!o_.decode_lanes && g.n < model::kLaneMinRows);
    // drafts: only the kept guesses stay (the last drawn token is evaluated next step)
    const size_t keep = q.drafts > 0 ? out[i].tokens.size() : q.tokens.size();
    history_[size_t(q.seq->slot())].add(q.seq->n_past(), q.tokens.first(keep), rowwise);
    q.seq->append(q.tokens.first(keep));
  }
  return out;
}

// --- Recovery ---------------------------------------------------------------------------

void SlotHistory::add(int pos, std::span<const int32_t> tokens, bool rowwise) {
  while (!segs_.empty() && segs_.back().pos >= pos) {
    tokens_.resize(segs_.back().offset);
    segs_.pop_back();
  }
  if (!segs_.empty() && segs_.back().rowwise && segs_.back().pos + segs_.back().n > pos) {
    segs_.back().n = pos - segs_.back().pos;
    tokens_.resize(segs_.back().offset + size_t(segs_.back().n));
  }
  segs_.push_back({pos, int(tokens.size()), tokens_.size(), rowwise});
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
}

Remedy remedy_for(const Status& st, bool blames_member) {
  if (st.is(Status::Code::kTooLittleMemory)) return Remedy::kGiveUp;
  if (blames_member && st.is(Status::Code::kRefused)) return Remedy::kPutOut;
  return Remedy::kLose;
}

namespace {

const char* state_name(int places_filled, int places) {
  return places_filled == places ? "full size" : "degraded";
}

}  // namespace

bool Cluster::reachable(const std::string& addr) {
  auto hp = net::parse_host_port(addr);
  return hp.ok() && net::connect_tcp(*hp, 0.5, "worker").ok();
}

int Cluster::member_of(const Status& st) const {
  const int r = st.rank();
  return r >= 1 && size_t(r) < rank_member_.size() ? rank_member_[size_t(r)] : -1;
}

void Cluster::lose(int m, const std::string& why) {
  Member& mb = members_[size_t(m)];
  const double now = util::now_seconds();
  for (int& p : places_)
    if (p == m) p = -1;
  ++health_.lost;
  publish_health();
  std::fprintf(stderr, "recovery: lost worker %s: %s\n", mb.addr.c_str(), why.c_str());
  if (mb.rejoined && now - mb.since < o_.flap_window_s) {
    mb.state = Member::State::kOut;
    std::fprintf(stderr, "recovery: %s was lost again %.0f s after it rejoined: not taken back automatically "
                 "(restart the root to use it again)\n", mb.addr.c_str(), now - mb.since);
  } else {
    mb.state = Member::State::kLost;
  }
  mb.since = now;
  mb.next_try = now + o_.rejoin_every_s;
  mb.backoff_s = o_.rejoin_every_s;
}

// A session of the member's own: the handshake checks its version, key and link setting
// without touching the running cluster. A refusal puts it out (named on stderr).
bool Cluster::verify_alone(Member& mb) {
  net::TcpOptions quick = tcp_options();  // the cluster waits meanwhile: a frozen host costs ~1 s
  quick.connect_timeout_s = 0.5;
  quick.handshake_timeout_s = 1.0;
  quick.setup_timeout_s = 1.0;
  auto t = net::TcpTransport::connect_root({mb.addr}, quick);
  if (t) {
    (void)(*t)->send(1, msg_type(Msg::kShutdown), {}, 1.0);
    return true;
  }
  if (remedy_for(t.status(), true) == Remedy::kPutOut) {  // there, but will not take part
    mb.state = Member::State::kOut;
    std::fprintf(stderr, "recovery: worker %s refused: %s\n", mb.addr.c_str(), t.error().c_str());
  }
  return false;
}

// Fills empty places: a member back from a loss takes its own place; idle spares the rest.
void Cluster::fill_places() {
  for (size_t p = 0; p < places_.size(); ++p)
    if (places_[p] < 0)
      for (size_t m = 0; m < members_.size(); ++m)
        if (members_[m].home == int(p) && members_[m].state == Member::State::kIdle) places_[p] = int(m);
  for (size_t p = 0; p < places_.size(); ++p)
    if (places_[p] < 0)
      for (size_t m = 0; m < members_.size() && places_[p] < 0; ++m)
        if (members_[m].state == Member::State::kIdle &&
            std::find(places_.begin(), places_.end(), int(m)) == places_.end())
          places_[p] = int(m);
  for (int p : places_)
    if (p >= 0 && members_[size_t(p)].state == Member::State::kIdle) members_[size_t(p)].state = Member::State::kActive;
}

int Cluster::lose_unreachable(const std::string& why, int named) {
  int n = 0;
  for (size_t r = 1; r < rank_member_.size(); ++r) {
    const int m = rank_member_[r];
    if (members_[size_t(m)].state == Member::State::kActive &&
        (m == named || !reachable(members_[size_t(m)].addr))) {
      lose(m, why);
      ++n;
    }
  }
  return n;
}

Status Cluster::recover(const Status& why) {
  const double t0 = util::now_seconds();
  exec_.reset();
  coll_.reset();
  t_.reset();  // every survivor ends its session and listens again
  // The worker the error names, and every active one whose port no longer answers, are lost.
  if (lose_unreachable(why.message(), member_of(why)) == 0) {
    if (!step_ok_since_recovery_) {  // a fault that re-forming did not cure
      broken_ = step_failed(why.wrap("", " (again right after a recovery)"));
      return broken_;
    }
    std::fprintf(stderr, "recovery: %s; no worker is gone, forming the cluster again\n", why.message().c_str());
  }
  return reform("re-formed", t0);
}

// Forms the cluster over the places filled (spares taking empty ones), replays every KV
// slot and reports. A member that cannot join is dropped (refused: out; unreachable: lost)
// and the cluster formed without it.
Status Cluster::reform(const std::string& event, double t0) {
  Status last;
  for (int attempt = 0; attempt < 2 * int(members_.size()) + 2; ++attempt) {
    fill_places();
    Reform rep;
    int failed = -1;
    Status st = form(&rep, &failed);
    if (st.ok()) st = replay(&rep);  // a failure here names nobody in particular
    if (st.ok()) {
      ++health_.recoveries;
      char buf[512];
      std::snprintf(buf, sizeof buf,
                    "%s on %d nodes (%s); re-sent %.1f MB of weights to %d worker(s); replayed %d tokens in %d "
                    "steps; resumed in %.2f s",
                    event.c_str(), n_nodes(), state_name(n_nodes() - 1, int(places_.size())),
                    double(rep.streamed_bytes) / 1e6, rep.streamed_to, rep.replay_tokens, rep.replay_steps,
                    util::now_seconds() - t0);
      health_.last_recovery = buf;
      std::fprintf(stderr, "recovery: %s\n", buf);
      publish_health();
      step_ok_since_recovery_ = false;
      return util::ok_status();
    }
    last = st;
    if (failed < 0) failed = member_of(st);
    const Remedy remedy = remedy_for(st, failed >= 0);
    if (remedy == Remedy::kGiveUp) break;  // fewer nodes would not help
    exec_.reset();
    coll_.reset();
    t_.reset();
    if (remedy == Remedy::kLose) {
      if (lose_unreachable(st.message(), failed) > 0) continue;
      break;  // nobody to blame
    }
    Member& mb = members_[size_t(failed)];  // there, but refuses
    for (int& p : places_)
      if (p == failed) p = -1;
    mb.state = Member::State::kOut;
    std::fprintf(stderr, "recovery: worker %s refused: %s\n", mb.addr.c_str(), st.message().c_str());
  }
  exec_.reset();
  coll_.reset();
  t_.reset();
  broken_ = last.wrap("the cluster could not be formed again: ");
  publish_health();
  return broken_;
}

// Between steps: a lost worker whose address answers (and which passes the handshake on
// its own) is taken back; the cluster is re-formed with it.
void Cluster::maybe_rejoin() {
  if (!o_.recover || members_.empty()) return;
  const double now = util::now_seconds();
  if (now < next_rejoin_check_) return;
  next_rejoin_check_ = now + 0.5;
  bool back = false;
  for (Member& mb : members_) {
    if (mb.state != Member::State::kLost || now < mb.next_try) continue;
    mb.backoff_s = std::min(30.0, mb.backoff_s * 2);
    mb.next_try = now + mb.backoff_s;
    if (!reachable(mb.addr) || !verify_alone(mb)) continue;
    mb.state = Member::State::kIdle;
    mb.rejoined = true;
    mb.since = now;
    std::fprintf(stderr, "recovery: worker %s is back\n", mb.addr.c_str());
    back = true;
  }
  if (!back) return;
  const std::vector<int> before = places_;
  fill_places();
  if (places_ == before) return;  // it waits as a spare
  (void)reform("rejoined", now);
}

// Every slot's history again, the slots side by side. Segments that ran in vec_dot order
// (transformer.h: fewer than kLaneMinRows rows, or every segment without lane order) and
// follow each other are merged into one rowwise segment: the same bits in far fewer steps
// than the decode steps they came from. Lane-order segments run as they ran.
Status Cluster::replay(Reform* rep) {
  const auto rowwise = [](const SlotHistory::Seg& g) { return g.rowwise; };
  std::vector<size_t> next(history_.size(), 0);
  std::vector<StepReply> replies;
  std::vector<int32_t> tokens;  // of one replay step (step_tokens_ holds the step to run after)
  for (;;) {
    Step s;
    tokens.clear();
    for (size_t slot = 0; slot < history_.size(); ++slot) {
      const SlotHistory& h = history_[slot];
      const auto& segs = h.segs();
      if (next[slot] >= segs.size()) continue;
      const int room = o_.batch - int(tokens.size());
      if (segs[next[slot]].n > room) continue;  // next step (every segment fits an empty one)
      StepSegment seg;
      seg.slot = int(slot);
      seg.pos = segs[next[slot]].pos;
      seg.rowwise = rowwise(segs[next[slot]]);
      do {
        const auto t = h.tokens(segs[next[slot]]);
        tokens.insert(tokens.end(), t.begin(), t.end());
        seg.n += int(t.size());
        ++next[slot];
      } while (seg.rowwise && next[slot] < segs.size() && rowwise(segs[next[slot]]) &&
               segs[next[slot]].pos == seg.pos + seg.n && seg.n + segs[next[slot]].n <= room);
      s.segs.push_back(std::move(seg));
    }
    if (s.segs.empty()) return util::ok_status();
    auto r = execute(s, tokens, &replies);
    if (!r) return r.status();
    ++rep->replay_steps;
    rep->replay_tokens += int(tokens.size());
  }
}

void Cluster::publish_health() {
  health_.nodes = o_.transport ? o_.transport->size()
                                : 1 + int(std::count_if(places_.begin(), places_.end(), [](int p) { return p >= 0; }));
  std::lock_guard<std::mutex> l(health_mu_);
  health_snapshot_ = health_;
}

ClusterHealth Cluster::health() const {
  std::lock_guard<std::mutex> l(health_mu_);
  return health_snapshot_;
}

Expected<int32_t> Cluster::extend(Sequence& seq, std::span<const int32_t> tokens, bool sample) {
  int32_t next = -1;
  for (size_t i = 0; i < tokens.size(); i += size_t(o_.batch)) {
    const size_t n = std::min(tokens.size() - i, size_t(o_.batch));
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
    std::snprintf(buf, sizeof buf, " (alpha %.0f us, beta %.2f Gbit/s: decode %s)", alpha_us_, beta_gbps_,
                  net::algo_name(coll_->algo_for(size_t(m_.config.dim))));
    s += buf;
  }
  return s + note;
}

}  // namespace runtime
