// tcp_transport.h: a full mesh of TCP connections among N nodes. Rank 0 is the root;
// workers are ranks 1..N-1 in the order the root lists them. Bootstrap:
//   1. the root connects to every worker and runs the handshake (handshake.h);
//   2. it sends each worker a bootstrap message: session id, the worker's rank, N and
//      every worker's address ("host:port" as the root reached it);
//   3. each worker connects to the workers of higher rank (handshake + peer-hello with the
//      session id and its rank) and accepts those of lower rank on its listening port;
//   4. each worker reports ready (or the error it met) to the root.
// Worker addresses must therefore be reachable from the other workers, not only from the
// root. exchange() drives all sockets from one poll() so all-to-all patterns cannot
// deadlock on full socket buffers.
// Deliberately no reconnection: a lost peer ends the session with a clear error.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "net/handshake.h"
#include "net/transport.h"

namespace net {

struct TcpOptions {
  std::string cluster_key;                 // empty: none (must match the workers')
  bool link_encryption = true;             // with a key: seal every frame (handshake.h); must match
  std::string software_version = "unknown";
  double connect_timeout_s = 5.0;
  double handshake_timeout_s = 5.0;
  double setup_timeout_s = 30.0;           // mesh formation, from bootstrap to ready
  uint64_t max_frame_bytes = kDefaultMaxFrameBytes;
  // exchange() and recv() busy-poll this long (yielding the core between polls) before
  // they sleep in poll(); the environment variable SHARDLM_SPIN_US overrides it.
  double spin_us = 100;
};

// Bootstrap messages (exposed for the fuzzer).
constexpr size_t kMaxAddress = 512;
constexpr uint32_t kMaxNodes = 4096;
struct Bootstrap {
  uint64_t session = 0;
  uint32_t rank = 0;
  std::vector<std::string> addresses;  // by rank; [0] = "" (the root does not listen)
};
std::vector<uint8_t> encode_bootstrap(const Bootstrap& b);
Expected<Bootstrap> parse_bootstrap(std::span<const uint8_t> p, const std::string& peer);
struct PeerHello {
  uint64_t session = 0;
  uint32_t rank = 0;
};
std::vector<uint8_t> encode_peer_hello(uint64_t session, uint32_t rank);
Expected<PeerHello> parse_peer_hello(std::span<const uint8_t> p, const std::string& peer);

class TcpTransport final : public Transport {
 public:
  // Root side: `workers` are "host:port" strings; worker i gets rank i + 1. On failure
  // *failed (if given) is the index in `workers` of the one that failed.
  static Expected<std::unique_ptr<TcpTransport>> connect_root(const std::vector<std::string>& workers,
                                                              const TcpOptions& opt, int* failed = nullptr);
  // Worker side: waits up to wait_for_root_s for a root on `listener`, then joins the mesh.
  static Expected<std::unique_ptr<TcpTransport>> accept_worker(Listener& listener, const TcpOptions& opt,
                                                               double wait_for_root_s);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(links_.size()); }
  std::string peer_name(int peer) const override;
  Status send(int peer, MessageType type, std::span<const uint8_t> payload, double timeout_s) override;
  Expected<Message> recv(int peer, double timeout_s) override;
  Status exchange(std::span<const SendItem> sends, std::span<const RecvItem> recvs, double timeout_s) override;
  ByteCounters counters() const override;
  void reset_counters() override;

  uint64_t session_id() const { return session_; }

 private:
  TcpTransport() = default;
  Connection& link(int peer);
  int rank_ = 0;
  uint64_t session_ = 0;
  std::vector<Connection> links_;  // links_[rank_] is unused
  double spin_s_ = 0;
  std::vector<OutFrame> outs_;     // exchange scratch
  std::vector<InFrame> ins_;
};

}  // namespace net
