// handshake.h: the first messages on every connection. Both ends send a hello at once
// (protocol version in the frame header, software version, role, whether a cluster key is
// set, a fresh random 32-byte nonce). When both have a cluster key they prove knowledge of
// it without sending it, mutually:
//   initiator -> acceptor: HMAC-SHA256(key, nonce_acceptor || nonce_initiator || "shardlm-v1")
//   acceptor checks it in constant time (CRYPTO_memcmp), then
//   acceptor -> initiator: HMAC-SHA256(key, nonce_initiator || nonce_acceptor || "shardlm-v1/acceptor")
//   initiator checks it and answers auth-ok.
// The initiator is the side that connected (the root, or the lower-rank worker in the
// mesh); the acceptor is the listening worker. A key on one side only, a wrong key or
// another protocol version fail on both sides with a message that says what to do.
// During the handshake the connection's frame limit is lowered to 64 KiB, so a stranger
// cannot make a node allocate a large buffer before it has identified itself.
// After a keyed handshake both ends derive per-direction AES-256-GCM keys from the
// cluster key, both nonces and both hellos (link_crypto.h), and every later frame is
// sealed: a stranger on the path can neither read nor alter, replay, reorder or drop
// frames unnoticed. The hello's key byte says 0 (no key), 1 (key, sealed links) or 2
// (key, links in clear: --insecure --link-encryption off); both ends must agree.
// Without a key on both sides the connection stays in clear (loopback, --insecure).
// The hellos, proofs and auth-ok themselves travel in clear; the hellos are bound into
// the keys, so a tampered hello shows as an integrity failure of the first sealed frame.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "net/socket.h"

namespace net {

enum class Role : uint8_t { kRoot = 0, kWorker = 1 };
const char* role_name(Role r);  // "root" / "worker"

constexpr size_t kNonceBytes = 32;
constexpr size_t kProofBytes = 32;
using Nonce = std::array<uint8_t, kNonceBytes>;
using Proof = std::array<uint8_t, kProofBytes>;

struct Hello {
  uint16_t protocol_version = kProtocolVersion;
  std::string software_version;
  Role role = Role::kWorker;
  bool has_key = false;
  bool clear_links = false;  // with a key: frames stay in clear (--link-encryption off)
  Nonce nonce{};
};
std::vector<uint8_t> encode_hello(const Hello& h);
Expected<Hello> parse_hello(std::span<const uint8_t> payload, std::string_view peer);
Expected<Proof> parse_proof(std::span<const uint8_t> payload, std::string_view peer);

// HMAC-SHA256(key, a || b || label).
Proof compute_proof(std::string_view key, const Nonce& a, const Nonce& b, std::string_view label);

struct HandshakeOptions {
  Role role = Role::kWorker;        // this node's role
  std::string cluster_key;          // empty: no key
  bool link_encryption = true;      // with a key: seal every later frame (link_crypto.h)
  std::string software_version = "unknown";
  double timeout_s = 5.0;           // per message
};

struct PeerInfo {
  Role role = Role::kWorker;
  std::string software_version;
  bool sealed = false;  // later frames are encrypted and authenticated
};

// Runs the handshake on a fresh connection. The acceptor renames the connection's peer
// after the hello ("peer 10.0.0.1:51234" -> "root 10.0.0.1:51234").
Expected<PeerInfo> handshake_initiator(Connection& c, const HandshakeOptions& opt);
Expected<PeerInfo> handshake_acceptor(Connection& c, const HandshakeOptions& opt);

}  // namespace net
