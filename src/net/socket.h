// socket.h: TCP sockets with a timeout on every blocking step, and Connection, which
// sends and receives whole frames (wire.h) over one socket, checking sequence numbers and
// counting bytes. Sockets are always non-blocking; waiting is done with poll(), so a peer
// that stops answering costs at most the caller's timeout, and every error names the peer
// ("worker 127.0.0.1:9001 closed the connection"). After a keyed handshake a Connection
// seals every frame it sends and opens every frame it receives (link_crypto.h); a frame
// that fails (altered, replayed, reordered, dropped, in clear) ends the connection with an
// error naming the peer and saying "integrity", and the peer is told so (kIntegrity).
// Deliberately no handshake (handshake.h) and no knowledge of ranks (tcp_transport.h).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "net/link_crypto.h"
#include "net/wire.h"

namespace net {

struct Message {
  MessageType type = MessageType::kError;
  std::vector<uint8_t> payload;
};

// "host:port" or "[v6addr]:port".
struct HostPort {
  std::string host;
  uint16_t port = 0;
  std::string str() const;
  bool loopback() const;  // localhost, 127.0.0.0/8 or ::1: a peer on this machine
};
Expected<HostPort> parse_host_port(std::string_view s);

// An owned file descriptor with the name of the peer at the other end.
class Socket {
 public:
  Socket() = default;
  Socket(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}
  Socket(Socket&& o) noexcept { *this = std::move(o); }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  // Takes ownership of a connected stream socket (e.g. one end of a socketpair) and
  // makes it non-blocking.
  static Socket adopt(int fd, std::string peer);
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  const std::string& peer() const { return peer_; }
  void set_peer(std::string p) { peer_ = std::move(p); }
  std::string address() const;  // "ip:port" of the remote end ("" when unknown)
  void close();

 private:
  int fd_ = -1;
  std::string peer_;
};

// Connects with a timeout; sets TCP_NODELAY. `role` names the peer in messages ("worker").
Expected<Socket> connect_tcp(const HostPort& addr, double timeout_s, std::string_view role);

class Listener {
 public:
  // host "" listens on every IPv4 address; port 0 picks a free port (see port()).
  static Expected<Listener> listen(const std::string& host, uint16_t port);
  uint16_t port() const { return port_; }
  // Waits up to timeout_s for a connection; the socket's peer is named "peer ip:port".
  Expected<Socket> accept(double timeout_s);

 private:
  Socket sock_;
  uint16_t port_ = 0;
};

// One frame being written without blocking: header bytes + payload view (on a sealed
// connection a view of `sealed`, the ciphertext and tag, kept for the next frame).
struct OutFrame {
  uint8_t header[kHeaderBytes];
  std::span<const uint8_t> payload;
  std::vector<uint8_t> sealed;
  size_t done = 0;  // bytes of header + payload written so far
  size_t total() const { return kHeaderBytes + payload.size(); }
};
// One frame being read without blocking.
struct InFrame {
  uint8_t header[kHeaderBytes];
  size_t got = 0;  // bytes of header + payload read so far
  bool have_header = false;
  FrameHeader h;
  std::vector<uint8_t> payload;
};

struct ByteCounters {
  uint64_t bytes_sent = 0, bytes_received = 0;    // whole frames, header included
  uint64_t frames_sent = 0, frames_received = 0;
};

// A framed, sequenced message channel over one socket.
class Connection {
 public:
  Connection() = default;
  explicit Connection(Socket s, uint64_t max_frame_bytes = kDefaultMaxFrameBytes)
      : sock_(std::move(s)), max_frame_(max_frame_bytes) {}
  Connection(Connection&&) noexcept = default;
  Connection& operator=(Connection&&) noexcept = default;

  const std::string& peer() const { return sock_.peer(); }
  void set_peer(std::string p) { sock_.set_peer(std::move(p)); }
  int fd() const { return sock_.fd(); }
  bool valid() const { return sock_.valid(); }
  std::string address() const { return sock_.address(); }
  void close() { sock_.close(); }

  // Blocking (up to timeout_s) whole-frame send and receive.
  Status send(MessageType type, std::span<const uint8_t> payload, double timeout_s);
  Expected<Message> recv(double timeout_s);  // any type, kError included
  // As recv, but a kError becomes a Status ("worker X gave up: ...") and any other type
  // than `type` is refused ("... sent a gather message where an all-reduce was expected").
  Expected<Message> recv_expect(MessageType type, double timeout_s);

  // Non-blocking steps, used by TcpTransport::exchange to drive many sockets from one
  // poll(). start_frame assigns the next sequence number (and seals the payload on a
  // sealed connection). Each *_some returns true when the frame is complete, false when
  // the socket would block, or an error.
  void start_frame(MessageType type, std::span<const uint8_t> payload, OutFrame* out);
  Expected<bool> write_some(OutFrame* f);
  Expected<bool> read_some(InFrame* f);

  const ByteCounters& counters() const { return counters_; }
  void reset_counters() { counters_ = {}; }
  uint64_t max_frame_bytes() const { return max_frame_; }
  void set_max_frame_bytes(uint64_t n) { max_frame_ = n; }

  // From the next frame on, seal what is sent and require sealed frames (handshake.cc).
  void enable_sealing(const LinkKeys& keys);
  bool sealed() const { return sealer_ != nullptr; }

 private:
  // Records a failed integrity check (the connection is unusable from now on), tells the
  // peer when no frame of ours is half-written, and returns the error.
  Status integrity_failure(const std::string& detail);

  Socket sock_;
  uint64_t max_frame_ = kDefaultMaxFrameBytes;
  uint64_t send_seq_ = 0, recv_seq_ = 0;
  ByteCounters counters_;
  std::unique_ptr<FrameCipher> sealer_, opener_;  // set after a keyed handshake
  OutFrame send_frame_;                           // send()'s frame (its sealed buffer is reused)
  bool writing_ = false;                          // a frame is partly written
  Status broken_;                                 // an integrity failure ended the connection
};

// Error text helpers shared by the transports.
std::string timeout_message(const std::string& peer, double timeout_s);       // "... did not answer within 5.0 s"
std::string send_timeout_message(const std::string& peer, double timeout_s);  // "... did not take the data ..."
Status unexpected_type(const std::string& peer, MessageType got, MessageType want);
// A received kError turned into a Status naming the peer (kIntegrity: "integrity check
// failed on the link to <peer>: ...").
Status peer_gave_up(const std::string& peer, std::span<const uint8_t> payload);

}  // namespace net
