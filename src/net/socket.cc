// socket.cc: POSIX TCP with poll()-based timeouts, and whole-frame I/O on a Connection.
// Deliberately no retries or reconnects: a lost peer is reported, and the caller decides.
#include "net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "util/timer.h"

namespace net {

namespace {

std::string errno_text(int e) { return std::strerror(e); }

void set_nonblocking(int fd) {
  const int fl = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}
void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::string sockaddr_text(const sockaddr* sa) {
  char ip[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
    return std::string(ip) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (sa->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof ip);
    return std::string("[") + ip + "]:" + std::to_string(ntohs(in6->sin6_port));  // ("[" + std::string&&: GCC 12 -Wrestrict)
  }
  return "";
}

int ms_left(double deadline) {
  const double left = deadline - util::now_seconds();
  if (left <= 0) return 0;
  return static_cast<int>(std::ceil(left * 1e3));
}

// Waits for `events` on fd until the deadline; false on timeout.
Expected<bool> wait_fd(int fd, short events, double deadline, const std::string& peer) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, ms_left(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return Status::error("waiting for " + peer + " failed: " + errno_text(errno), util::Status::Code::kLostPeer);
  }
}

}  // namespace

std::string timeout_message(const std::string& peer, double timeout_s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", timeout_s);
  return peer + " did not answer within " + buf + " s";
}

std::string send_timeout_message(const std::string& peer, double timeout_s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", timeout_s);
  return peer + " did not take the data within " + buf + " s (it is not reading)";
}

Status unexpected_type(const std::string& peer, MessageType got, MessageType want) {
  return Status::error(peer + " sent a " + type_name(got) + " message where a " + type_name(want) +
                       " message was expected: the nodes are out of step", util::Status::Code::kProtocol);
}

Status peer_gave_up(const std::string& peer, std::span<const uint8_t> payload) {
  auto e = parse_error(payload, peer);
  if (!e.ok()) return e.status();
  if (e->code == ErrorCode::kIntegrity)
    return Status::error("integrity check failed on the link to " + peer + ": it refused a frame from this node as "
                         "altered, replayed, reordered or dropped on the way, and ended the session",
                         util::Status::Code::kIntegrity);
  return Status::error(peer + " gave up: " + e->text, status_code(e->code));
}

// ---- HostPort ----

std::string HostPort::str() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

bool HostPort::loopback() const { return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1"; }

Expected<HostPort> parse_host_port(std::string_view s) {
  const std::string text(s);
  const auto bad = [&](const char* why) {
    return Status::error("bad address \"" + text + "\": " + why + " (expected host:port, e.g. 10.0.0.2:9000)", util::Status::Code::kBadInput);
  };
  HostPort hp;
  std::string_view port_part;
  if (!s.empty() && s.front() == '[') {
    const size_t close = s.find(']');
    if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':')
      return bad("unterminated [IPv6] address");
    hp.host = std::string(s.substr(1, close - 1));
    port_part = s.substr(close + 2);
  } else {
    const size_t colon = s.rfind(':');
    if (colon == std::string_view::npos) return bad("no port");
    hp.host = std::string(s.substr(0, colon));
    port_part = s.substr(colon + 1);
  }
  if (hp.host.empty()) return bad("no host");
  if (port_part.empty() || port_part.size() > 5) return bad("bad port");
  uint32_t port = 0;
  for (char c : port_part) {
    if (c < '0' || c > '9') return bad("bad port");
    port = port * 10 + uint32_t(c - '0');
  }
  if (port == 0 || port > 65535) return bad("port out of range");
  hp.port = static_cast<uint16_t>(port);
  return hp;
}

// ---- Socket ----

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    peer_ = std::move(o.peer_);
    o.fd_ = -1;
  }
  return *this;
}

Socket Socket::adopt(int fd, std::string peer) {
  set_nonblocking(fd);
  return Socket(fd, std::move(peer));
}

std::string Socket::address() const {
  if (fd_ < 0) return "";
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  return sockaddr_text(reinterpret_cast<sockaddr*>(&ss));
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Expected<Socket> connect_tcp(const HostPort& addr, double timeout_s, std::string_view role) {
  const std::string peer = std::string(role) + " " + addr.str();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(addr.port);
  const int gai = getaddrinfo(addr.host.c_str(), port.c_str(), &hints, &res);
  if (gai != 0) return Status::error("cannot resolve " + peer + ": " + gai_strerror(gai), util::Status::Code::kLostPeer);
  const double deadline = util::now_seconds() + timeout_s;
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) { last_error = errno_text(errno); continue; }
    Socket s(fd, peer);
    set_nonblocking(fd);
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) { last_error = errno_text(errno); continue; }
      auto ready = wait_fd(fd, POLLOUT, deadline, peer);
      if (!ready.ok()) { freeaddrinfo(res); return ready.status(); }
      if (!*ready) {
        freeaddrinfo(res);
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.1f", timeout_s);
        return Status::error("could not connect to " + peer + " within " + buf +
                             " s: check the address and that no firewall drops the port", util::Status::Code::kLostPeer);
      }
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) { last_error = errno_text(err); continue; }
    }
    set_nodelay(fd);
    freeaddrinfo(res);
    return s;
  }
  freeaddrinfo(res);
  return Status::error("could not connect to " + peer + ": " + last_error + " (is `shardlm worker --port " +
                       std::to_string(addr.port) + "` running there?)", util::Status::Code::kLostPeer);
}

