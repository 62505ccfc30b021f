// tcp_transport.cc: mesh bootstrap (root connects to workers, workers to each other) and
// the poll()-driven exchange. Deliberately single-threaded per node except while a worker
// accepts its lower-rank peers during bootstrap.
#include "net/tcp_transport.h"

#include <openssl/rand.h>
#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "util/log.h"
#include "util/timer.h"

namespace net {

namespace {

int ms_left(double deadline) {
  const double left = deadline - util::now_seconds();
  return left <= 0 ? 0 : static_cast<int>(std::ceil(left * 1e3));
}

double spin_seconds(const TcpOptions& opt) {
  const char* env = std::getenv("SHARDLM_SPIN_US");
  return (env && *env ? std::atof(env) : opt.spin_us) * 1e-6;
}

HandshakeOptions handshake_options(const TcpOptions& opt, Role role) {
  HandshakeOptions h;
  h.role = role;
  h.cluster_key = opt.cluster_key;
  h.link_encryption = opt.link_encryption;
  h.software_version = opt.software_version;
  h.timeout_s = opt.handshake_timeout_s;
  return h;
}

}  // namespace

std::vector<uint8_t> encode_bootstrap(const Bootstrap& b) {
  Writer w;
  w.put_u64(b.session);
  w.put_u32(b.rank);
  w.put_u32(static_cast<uint32_t>(b.addresses.size()));
  for (const auto& a : b.addresses) w.put_string(a);
  return w.take();
}

Expected<Bootstrap> parse_bootstrap(std::span<const uint8_t> p, const std::string& peer) {
  Reader r(p, "bootstrap from " + peer);
  Bootstrap b;
  uint32_t n = 0;
  RETURN_IF_ERROR(r.get_u64(&b.session));
  RETURN_IF_ERROR(r.get_u32(&b.rank));
  RETURN_IF_ERROR(r.get_u32(&n));
  if (n < 2 || n > kMaxNodes || b.rank == 0 || b.rank >= n)
    return Status::error("bootstrap from " + peer + " is invalid (rank " + std::to_string(b.rank) +
                         " of " + std::to_string(n) + ")");
  b.addresses.resize(n);
  for (auto& a : b.addresses) RETURN_IF_ERROR(r.get_string(&a, kMaxAddress));
  RETURN_IF_ERROR(r.finish());
  return b;
}

std::vector<uint8_t> encode_peer_hello(uint64_t session, uint32_t rank) {
  Writer w;
  w.put_u64(session);
  w.put_u32(rank);
  return w.take();
}

Expected<PeerHello> parse_peer_hello(std::span<const uint8_t> p, const std::string& peer) {
  Reader r(p, "peer-hello from " + peer);
  PeerHello h;
  RETURN_IF_ERROR(r.get_u64(&h.session));
  RETURN_IF_ERROR(r.get_u32(&h.rank));
  RETURN_IF_ERROR(r.finish());
  return h;
}

Expected<std::unique_ptr<TcpTransport>> TcpTransport::connect_root(const std::vector<std::string>& workers,
                                                                   const TcpOptions& opt, int* failed) {
  std::unique_ptr<TcpTransport> t(new TcpTransport());
  const int n = static_cast<int>(workers.size()) + 1;
  t->rank_ = 0;
  t->spin_s_ = spin_seconds(opt);
  t->links_.resize(n);
  CHECK(RAND_bytes(reinterpret_cast<unsigned char*>(&t->session_), sizeof t->session_) == 1);
  auto fail = [&](int i, Status st) -> Status {
    if (failed) *failed = i - 1;
    return st.at_rank(i);
  };
  Bootstrap b;
  b.session = t->session_;
  b.addresses.push_back("");
  for (int i = 1; i < n; ++i) {
    auto hp = parse_host_port(workers[i - 1]);
    if (!hp.ok()) return fail(i, hp.status());
    b.addresses.push_back(hp->str());
    auto sock = connect_tcp(*hp, opt.connect_timeout_s, "worker");
    if (!sock.ok()) return fail(i, sock.status());
    Connection c(std::move(*sock), opt.max_frame_bytes);
    auto info = handshake_initiator(c, handshake_options(opt, Role::kRoot));
    if (!info.ok()) return fail(i, info.status());
    if (info->role != Role::kWorker)
      return fail(i, Status::error(c.peer() + " is a root, not a worker: give the root worker addresses only", util::Status::Code::kRefused));
    t->links_[i] = std::move(c);
  }
  for (int i = 1; i < n; ++i) {
    b.rank = static_cast<uint32_t>(i);
    Status st = t->links_[i].send(MessageType::kBootstrap, encode_bootstrap(b), opt.handshake_timeout_s);
    if (!st.ok()) return fail(i, st);
  }
  for (int i = 1; i < n; ++i) {
    const double left = std::max(0.1, opt.setup_timeout_s);
    auto m = t->links_[i].recv_expect(MessageType::kReady, left);
    if (!m.ok()) return fail(i, m.status());
  }
  return t;
}

Expected<std::unique_ptr<TcpTransport>> TcpTransport::accept_worker(Listener& listener, const TcpOptions& opt,
                                                                    double wait_for_root_s) {
  std::unique_ptr<TcpTransport> t(new TcpTransport());
  auto sock = listener.accept(wait_for_root_s);
  if (!sock.ok()) return sock.status();
  Connection root(std::move(*sock), opt.max_frame_bytes);
  auto info = handshake_acceptor(root, handshake_options(opt, Role::kWorker));
  if (!info.ok()) return info.status();
  if (info->role != Role::kRoot)
    return Status::error(root.peer() + " connected before the root did: start the root last");
  auto m = root.recv_expect(MessageType::kBootstrap, opt.setup_timeout_s);
  if (!m.ok()) return m.status();
  auto b = parse_bootstrap(m->payload, root.peer());
  if (!b.ok()) return b.status();
  const int n = static_cast<int>(b->addresses.size());
  const int me = static_cast<int>(b->rank);
  t->rank_ = me;
  t->spin_s_ = spin_seconds(opt);
  t->session_ = b->session;
  t->links_.resize(n);
  t->links_[0] = std::move(root);
  const double deadline = util::now_seconds() + opt.setup_timeout_s;

  // Lower-rank workers connect to us: accept them on a helper thread while we connect up.
  Status accept_status;
  std::thread acceptor([&] {
    int missing = me - 1;
    while (missing > 0) {
      const double left = deadline - util::now_seconds();
      if (left <= 0) {
        accept_status = Status::error("worker rank " + std::to_string(me) + ": " + std::to_string(missing) +
                                      " lower-rank worker(s) did not connect within the setup timeout");
        return;
      }
      auto s = listener.accept(left);
      if (!s.ok()) { accept_status = s.status(); return; }
      Connection c(std::move(*s), opt.max_frame_bytes);
      auto pi = handshake_acceptor(c, handshake_options(opt, Role::kWorker));
      if (!pi.ok()) { LOG_WARN("refused a connection during mesh setup: %s", pi.error().c_str()); continue; }
      auto ph = c.recv_expect(MessageType::kPeerHello, opt.handshake_timeout_s);
      if (!ph.ok()) { LOG_WARN("refused a connection during mesh setup: %s", ph.error().c_str()); continue; }
      auto hello = parse_peer_hello(ph->payload, c.peer());
      const uint32_t rank = hello.ok() ? hello->rank : 0;
      if (!hello.ok() || hello->session != b->session || rank == 0 || int(rank) >= me ||
          t->links_[rank].valid()) {
        LOG_WARN("refused a connection from %s during mesh setup: not a peer of this session",
                 c.peer().c_str());
        continue;
      }
      c.set_peer("worker " + b->addresses[rank]);
      t->links_[rank] = std::move(c);
      --missing;
    }
  });
  Status connect_status;
  for (int k = me + 1; k < n && connect_status.ok(); ++k) {
    auto hp = parse_host_port(b->addresses[k]);
    if (!hp.ok()) { connect_status = hp.status(); break; }
    auto s = connect_tcp(*hp, opt.connect_timeout_s, "worker");
    if (!s.ok()) { connect_status = s.status(); break; }
    Connection c(std::move(*s), opt.max_frame_bytes);
    auto pi = handshake_initiator(c, handshake_options(opt, Role::kWorker));
    if (!pi.ok()) { connect_status = pi.status(); break; }
    connect_status = c.send(MessageType::kPeerHello, encode_peer_hello(b->session, uint32_t(me)),
                            opt.handshake_timeout_s);
    t->links_[k] = std::move(c);
  }
  acceptor.join();
  Status st = connect_status.ok() ? accept_status : connect_status;
  if (!st.ok()) {
    const auto payload = encode_error({ErrorCode::kOther, "could not join the mesh: " + st.message()});
    (void)t->links_[0].send(MessageType::kError, payload, opt.handshake_timeout_s);
    return st;
  }
  RETURN_IF_ERROR(t->links_[0].send(MessageType::kReady, {}, opt.handshake_timeout_s));
  return t;
}

Connection& TcpTransport::link(int peer) {
  CHECK(peer >= 0 && peer < size() && peer != rank_);
  return links_[peer];
}

std::string TcpTransport::peer_name(int peer) const {
  if (peer == rank_ || peer < 0 || peer >= size()) return "rank " + std::to_string(peer);
  return links_[peer].peer();
}

Status TcpTransport::send(int peer, MessageType type, std::span<const uint8_t> payload, double timeout_s) {
  return link(peer).send(type, payload, timeout_s).at_rank(peer);
}

Expected<Message> TcpTransport::recv(int peer, double timeout_s) {
  Connection& c = link(peer);
  // As in exchange(): a step message or a reply usually follows within microseconds.
  pollfd p{c.fd(), POLLIN, 0};
  for (const double spin_end = util::now_seconds() + spin_s_; util::now_seconds() < spin_end; sched_yield())
    if (::poll(&p, 1, 0) != 0) break;
  auto m = c.recv(timeout_s);
  if (!m.ok()) return m.status().at_rank(peer);
  return m;
}

Status TcpTransport::exchange(std::span<const SendItem> sends, std::span<const RecvItem> recvs, double timeout_s) {
  const double deadline = util::now_seconds() + timeout_s;
  outs_.resize(sends.size());
  ins_.resize(recvs.size());
  size_t pending = 0;
  std::vector<bool> done(sends.size() + recvs.size(), false);
  for (size_t i = 0; i < sends.size(); ++i) {
    Connection& c = link(sends[i].peer);
    c.start_frame(sends[i].type, sends[i].payload, &outs_[i]);
    auto d = c.write_some(&outs_[i]);  // usually completes at once
    if (!d.ok()) return d.status().at_rank(sends[i].peer);
    done[i] = *d;
    pending += !*d;
  }
  for (size_t j = 0; j < recvs.size(); ++j) {
    (void)link(recvs[j].peer);
    ins_[j] = InFrame();
    ++pending;
  }
  std::vector<pollfd> fds;
  std::vector<size_t> which;
  while (pending > 0) {
    fds.clear();
    which.clear();
    for (size_t i = 0; i < done.size(); ++i) {
      if (done[i]) continue;
      const bool is_send = i < sends.size();
      const int peer = is_send ? sends[i].peer : recvs[i - sends.size()].peer;
      fds.push_back({links_[peer].fd(), short(is_send ? POLLOUT : POLLIN), 0});
      which.push_back(i);
    }
    int r = 0;
    // Busy-poll briefly before sleeping: a collective's partner usually answers within
    // tens of microseconds, and waking a process blocked in poll() costs about as much.
    // Yielding between polls hands the core to a runnable partner on a busy machine.
    for (const double spin_end = util::now_seconds() + spin_s_; util::now_seconds() < spin_end;) {
      if ((r = ::poll(fds.data(), fds.size(), 0)) != 0) break;
      sched_yield();
    }
    if (r == 0) r = ::poll(fds.data(), fds.size(), ms_left(deadline));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::error(std::string("poll failed: ") + std::strerror(errno));
    }
    if (r == 0) {
      // Name a peer we were waiting for: a receive, if any is pending.
      for (size_t k = 0; k < which.size(); ++k) {
        if (which[k] >= sends.size())
          return Status::error(timeout_message(peer_name(recvs[which[k] - sends.size()].peer), timeout_s),
                               util::Status::Code::kTimeout, recvs[which[k] - sends.size()].peer);
      }
      return Status::error(send_timeout_message(peer_name(sends[which[0]].peer), timeout_s),
                           util::Status::Code::kTimeout, sends[which[0]].peer);
    }
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      const size_t i = which[k];
      if (i < sends.size()) {
        auto d = links_[sends[i].peer].write_some(&outs_[i]);
        if (!d.ok()) return d.status().at_rank(sends[i].peer);
        if (*d) { done[i] = true; --pending; }
        continue;
      }
      const RecvItem& item = recvs[i - sends.size()];
      InFrame& f = ins_[i - sends.size()];
      auto d = links_[item.peer].read_some(&f);
      if (!d.ok()) return d.status().at_rank(item.peer);
      if (!*d) continue;
      if (f.h.type != item.type) {
        if (f.h.type == MessageType::kError) return peer_gave_up(peer_name(item.peer), f.payload).at_rank(item.peer);
        return unexpected_type(peer_name(item.peer), f.h.type, item.type).at_rank(item.peer);
      }
      item.out->type = f.h.type;
      item.out->payload = std::move(f.payload);
      done[i] = true;
      --pending;
    }
  }
  return {};
}

ByteCounters TcpTransport::counters() const {
  ByteCounters sum;
  for (const auto& c : links_) {
    sum.bytes_sent += c.counters().bytes_sent;
    sum.bytes_received += c.counters().bytes_received;
    sum.frames_sent += c.counters().frames_sent;
    sum.frames_received += c.counters().frames_received;
  }
  return sum;
}

void TcpTransport::reset_counters() {
  for (auto& c : links_) c.reset_counters();
}

}  // namespace net
