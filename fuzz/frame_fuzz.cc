// frame_fuzz.cc: libFuzzer target for the wire format. Arbitrary bytes are
//   1. decoded as a frame header directly (decode_header, every refusal path);
//   2. written into a socketpair and read back frame by frame through Connection::recv,
//      the real incremental decoder (header checks, sequence numbers, truncation), and each
//      received payload is handed to the parser of its type: hello, proof, error,
//      bootstrap, peer-hello; the raw input also goes to every parser directly;
//   3. decoded as Q8_0 / F16 / F32 activations (any bytes must decode to some floats);
//   4. with encryption on (the fuzzer holds the link keys, link_crypto.h): read raw by a
//      sealed Connection (every refusal must say "integrity"), and split into messages
//      that a sealed sender seals, some bytes of the stream flipped as the input says,
//      then read back: without a flip every message arrives as sent; with flips, no
//      message arrives altered and the frame holding the first flip never arrives.
// Every refusal must come with a non-empty message. Deliberately no handshake state
// machine or collectives: those need a live peer; their parsers are what a peer controls.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "net/collectives.h"
#include "net/handshake.h"
#include "net/link_crypto.h"
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

net::LinkKeys fuzz_keys(bool initiator) {
  net::LinkKey a{}, b{};
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = uint8_t(i * 7 + 1);
    b[i] = uint8_t(i * 13 + 5);
  }
  return initiator ? net::LinkKeys{a, b} : net::LinkKeys{b, a};
}

bool has_integrity(const std::string& e) { return e.find("integrity") != std::string::npos; }

// Raw bytes into a sealed receiver: never a message, every refusal an integrity failure
// (or the end of the stream).
void fuzz_sealed_raw(std::span<const uint8_t> in) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return;
  if (!in.empty() && write(fds[1], in.data(), in.size()) != ssize_t(in.size())) __builtin_trap();
  close(fds[1]);
  net::Connection c(net::Socket::adopt(fds[0], "peer x"), 1 << 16);
  c.enable_sealing(fuzz_keys(false));
  auto m = c.recv(1.0);
  if (m.ok()) __builtin_trap();  // forging a tag is not within a fuzzer's reach
  if (m.error().empty()) __builtin_trap();
  if (m.error().find("closed the connection") == std::string::npos && !has_integrity(m.error())) __builtin_trap();
}

// Input: u8 n_flips, n_flips x (u16 offset, u8 xor), then messages (u8 type selector,
// u8 length, bytes) sealed by a sender and read back after the flips.
void fuzz_sealed_stream(std::span<const uint8_t> in) {
  if (in.empty()) return;
  size_t pos = 0;
  const int n_flips = in[pos++] % 4;
  struct Flip { size_t off; uint8_t x; };
  std::vector<Flip> flips;
  for (int i = 0; i < n_flips && pos + 3 <= in.size(); ++i, pos += 3)
    if (in[pos + 2] != 0) flips.push_back({size_t(in[pos]) | size_t(in[pos + 1]) << 8, in[pos + 2]});
  std::vector<std::pair<net::MessageType, std::vector<uint8_t>>> msgs;
  while (pos + 2 <= in.size() && msgs.size() < 64) {
    const uint8_t sel = in[pos], len = in[pos + 1];
    pos += 2;
    const size_t n = std::min<size_t>(len, in.size() - pos);
    const net::MessageType t = sel % 2 ? net::app_message(sel % 16) : net::MessageType::kAllReduce;
    msgs.push_back({t, std::vector<uint8_t>(in.begin() + pos, in.begin() + pos + n)});
    pos += n;
  }
  // Seal on one socketpair, flip, replay into another.
  int a[2], b[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, a) != 0) return;
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, b) != 0) { close(a[0]); close(a[1]); return; }
  std::vector<size_t> frame_end;  // stream offset where each frame ends
  std::vector<uint8_t> stream;
  {
    net::Connection tx(net::Socket::adopt(a[0], "peer tx"), 1 << 16);
    tx.enable_sealing(fuzz_keys(true));
    for (const auto& [t, p] : msgs) {
      if (!tx.send(t, p, 1.0).ok()) __builtin_trap();
      uint8_t buf[1 << 16];
      for (;;) {
        const ssize_t r = read(a[1], buf, sizeof buf);
        if (r > 0) stream.insert(stream.end(), buf, buf + r);
        if (stream.size() >= (frame_end.empty() ? 0 : frame_end.back()) + net::kHeaderBytes + p.size() + net::kTagBytes)
          break;
        if (r <= 0) __builtin_trap();
      }
      frame_end.push_back(stream.size());
    }
  }
  close(a[1]);
  const std::vector<uint8_t> sent = stream;
  for (const Flip& f : flips)
    if (!stream.empty()) stream[f.off % stream.size()] ^= f.x;
  size_t first_flip = 0;  // two flips of one byte may cancel: compare
  while (first_flip < stream.size() && stream[first_flip] == sent[first_flip]) ++first_flip;
  if (!stream.empty() && write(b[1], stream.data(), stream.size()) != ssize_t(stream.size())) __builtin_trap();
  close(b[1]);
  net::Connection rx(net::Socket::adopt(b[0], "peer rx"), 1 << 16);
  rx.enable_sealing(fuzz_keys(false));
  for (size_t i = 0; i < msgs.size(); ++i) {
    auto m = rx.recv(1.0);
    if (!m.ok()) {
      if (m.error().empty()) __builtin_trap();
      if (first_flip == stream.size()) __builtin_trap();  // nothing flipped, yet refused
      if (frame_end[i] <= first_flip) __builtin_trap();   // refused before the first flip
      return;
    }
    // Delivered: exactly what was sent, and from before the first flip.
    if (m->type != msgs[i].first || m->payload != msgs[i].second) __builtin_trap();
    if (frame_end[i] > first_flip) __builtin_trap();
  }
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

  fuzz_sealed_raw(in);
  fuzz_sealed_stream(in);

  for (auto t : {net::SyncType::kQ8_0, net::SyncType::kF16, net::SyncType::kF32}) {
    const size_t per32 = net::encoded_bytes(t, 32);
    const size_t n = size / per32 * 32;
    std::vector<float> out(n);
    if (n) net::decode_values(t, data, out);
  }
  return 0;
}
