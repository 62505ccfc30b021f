// forming.cc: forming a cluster (forming.h, Cluster::form): connect, probe the links and
// the nodes' speeds the first time, choose the sync and shares, plan, set every worker up
// and stream the slices it lacks, and build the root's own node.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include "model/cpu_backend.h"
#include "net/tcp_transport.h"
#include "runtime/cluster.h"
#include "runtime/speed.h"
#include "util/timer.h"

namespace runtime {

using util::Expected;
using util::Status;

Expected<LinkModel> probe_links(net::Transport& t) {
  // α: half the best round trip of a small message; β from the best 1 MiB round trip. The
  // small ones in 8 bursts of 3, 2 ms apart: on a loaded machine (nodes sharing cores with
  // other work) a round trip often waits for the scheduler, which is not the link, for a
  // few ms at a time; a high α would make --sync-type auto leave exact sync (one node's
  // tokens) for q8_0 on a loopback cluster.
  double best_small = 1e9, best_big = 1e9;
  std::vector<uint8_t> small(64, 0x5a), big(size_t(1) << 20, 0xa5);
  LinkModel l;
  l.alpha_us_per_rank.assign(size_t(t.size()), 0.0);
  for (int r = 1; r < t.size(); ++r) {
    double own_small = 1e9;
    for (int i = 0; i < 24; ++i) {
      if (i > 0 && i % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      util::Timer tm;
      RETURN_IF_ERROR(t.send(r, net::MessageType::kPing, small, 5.0));
      auto pong = t.recv_expect(r, net::MessageType::kPong, 5.0);
      if (!pong) return pong.status();
      own_small = std::min(own_small, tm.seconds());
    }
    best_small = std::min(best_small, own_small);
    l.alpha_us_per_rank[size_t(r)] = own_small / 2 * 1e6;
    for (int i = 0; i < 3; ++i) {
      util::Timer tm;
      RETURN_IF_ERROR(t.send(r, net::MessageType::kPing, big, 10.0));
      auto pong = t.recv_expect(r, net::MessageType::kPong, 10.0);
      if (!pong) return pong.status();
      best_big = std::min(best_big, tm.seconds());
    }
  }
  l.alpha_us = best_small / 2 * 1e6;
  const double transfer_s = std::max(best_big - best_small, 1e-6) / 2;  // one way, one MiB
  l.beta_gbps = double(big.size()) * 8 / transfer_s / 1e9;
  return l;
}

// Both plans are costed under the measured link and an assumed modest memory bandwidth;
// q8_0 wins only when it saves kAutoSyncSaving of the predicted time per token. Workers all
// on this machine (loopback) keep exact sync: their "link" is a memory copy, and what a
// probe measures there is the machine's load (a loaded box would otherwise flip the choice).
Expected<SyncChoice> choose_sync(const plan::ModelShape& shape, const std::vector<double>& shares, int dim,
                                 const LinkModel& link, bool loopback) {
  auto exact = plan::make_plan(shape, shares, true);
  if (!exact) return exact.status();
  plan::CostParams cp;
  cp.link.alpha_us = link.alpha_us;
  cp.link.beta_gbps = link.beta_gbps;
  cp.mem_gbps = {kAutoSyncMemGbps};
  const double t_exact = plan::cluster_cost(*exact, cp).total_ms;
  double t_q8 = 1e30;
  if (dim % 32 == 0) {
    auto q8 = plan::make_plan(shape, shares, false);
    if (!q8) return q8.status();
    cp.sync_type = tensor::Type::Q8_0;
    t_q8 = plan::cluster_cost(*q8, cp).total_ms;
  }
  const bool use_q8 = !loopback && t_q8 <= (1 - kAutoSyncSaving) * t_exact;
  SyncChoice c;
  c.exact = !use_q8;
  c.sync = use_q8 ? net::SyncType::kQ8_0 : net::SyncType::kF32;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "sync auto chose %s: predicted %.2f ms per token exact, %.2f ms q8_0 (q8_0 is taken when it saves "
                "%.0f%%%s; force one with --sync-type)",
                use_q8 ? "q8_0" : "exact", t_exact, t_q8 < 1e29 ? t_q8 : 0.0, kAutoSyncSaving * 100,
                loopback ? " and a worker is on another machine" : "");
  c.note = buf;
  return c;
}

Expected<MeasuredShares> measure_shares(net::Transport& t, const model::LoadedModel& m, bool measure,
                                        const std::string& root_device, util::ThreadPool& pool,
                                        const model::BackendFactory& backend) {
  const ProbeShape ps = probe_shape(m.config, m.weights);
  const int n = t.size();
  std::vector<SpeedReply> node(static_cast<size_t>(n));
  node[0].device = root_device;
  auto ask = [&](int r, bool time_it) -> Status {
    RETURN_IF_ERROR(t.send(r, msg_type(Msg::kSpeedProbe), encode_message(SpeedProbe{time_it, ps}), 10.0));
    // A slow device (lavapipe) may take a while to upload and time a wide layer.
    auto rep = t.recv_expect(r, msg_type(Msg::kSpeedReply), time_it ? 600.0 : 10.0);
    if (!rep) return rep.status();
    auto p = parse_message<SpeedReply>(rep->payload, t.peer_name(r));
    if (!p) return p.status().at_rank(r);
    node[size_t(r)] = *p;
    return util::ok_status();
  };
  MeasuredShares out;
  if (!measure) {
    for (int r = 1; r < n; ++r) RETURN_IF_ERROR(ask(r, false));
    for (int r = 1; r < n; ++r) measure = measure || node[size_t(r)].device != node[0].device;
    for (const SpeedReply& s : node) out.devices.push_back(s.device);
    if (!measure) return out;  // alike: equal shares
  }
  // One node at a time, so that nodes sharing a machine do not slow each other.
  for (int r = 1; r < n; ++r) RETURN_IF_ERROR(ask(r, true));
  out.devices.clear();
  for (const SpeedReply& s : node) out.devices.push_back(s.device);
  auto own = measure_decode_speed(ps, pool, backend);
  if (!own) return own.status().wrap("root: ");
  node[0].tokens_per_s = *own;
  double total = 0;
  for (const SpeedReply& s : node) total += s.tokens_per_s;
  out.note = "shares from measured speed (decode, one " + std::string(tensor::type_name(ps.type)) + " layer):";
  for (int r = 0; r < n; ++r) {
    const SpeedReply& s = node[size_t(r)];
    const std::string name = r == 0 ? "root" : t.peer_name(r);
    if (!(s.tokens_per_s > 0)) return Status::error(name + " measured no speed", Status::Code::kOther, r);
    out.shares.push_back(s.tokens_per_s / total);
    char buf[128];
    std::snprintf(buf, sizeof buf, " %.3g/s, share %.3f", s.tokens_per_s, s.tokens_per_s / total);
    out.note += (r ? ", " : " ") + name + " " + s.device + buf;
  }
  return out;
}

Expected<std::string> ask_device(net::Transport& t, int r, const ProbeShape& shape) {
  RETURN_IF_ERROR(t.send(r, msg_type(Msg::kSpeedProbe), encode_message(SpeedProbe{false, shape}), 10.0));
  auto rep = t.recv_expect(r, msg_type(Msg::kSpeedReply), 10.0);
  if (!rep) return rep.status();
  auto p = parse_message<SpeedReply>(rep->payload, t.peer_name(r));
  if (!p) return p.status().at_rank(r);
  return p->device;
}

namespace {

struct StreamState {  // one worker's stream, shared with the progress reporter
  bool active = false;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> total{0}, sent{0};
  std::atomic<double> seconds{0};
  Status result;
};

Status stream_slice(net::Transport& t, const model::LoadedModel& m, int rank, const plan::NodeSlice& s,
                    StreamState* prog, const std::atomic<bool>& abort) {
  NodeModel nm = slice_weights(m.config, m.weights, s);
  uint64_t total = 0, count = 0;
  TensorVisitor sizes;
  sizes.matrix = [&](const std::string&, model::Matrix* x) { total += x->bytes(); return util::ok_status(); };
  sizes.vector = [&](const std::string&, model::Vector* v) { total += v->size() * 4; return util::ok_status(); };
  RETURN_IF_ERROR(visit_tensors(nm.weights, m.config.n_layers, sizes));
  prog->total = total;
  util::Timer timer;
  auto send = [&](const std::string& name, tensor::Type type, uint64_t rows, uint64_t cols, const uint8_t* data,
                  uint64_t bytes) -> Status {
    uint64_t off = 0;
    do {
      if (abort) return Status::error("weight streaming stopped: another worker failed");
      const uint64_t len = std::min<uint64_t>(kMaxChunkBytes, bytes - off);
      TensorChunk c{name, type, rows, cols, bytes, off, std::span<const uint8_t>(data + off, len)};
      RETURN_IF_ERROR(t.send(rank, msg_type(Msg::kTensor), encode_message(c), 60.0));
      off += len;
      prog->sent += len;
    } while (off < bytes);
    ++count;
    return util::ok_status();
  };
  TensorVisitor v;
  v.matrix = [&](const std::string& name, model::Matrix* x) {
    return send(name, x->type, uint64_t(x->rows), uint64_t(x->cols), x->data, x->bytes());
  };
  v.vector = [&](const std::string& name, model::Vector* vec) -> Status {
    if (vec->empty()) return util::ok_status();
    return send(name, tensor::Type::F32, 1, vec->size(), reinterpret_cast<const uint8_t*>(vec->data()),
                vec->size() * 4);
  };
  RETURN_IF_ERROR(visit_tensors(nm.weights, m.config.n_layers, v));
  RETURN_IF_ERROR(t.send(rank, msg_type(Msg::kWeightsDone), encode_u64(count), 10.0));
  prog->seconds = timer.seconds();
  return util::ok_status();
}

void report(net::Transport& t, std::vector<StreamState>& prog, const util::Timer& timer, bool final,
            const WeightProgress& progress) {
  std::vector<WeightStream> view;
  for (int r = 1; r < int(prog.size()); ++r) {
    const StreamState& p = prog[size_t(r)];
    if (!p.active) continue;
    const bool done = p.done;
    view.push_back({t.peer_name(r), p.sent, p.total, done ? p.seconds.load() : timer.seconds(), done,
                    done && !p.result.ok()});
  }
  progress(view, final);
}

}  // namespace

// One thread per worker slices and sends (each thread drives only its own peer's
// connection, which TcpTransport allows), while this thread reports the progress. The
// first failure stops the other streams.
Status stream_slices(net::Transport& t, const model::LoadedModel& m, const plan::Plan& plan,
                     const std::vector<bool>& have, const WeightProgress& progress, uint64_t* streamed,
                     int* failed) {
  const int n = t.size();
  std::vector<StreamState> prog(n);
  std::atomic<bool> abort{false};
  std::atomic<int> first_failed{-1};  // its error is the one to report, not "stopped"
  std::vector<std::thread> threads;
  for (int r = 1; r < n; ++r) {
    if (have[r]) continue;
    prog[r].active = true;
    threads.emplace_back([&, r] {
      prog[r].result = stream_slice(t, m, r, plan.nodes[r], &prog[r], abort);
      if (!prog[r].result.ok()) {
        int none = -1;
        first_failed.compare_exchange_strong(none, r);
        abort = true;
      }
      prog[r].done = true;
    });
  }
  if (threads.empty()) return util::ok_status();
  util::Timer timer;
  for (bool all_done = false; !all_done;) {
    all_done = true;
    for (int r = 1; r < n; ++r) all_done = all_done && (!prog[r].active || prog[r].done);
    if (progress) report(t, prog, timer, all_done, progress);
    if (!all_done) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& th : threads) th.join();
  for (int r = 1; r < n; ++r) *streamed += prog[r].sent;
  if (first_failed < 0) return util::ok_status();
  *failed = first_failed;
  return prog[size_t(first_failed.load())].result;
}

// --- Cluster::form --------------------------------------------------------------------------

net::TcpOptions Cluster::tcp_options() const {
  net::TcpOptions t;
  t.cluster_key = o_.cluster_key;
  t.link_encryption = o_.link_encryption;
  t.software_version = o_.software_version;
  return t;
}

// What every node's session shares (each worker's slice is added per rank).
Setup Cluster::session_setup() const {
  Setup s;
  s.config = m_.config;
  s.sync = o_.sync;
  s.forced_algo = int8_t(forced_algo_);
  s.alpha_us = link_.alpha_us;
  s.beta_gbps = link_.beta_gbps;
  s.run = o_.run;
  s.step_timeout_s = o_.step_timeout_s;
  return s;
}

// Connects to the members at places_ (in --workers order), measures the links and picks
// the sync the first time, plans over their shares and sets every node up.
Status Cluster::form(Reform* rep, int* failed) {
  *failed = -1;
  drop_links();
  const bool first = nodes_.empty();
  std::vector<double> shares;
  RETURN_IF_ERROR(connect(&shares, failed));
  if (t_) {
    if (first) RETURN_IF_ERROR(first_measures(&shares));
    for (int r = 1; r < t_->size(); ++r) {
      const std::string name = t_->peer_name(r);
      PeerInfo& pi = peers_[name];
      if (pi.device.empty()) {  // not asked yet (a forced share, or a spare's first forming)
        auto dev = ask_device(*t_, r, probe_shape(m_.config, m_.weights));
        if (!dev) {
          if (size_t(r) < rank_member_.size()) *failed = rank_member_[size_t(r)];  // MPI: none
          return dev.status();
        }
        pi.device = *dev;
      }
      nodes_.push_back({name, {}, pi.device, pi.alpha_us});
    }
  }
  auto p = plan::make_plan(shape_, shares, o_.exact && t_);
  if (!p) return p.status();
  plan_ = std::move(*p);
  RETURN_IF_ERROR(root_fits());
  if (t_) {
    int bad = -1;
    Status st = setup_workers(&rep->streamed_bytes, &rep->streamed_to, &bad);
    if (!st.ok()) {
      if (bad > 0 && size_t(bad) < rank_member_.size()) *failed = rank_member_[size_t(bad)];  // MPI: none
      return st;
    }
    t_->reset_counters();
  }
  root_slice_ = slice_weights(m_.config, m_.weights, plan_.nodes[0]);
  Setup s = session_setup();
  s.slice = plan_.nodes[0];
  auto node = make_node(s, m_.config, root_slice_, t_.get(), pool_, o_.backend);
  if (!node) return node.status();
  node_ = std::move(*node);
  nodes_[0].device = root_device();
  return util::ok_status();
}

// The transport over the members at places_ (none when no worker is left), the nodes'
// shares in rank order, and rank_member_.
Status Cluster::connect(std::vector<double>* shares, int* failed) {
  std::vector<std::string> addrs;
  *shares = {home_shares_[0]};
  rank_member_.assign(1, -1);
  for (size_t i = 0; i < places_.size(); ++i)
    if (places_[i] >= 0) {
      addrs.push_back(members_[size_t(places_[i])].addr);
      rank_member_.push_back(places_[i]);
      shares->push_back(home_shares_[i + 1]);
    }
  nodes_.assign(1, NodeStats{});
  nodes_[0].name = "root";
  if (o_.transport) {  // MPI: formed already; every rank is a worker
    t_ = o_.transport;
    *shares = home_shares_;
  } else if (!addrs.empty()) {
    int bad = -1;
    auto t = net::TcpTransport::connect_root(addrs, tcp_options(), &bad);
    if (!t) {
      if (bad >= 0) *failed = rank_member_[size_t(bad) + 1];
      return t.status();
    }
    t_ = std::move(*t);
  }
  return util::ok_status();
}

// The first forming, every member in its place: the links, the shares and the sync.
Status Cluster::first_measures(std::vector<double>* shares) {
  if (forced_algo_ < 0 || o_.auto_sync) {
    auto l = probe_links(*t_);
    if (!l) return l.status();
    link_ = *l;
    for (int r = 1; r < t_->size() && size_t(r) < link_.alpha_us_per_rank.size(); ++r)
      peers_[t_->peer_name(r)].alpha_us = link_.alpha_us_per_rank[size_t(r)];
  }
  if (o_.shares.empty() && o_.shares_mode != SharesMode::kEqual) {
    const std::string dev = o_.device.empty() ? model::cpu_description(int(pool_.size())) : o_.device;
    auto ms = measure_shares(*t_, m_, o_.shares_mode == SharesMode::kMeasured, dev, pool_, o_.backend);
    if (!ms) return ms.status();
    if (!ms->shares.empty()) home_shares_ = ms->shares;
    for (int r = 1; r < t_->size() && size_t(r) < ms->devices.size(); ++r)
      peers_[t_->peer_name(r)].device = ms->devices[size_t(r)];
    shares_note_ = ms->note;
    *shares = home_shares_;  // the first forming has every member in its place
  }
  if (o_.auto_sync) {
    bool loopback = !o_.transport;
    for (int r = 1; r < t_->size() && !o_.transport; ++r) {
      auto hp = net::parse_host_port(members_[size_t(rank_member_[size_t(r)])].addr);
      loopback = loopback && hp && hp->loopback();
    }
    auto c = choose_sync(shape_, *shares, m_.config.dim, link_, loopback);
    if (!c) return c.status();
    o_.exact = c->exact;
    o_.sync = c->sync;
    sync_note_ = c->note;
  }
  return util::ok_status();
}

// Every worker is gone: the root alone, if it can hold the model and its KV cache.
Status Cluster::root_fits() const {
  if (t_ || members_.empty()) return util::ok_status();
  const MemoryFit fit = memory_fit(m_.config, m_.config.n_kv_heads, o_.run, double(plan::resident_bytes(plan_, 0)));
  if (fit.fits) return util::ok_status();
  return Status::error("no worker is left, and the root alone cannot hold the model, its KV cache and its host KV cache (" +
                       std::to_string(int64_t(fit.need / 1e6)) + " MB, this machine has " +
                       std::to_string(int64_t(fit.have / 1e6)) + " MB)");
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
    RETURN_IF_ERROR(t_->send(r, msg_type(Msg::kSetup), encode_message(s), 10.0));
    auto rep = t_->recv_expect(r, msg_type(Msg::kSetupReply), 120.0);  // a --model worker may be slicing
    if (!rep) return rep.status();
    auto h = parse_u64(rep->payload, "setup reply from " + t_->peer_name(r));
    if (!h) return h.status();
    have[r] = *h != 0;
  }
  *failed = -1;
  RETURN_IF_ERROR(stream_slices(*t_, m_, plan_, have, o_.progress ? o_.on_progress : WeightProgress(), streamed,
                                failed));
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

}  // namespace runtime
