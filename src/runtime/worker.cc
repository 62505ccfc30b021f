// worker.cc: the worker's accept loop, session setup (cache, local slicing or received
// tensors), and the step loop.
#include "runtime/worker.h"

#include <cstdio>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "model/cpu_backend.h"
#include "model/loader.h"
#include "net/tcp_transport.h"
#include "runtime/huge_pages.h"
#include "runtime/node.h"
#include "runtime/protocol.h"
#include "runtime/slicer.h"
#include "tensor/quants.h"
#include "util/sha256.h"
#include "util/thread_pool.h"
#include "util/timer.h"

namespace runtime {

namespace {

using util::Expected;
using util::Status;

// A slice held across sessions.
struct HeldSlice {
  std::string key;
  model::Config config;
  NodeModel node;
  std::shared_ptr<model::LoadedModel> source;  // when sliced from a local file
};

struct Received {
  tensor::Type type = tensor::Type::F32;
  uint64_t rows = 0, cols = 0, got = 0, size = 0;  // size: total_bytes (a chunk past it fails TensorChunk::sizes_ok)
  HugePageArena::Piece buf;  // the matrices are streamed every token: 2 MiB pages
};

class Worker {
 public:
  explicit Worker(const WorkerOptions& o) : o_(o), pool_(o.threads) {}

  Status load_local_model() {
    if (o_.model_path.empty()) return util::ok_status();
    auto m = model::load_model(o_.model_path);
    if (!m) return m.status();
    local_ = std::shared_ptr<model::LoadedModel>(std::move(*m));
    auto h = util::sha256_file_cached(o_.model_path);
    if (!h) return h.status();
    local_hash_ = *h;
    return util::ok_status();
  }

  Status session(net::Transport& t);

 private:
  Expected<std::shared_ptr<HeldSlice>> receive_slice(net::Transport& t, const Setup& s);
  Status await_setup(net::Transport& t, Setup* s, bool* shutdown);
  Expected<std::shared_ptr<HeldSlice>> take_slice(net::Transport& t, const Setup& s);
  Status run_steps(net::Transport& t, const Setup& s, const HeldSlice& held);
  void remember(std::shared_ptr<HeldSlice> h) {
    held_.remove_if([&](const auto& x) { return x->key == h->key; });
    held_.push_front(std::move(h));
    while (int(held_.size()) > std::max(1, o_.cache_slices)) held_.pop_back();
  }