Expected<Listener> Listener::listen(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = host.empty() ? AF_INET : AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string port_s = std::to_string(port);
  const int gai = getaddrinfo(host.empty() ? nullptr : host.c_str(), port_s.c_str(), &hints, &res);
  if (gai != 0) return Status::error("cannot resolve listen address \"" + host + "\": " + gai_strerror(gai));
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) { last_error = errno_text(errno); continue; }
    Socket s(fd, "listener");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      last_error = errno_text(errno);
      continue;
    }
    set_nonblocking(fd);
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    Listener l;
    l.port_ = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                       : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    l.sock_ = std::move(s);
    freeaddrinfo(res);
    return l;
  }
  freeaddrinfo(res);
  return Status::error("cannot listen on port " + std::to_string(port) + ": " + last_error +
                       " (is another process using it? pick another --port)");
}

Expected<Socket> Listener::accept(double timeout_s) {
  const double deadline = util::now_seconds() + timeout_s;
  for (;;) {
    auto ready = wait_fd(sock_.fd(), POLLIN, deadline, "the listening socket");
    if (!ready.ok()) return ready.status();
    if (!*ready) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.1f", timeout_s);
      return Status::error("no node connected to port " + std::to_string(port_) + " within " + buf + " s");
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    const int fd = ::accept4(sock_.fd(), reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) continue;
      return Status::error("accept on port " + std::to_string(port_) + " failed: " + errno_text(errno));
    }
    set_nodelay(fd);
    return Socket(fd, "peer " + sockaddr_text(reinterpret_cast<sockaddr*>(&ss)));
  }
}

// ---- Connection ----

void Connection::enable_sealing(const LinkKeys& keys) {
  sealer_ = std::make_unique<FrameCipher>(keys.send, FrameCipher::Mode::kSeal);
  opener_ = std::make_unique<FrameCipher>(keys.recv, FrameCipher::Mode::kOpen);
}

void Connection::start_frame(MessageType type, std::span<const uint8_t> payload, OutFrame* out) {
  FrameHeader h;
  h.type = type;
  h.seq = send_seq_++;
  h.payload_bytes = payload.size();
  out->done = 0;
  writing_ = true;
  if (!sealer_) {
    encode_header(h, out->header);
    out->payload = payload;
    return;
  }
  h.flags = kFlagSealed;
  h.payload_bytes += kTagBytes;
  encode_header(h, out->header);
  // Keep the buffer from frame to frame (weight chunks are 64 MiB each), but not a large
  // one once frames are small again.
  constexpr size_t kKeepBytes = size_t(1) << 20;
  if (h.payload_bytes <= kKeepBytes && out->sealed.capacity() > kKeepBytes) std::vector<uint8_t>().swap(out->sealed);
  out->sealed.resize(h.payload_bytes);
  sealer_->seal(h.seq, out->header, payload, out->sealed.data(), out->sealed.data() + payload.size());
  out->payload = out->sealed;
}

Status Connection::integrity_failure(const std::string& detail) {
  broken_ = Status::error("integrity check failed on a frame from " + peer() + " (" + detail +
                          "): it was altered, replayed, reordered or dropped on the way; this link is given up", util::Status::Code::kIntegrity);
  if (sealer_ && !writing_ && valid()) {  // tell the peer, without blocking
    const auto text = encode_error({ErrorCode::kIntegrity, broken_.message()});
    OutFrame f;
    start_frame(MessageType::kError, text, &f);
    const Status saved = std::move(broken_);
    broken_ = Status();
    (void)write_some(&f);
    broken_ = saved;
  }
  return broken_;
}

