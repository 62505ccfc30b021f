// frame_fuzz.cc: libFuzzer target for the wire format. Arbitrary bytes are
//   1. decoded as a frame header directly (decode_header, every refusal path);
//   2. written into a socketpair and read back frame by frame through Connection::recv,
//      the real incremental decoder (header checks, sequence numbers, truncation), and each
//      received payload is handed to the parser of its type: hello, proof, error,
//      bootstrap, peer-hello; the raw input also goes to every parser directly;
//   3. decoded as Q8_0 / F16 / F32 activations (any bytes must decode to some floats).
// Every refusal must come with a non-empty message. Deliberately no handshake state
// machine or collectives: those need a live peer; their parsers are what a peer controls.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "net/collectives.h"
#include "net/handshake.h"
#include "net/socket.h"
#include "net/tcp_transport.h"
#include "net/wire.h"

namespace {

template <typename T>
void must_explain(const util::Expected<T>& e) {
  if (!e.ok() && e.error().empty()) __builtin_trap();
}

void parse_all(std::span<const uint8_t> p) {
  must_explain(net::parse_hello(p, "peer x"));
  must_explain(net::parse_proof(p, "peer x"));
  must_explain(net::parse_error(p, "peer x"));
  must_explain(net::parse_bootstrap(p, "peer x"));
  must_explain(net::parse_peer_hello(p, "peer x"));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 60000) return 0;  // stays inside one socket buffer
  std::span<const uint8_t> in(data, size);

  if (size >= net::kHeaderBytes) must_explain(net::decode_header(data, "peer x", 1 << 16));
  parse_all(in);

  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return 0;
  if (size > 0 && write(fds[1], data, size) != ssize_t(size)) __builtin_trap();
  close(fds[1]);
  net::Connection c(net::Socket::adopt(fds[0], "peer x"), 1 << 16);
  for (int i = 0; i < 1000; ++i) {
    auto m = c.recv(1.0);
    must_explain(m);
    if (!m.ok()) break;
    switch (m->type) {
      case net::MessageType::kHello: must_explain(net::parse_hello(m->payload, "peer x")); break;
      case net::MessageType::kAuthProof: must_explain(net::parse_proof(m->payload, "peer x")); break;
      case net::MessageType::kError: must_explain(net::parse_error(m->payload, "peer x")); break;
      case net::MessageType::kBootstrap: must_explain(net::parse_bootstrap(m->payload, "peer x")); break;
      case net::MessageType::kPeerHello: must_explain(net::parse_peer_hello(m->payload, "peer x")); break;
      default: break;
    }
  }

  for (auto t : {net::SyncType::kQ8_0, net::SyncType::kF16, net::SyncType::kF32}) {
    const size_t per32 = net::encoded_bytes(t, 32);
    const size_t n = size / per32 * 32;
    std::vector<float> out(n);
    if (n) net::decode_values(t, data, out);
  }
  return 0;
}