  WorkerOptions o_;
  util::ThreadPool pool_;
  std::shared_ptr<model::LoadedModel> local_;
  std::string local_hash_;
  std::list<std::shared_ptr<HeldSlice>> held_;  // most recent first
};

Expected<std::shared_ptr<HeldSlice>> Worker::receive_slice(net::Transport& t, const Setup& s) {
  const std::string root = t.peer_name(0);
  std::map<std::string, Received> got;
  HugePageArena arena;
  for (;;) {
    auto m = t.recv(0, 60.0);
    if (!m) return m.status();
    if (m->type == msg_type(Msg::kWeightsDone)) {
      auto n = parse_u64(m->payload, "weights-done from " + root);
      if (!n) return n.status();
      if (*n != got.size())
        return Status::error(root + " announced " + std::to_string(*n) + " tensors but sent " +
                             std::to_string(got.size()));
      break;
    }
    if (m->type != msg_type(Msg::kTensor)) return net::unexpected_type(root, m->type, msg_type(Msg::kTensor));
    auto c = parse_message<TensorChunk>(m->payload, root);
    if (!c) return c.status();
    Received& r = got[c->name];
    if (!r.buf.data) {
      r.type = c->type; r.rows = c->rows; r.cols = c->cols; r.size = c->total_bytes;
      r.buf = arena.take(c->total_bytes);
    }
    if (r.size != c->total_bytes || c->offset != r.got)
      return Status::error(root + " sent tensor '" + c->name + "' out of order");
    std::copy(c->bytes.begin(), c->bytes.end(), r.buf.data + c->offset);
    r.got += c->bytes.size();
  }
  auto h = std::make_shared<HeldSlice>();
  h->key = s.slice_key();
  h->config = s.config;
  h->node.part = partition_of(s.slice);
  model::Weights& w = h->node.weights;
  w.layers.resize(s.config.n_layers);
  std::set<const void*> owners;  // the arena's buffers, each kept once
  TensorVisitor v;
  v.matrix = [&](const std::string& name, model::Matrix* m) -> Status {
    auto it = got.find(name);
    if (it == got.end() || it->second.got != it->second.size)
      return Status::error(root + " did not send tensor '" + name + "' whole");
    const Received& r = it->second;
    m->type = r.type; m->rows = int64_t(r.rows); m->cols = int64_t(r.cols);
    m->row_bytes = tensor::row_bytes(r.type, m->cols);
    m->data = r.buf.data;
    if (owners.insert(r.buf.owner.get()).second) w.storage.push_back(r.buf.owner);
    return util::ok_status();
  };
  v.vector = [&](const std::string& name, model::Vector* out) -> Status {
    auto it = got.find(name);
    if (it == got.end()) return util::ok_status();  // absent (no bias, no q_norm...)
    const Received& r = it->second;
    if (r.type != tensor::Type::F32 || r.rows != 1 || r.got != r.size)
      return Status::error(root + " sent vector '" + name + "' malformed");
    out->resize(r.cols);
    tensor::dequantize_row(tensor::Type::F32, r.buf.data, out->data(), int64_t(r.cols));
    return util::ok_status();
  };
  RETURN_IF_ERROR(visit_tensors(w, s.config.n_layers, v));
  // The shapes the forward pass relies on.
  if (Status st = check_slice(s.config, s.slice, w); !st.ok())
    return Status::error(root + " sent a slice that does not match its setup: " + st.message());
  return h;
}

// Tells the root why this worker cannot take its session (it reads "<worker> gave up: ..."),
// and ends the session with the same reason. The kind crosses the wire (net::error_code):
// the root reads kTooLittleMemory as "fewer nodes would not help", anything else as refused.
Status refuse(net::Transport& t, const std::string& why, Status::Code code = Status::Code::kRefused) {
  const Status st = Status::error(why, code);
  (void)t.send(0, net::MessageType::kError, net::encode_error({net::error_code(st), why}), 5.0);
  return st;
}

Status Worker::session(net::Transport& t) {
  Setup s;
  bool shutdown = false;
  RETURN_IF_ERROR(await_setup(t, &s, &shutdown));
  if (shutdown) return util::ok_status();
  auto held = take_slice(t, s);
  if (!held) return held.status();
  remember(*held);
  return run_steps(t, s, **held);
}

// Setup, answering the link and speed probes that come first; a root that only checks
// this worker is there says shutdown instead.
Status Worker::await_setup(net::Transport& t, Setup* s, bool* shutdown) {
  const std::string root = t.peer_name(0);
  for (;;) {
    auto m = t.recv(0, o_.setup_timeout_s);
    if (!m) return m.status();
    if (m->type == net::MessageType::kPing) {
      RETURN_IF_ERROR(t.send(0, net::MessageType::kPong, m->payload, 30.0));
      continue;
    }
    if (m->type == msg_type(Msg::kSpeedProbe)) {
      auto probe = parse_message<SpeedProbe>(m->payload, root);
      if (!probe) return refuse(t, probe.error());
      SpeedReply rep{o_.device.empty() ? model::cpu_description(o_.threads) : o_.device, 0};
      if (probe->measure) {
        auto v = measure_decode_speed(probe->shape, pool_, o_.backend);
        if (!v) return refuse(t, "worker: " + v.error());
        rep.tokens_per_s = *v;
      }
      RETURN_IF_ERROR(t.send(0, msg_type(Msg::kSpeedReply), encode_message(rep), 30.0));
      continue;
    }
    if (m->type == msg_type(Msg::kShutdown)) {
      *shutdown = true;
      return util::ok_status();
    }
    if (m->type != msg_type(Msg::kSetup)) return net::unexpected_type(root, m->type, msg_type(Msg::kSetup));
    auto p = parse_message<Setup>(m->payload, root);
    if (!p) return p.status();
    if (std::string why = model::attention_unsupported(p->config, p->run.kv_type, p->run.attention, p->run.attn_bf16); !why.empty())
      return refuse(t, "session setup from " + root + ": " + why);
    *s = std::move(*p);
    return util::ok_status();
  }
}

// The session's slice: held from an earlier session, sliced from --model, or received
// (after the memory check, before any weight moves).
Expected<std::shared_ptr<HeldSlice>> Worker::take_slice(net::Transport& t, const Setup& s) {
  const std::string root = t.peer_name(0);
  if (local_ && local_hash_ != s.model_hash)
    return refuse(t, "this worker serves " + o_.model_path + " (sha256 " + local_hash_.substr(0, 12) +
                         "), and the root runs another model (sha256 " + s.model_hash.substr(0, 12) +
                         "): give the worker the root's file with --model, or none to receive slices");
  std::shared_ptr<HeldSlice> held;
  const std::string key = s.slice_key();
  for (const auto& h : held_)
    if (h->key == key) held = h;
  // Memory: the slice unless it is here already, the KV pool and this node's share of the
  // host KV cache when full (the same rule as the root's, runtime::memory_fit).
  const MemoryFit fit = memory_fit(s.config, s.slice.kv_heads.end - s.slice.kv_heads.begin, s.run,
                                   held || local_ ? 0.0 : double(s.slice_bytes));
  if (!fit.fits)
    return refuse(t, "session setup from " + root + ": its slice (" + std::to_string(s.slice_bytes / 1000000) +
                         " MB), its KV cache (" + std::to_string(int64_t(fit.kv_bytes / 1e6)) + " MB)" +
                         (fit.host_bytes > 0 ? " and its share of the host KV cache (" +
                                                   std::to_string(int64_t(fit.host_bytes / 1e6)) + " MB)"
                                             : std::string()) +
                         " need " + std::to_string(int64_t(fit.need / 1e6)) + " MB, more than this machine's memory (" +
                         std::to_string(int64_t(fit.have / 1e6)) +
                         " MB); add nodes, or give the root fewer --parallel slots, a smaller --kv-memory, "
                         "--cache-ram or --ctx",
                     Status::Code::kTooLittleMemory);
  if (!held && local_) {
    held = std::make_shared<HeldSlice>();
    held->key = key;
    held->config = local_->config;
    held->source = local_;
    plan::NodeSlice ns = s.slice;
    ns.holds_embedding = false;
    held->node = slice_weights(local_->config, local_->weights, ns);
  }
  RETURN_IF_ERROR(t.send(0, msg_type(Msg::kSetupReply), encode_u64(held ? 1 : 0), 30.0));
  if (!held) {
    auto r = receive_slice(t, s);
    if (!r) return r.status();
    held = *r;
    std::fprintf(stderr, "worker: received slice %s from %s\n", key.c_str(), root.c_str());
  }
  return held;
}

// This node built from the setup (as the root builds its own), then steps in lockstep
// with the root until it says shutdown.
Status Worker::run_steps(net::Transport& t, const Setup& s, const HeldSlice& held) {
  const std::string root = t.peer_name(0);
  const model::Config& cfg = held.config;
  auto node = make_node(s, cfg, held.node, &t, pool_, o_.backend);
  if (!node) return refuse(t, "worker: " + node.error());
  NodeExecutor& exec = *node->exec;
  RETURN_IF_ERROR(t.send(0, msg_type(Msg::kReady), {}, 30.0));
  t.reset_counters();

  const int D = cfg.dim;
  std::vector<float> x;  // [rows][dim] embedded rows of the step
  for (;;) {
    auto m = t.recv(0, o_.idle_timeout_s);
    if (!m) return m.status();
    if (m->type == msg_type(Msg::kShutdown)) return util::ok_status();
    if (m->type == net::MessageType::kPing) {
      RETURN_IF_ERROR(t.send(0, net::MessageType::kPong, m->payload, 30.0));
      continue;
    }
    if (m->type != msg_type(Msg::kStep)) return net::unexpected_type(root, m->type, msg_type(Msg::kStep));
    auto st = parse_message<Step>(m->payload, root);
    if (!st) return refuse(t, st.error());
    if (Status fits = check_step_fits(*st, D, s.run.ctx, s.run.n_slots, s.run.max_batch, root, s.run.kv_blocks); !fits.ok())
      return refuse(t, fits.message());
    const int rows = st->rows_total();
    const size_t rb = tensor::row_bytes(st->embd_type, D);
    x.resize(size_t(rows) * D);
    for (int b = 0; b < rows; ++b)
      tensor::dequantize_row(st->embd_type, st->rows.data() + b * rb, &x[size_t(b) * D], D);
    auto rep = exec.run(*st, x.data());
    if (!rep) return rep.status();
    const net::ByteCounters bc = t.counters();
    rep->counters.bytes_sent = bc.bytes_sent;
    rep->counters.bytes_received = bc.bytes_received;
    RETURN_IF_ERROR(t.send(0, msg_type(Msg::kStepReply), encode_message(*rep), 30.0));
  }
}

}  // namespace

Status run_worker_session(net::Transport& t, const WorkerOptions& o) {
  Worker w(o);
  RETURN_IF_ERROR(w.load_local_model());
  return w.session(t);
}

Status run_worker(const WorkerOptions& o) {
  Worker w(o);
  RETURN_IF_ERROR(w.load_local_model());
  auto l = net::Listener::listen(o.host == "0.0.0.0" ? "" : o.host, o.port);
  if (!l) return l.status();
  std::printf("listening on %s:%u\n", o.host.c_str(), unsigned(l->port()));
  std::fflush(stdout);
  net::TcpOptions topt;
  topt.cluster_key = o.cluster_key;
  topt.link_encryption = o.link_encryption;
  topt.software_version = o.software_version;
  for (int served = 0; o.max_sessions < 0 || served < o.max_sessions;) {
    auto t = net::TcpTransport::accept_worker(*l, topt, 3600.0);
    if (!t) {
      std::fprintf(stderr, "worker: %s\n", t.error().c_str());
      continue;
    }
    ++served;
    std::fprintf(stderr, "worker: session with %s (rank %d of %d)\n", (*t)->peer_name(0).c_str(), (*t)->rank(),
                 (*t)->size());
    Status st = w.session(**t);
    if (!st.ok()) {
      std::fprintf(stderr, "worker: session ended: %s\n", st.message().c_str());
      // Let the root hear about the failure from the node that failed first.
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    } else {
      std::fprintf(stderr, "worker: session ended normally\n");
    }
  }
  return util::ok_status();
}

}  // namespace runtime