Expected<bool> Connection::write_some(OutFrame* f) {
  if (!broken_.ok()) return broken_;
  while (f->done < f->total()) {
    iovec iov[2];
    int n_iov = 0;
    if (f->done < kHeaderBytes) {
      iov[n_iov++] = {f->header + f->done, kHeaderBytes - f->done};
      if (!f->payload.empty()) iov[n_iov++] = {const_cast<uint8_t*>(f->payload.data()), f->payload.size()};
    } else {
      const size_t off = f->done - kHeaderBytes;
      iov[n_iov++] = {const_cast<uint8_t*>(f->payload.data()) + off, f->payload.size() - off};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n_iov;
    const ssize_t w = ::sendmsg(sock_.fd(), &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      if (errno == EPIPE || errno == ECONNRESET) return Status::error(peer() + " closed the connection", util::Status::Code::kLostPeer);
      return Status::error("sending to " + peer() + " failed: " + errno_text(errno), util::Status::Code::kLostPeer);
    }
    f->done += static_cast<size_t>(w);
    counters_.bytes_sent += static_cast<uint64_t>(w);
  }
  counters_.frames_sent++;
  writing_ = false;
  return true;
}

Expected<bool> Connection::read_some(InFrame* f) {
  if (!broken_.ok()) return broken_;
  for (;;) {
    uint8_t* dst;
    size_t want;
    if (!f->have_header) {
      dst = f->header + f->got;
      want = kHeaderBytes - f->got;
    } else {
      const size_t off = f->got - kHeaderBytes;
      if (off == f->payload.size()) break;
      dst = f->payload.data() + off;
      want = f->payload.size() - off;
    }
    const ssize_t r = ::recv(sock_.fd(), dst, want, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      if (errno == ECONNRESET) return Status::error(peer() + " closed the connection (connection reset)", util::Status::Code::kLostPeer);
      return Status::error("receiving from " + peer() + " failed: " + errno_text(errno), util::Status::Code::kLostPeer);
    }
    if (r == 0) {
      if (f->got == 0) return Status::error(peer() + " closed the connection", util::Status::Code::kLostPeer);
      const uint64_t expected = kHeaderBytes + (f->have_header ? f->h.payload_bytes : 0);
      return Status::error(peer() + " closed the connection in the middle of a frame (got " +
                           std::to_string(f->got) + " of " +
                           (f->have_header ? std::to_string(expected) : std::string("at least 28")) +
                           " bytes): it probably crashed or was stopped; check its log", util::Status::Code::kLostPeer);
    }
    f->got += static_cast<size_t>(r);
    counters_.bytes_received += static_cast<uint64_t>(r);
    if (!f->have_header && f->got == kHeaderBytes) {
      auto h = decode_header(f->header, peer(), max_frame_);
      if (opener_) {  // everything about a sealed link's frames is an integrity question
        if (!h.ok()) return integrity_failure("its header: " + h.error());
        if (h->seq != recv_seq_)
          return integrity_failure("frame number " + std::to_string(h->seq) + " where " + std::to_string(recv_seq_) +
                                   " was expected");
        if (h->flags != kFlagSealed || h->payload_bytes < kTagBytes)
          return integrity_failure(type_name(h->type) + " frame " + std::to_string(h->seq) +
                                   " is not sealed, on an encrypted link");
      } else if (h.ok() && h->flags != 0) {
        return Status::error(peer() + " sent an encrypted frame on a link without a cluster key: the two nodes "
                             "run incompatible builds", util::Status::Code::kRefused);
      }
      if (!h.ok()) return h.status();
      if (h->seq != recv_seq_) {
        return Status::error(peer() + " sent frame number " + std::to_string(h->seq) + " where " +
                             std::to_string(recv_seq_) + " was expected: the stream is corrupt", util::Status::Code::kProtocol);
      }
      f->h = *h;
      f->have_header = true;
      f->payload.resize(f->h.payload_bytes);
    }
  }
  if (opener_) {
    const size_t n = f->payload.size() - kTagBytes;
    if (!opener_->open(recv_seq_, f->header, std::span<uint8_t>(f->payload.data(), n), f->payload.data() + n))
      return integrity_failure(type_name(f->h.type) + " frame " + std::to_string(recv_seq_) + " of " +
                               std::to_string(f->payload.size()) + " bytes does not match its authentication tag");
    f->payload.resize(n);
    f->h.payload_bytes = n;
  }
  recv_seq_++;
  counters_.frames_received++;
  return true;
}

Status Connection::send(MessageType type, std::span<const uint8_t> payload, double timeout_s) {
  if (!broken_.ok()) return broken_;
  if (!valid()) return Status::error("the connection to " + peer() + " is closed", util::Status::Code::kLostPeer);
  OutFrame& f = send_frame_;
  start_frame(type, payload, &f);
  const double deadline = util::now_seconds() + timeout_s;
  for (;;) {
    auto done = write_some(&f);
    if (!done.ok()) return done.status();
    if (*done) return {};
    auto ready = wait_fd(fd(), POLLOUT, deadline, peer());
    if (!ready.ok()) return ready.status();
    if (!*ready) return Status::error(send_timeout_message(peer(), timeout_s), util::Status::Code::kTimeout);
  }
}

Expected<Message> Connection::recv(double timeout_s) {
  if (!broken_.ok()) return broken_;
  if (!valid()) return Status::error("the connection to " + peer() + " is closed");
  InFrame f;
  const double deadline = util::now_seconds() + timeout_s;
  for (;;) {
    auto ready = wait_fd(fd(), POLLIN, deadline, peer());
    if (!ready.ok()) return ready.status();
    if (!*ready) return Status::error(timeout_message(peer(), timeout_s), util::Status::Code::kTimeout);
    auto done = read_some(&f);
    if (!done.ok()) return done.status();
    if (*done) return Message{f.h.type, std::move(f.payload)};
  }
}

Expected<Message> Connection::recv_expect(MessageType type, double timeout_s) {
  auto m = recv(timeout_s);
  if (!m.ok()) return m;
  if (m->type == type) return m;
  if (m->type == MessageType::kError) return peer_gave_up(peer(), m->payload);
  return unexpected_type(peer(), m->type, type);
}

}  // namespace net
