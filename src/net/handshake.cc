// handshake.cc: hello exchange and the HMAC-SHA256 challenge-response (see handshake.h).
// Deliberately uses only OpenSSL's HMAC, RAND_bytes and CRYPTO_memcmp.
#include "net/handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace net {

namespace {

constexpr std::string_view kInitiatorLabel = "shardlm-v1";
constexpr std::string_view kAcceptorLabel = "shardlm-v1/acceptor";
constexpr size_t kMaxVersionString = 256;
// Until a peer has proven itself, a frame header cannot make us allocate more than this.
constexpr uint64_t kHandshakeMaxFrame = 64 * 1024;

class FrameLimitGuard {
 public:
  explicit FrameLimitGuard(Connection& c) : c_(c), saved_(c.max_frame_bytes()) {
    c.set_max_frame_bytes(std::min(saved_, kHandshakeMaxFrame));
  }
  ~FrameLimitGuard() { c_.set_max_frame_bytes(saved_); }

 private:
  Connection& c_;
  uint64_t saved_;
};

Nonce fresh_nonce() {
  Nonce n{};
  CHECK_MSG(RAND_bytes(n.data(), static_cast<int>(n.size())) == 1, "RAND_bytes failed");
  return n;
}

std::string mismatch_text(const std::string& peer) {
  return "cluster key mismatch with " + peer + ": start both with the same --cluster-key";
}

// Both ends know both hellos, so both reach the same verdict on key presence.
Status check_key_presence(const std::string& peer, const HandshakeOptions& opt, const Hello& theirs) {
  const bool mine = !opt.cluster_key.empty();
  if (mine == theirs.has_key) return {};
  const char* me = role_name(opt.role);
  if (mine) {
    return Status::error(peer + " was started without --cluster-key but this " + me +
                         " has one: start both with the same --cluster-key");
  }
  return Status::error(peer + " requires a cluster key but this " + std::string(me) +
                       " has none: start both with the same --cluster-key");
}

void send_error_quietly(Connection& c, ErrorCode code, const std::string& text, double timeout_s) {
  const auto payload = encode_error({code, text});
  (void)c.send(MessageType::kError, payload, timeout_s);
}

Expected<Hello> exchange_hellos(Connection& c, const HandshakeOptions& opt, const Nonce& mine) {
  Hello h;
  h.software_version = opt.software_version.substr(0, kMaxVersionString);
  h.role = opt.role;
  h.has_key = !opt.cluster_key.empty();
  h.nonce = mine;
  // Both ends send first, then read: a peer of another protocol version therefore still
  // receives our hello and reports the mismatch from its side too.
  RETURN_IF_ERROR(c.send(MessageType::kHello, encode_hello(h), opt.timeout_s));
  auto m = c.recv_expect(MessageType::kHello, opt.timeout_s);
  if (!m.ok()) return m.status();
  return parse_hello(m->payload, c.peer());
}

}  // namespace

const char* role_name(Role r) { return r == Role::kRoot ? "root" : "worker"; }

std::vector<uint8_t> encode_hello(const Hello& h) {
  Writer w;
  w.put_u16(h.protocol_version);
  w.put_string(h.software_version);
  w.put_u8(static_cast<uint8_t>(h.role));
  w.put_u8(h.has_key ? 1 : 0);
  w.put_bytes(h.nonce);
  return w.take();
}

Expected<Hello> parse_hello(std::span<const uint8_t> payload, std::string_view peer) {
  Reader r(payload, "hello from " + std::string(peer));
  Hello h;
  uint8_t role = 0, has_key = 0;
  RETURN_IF_ERROR(r.get_u16(&h.protocol_version));
  RETURN_IF_ERROR(r.get_string(&h.software_version, kMaxVersionString));
  RETURN_IF_ERROR(r.get_u8(&role));
  RETURN_IF_ERROR(r.get_u8(&has_key));
  std::span<const uint8_t> nonce;
  RETURN_IF_ERROR(r.get_bytes(kNonceBytes, &nonce));
  RETURN_IF_ERROR(r.finish());
  if (h.protocol_version != kProtocolVersion) {
    return Status::error(std::string(peer) + " speaks protocol " + std::to_string(h.protocol_version) +
                         ", this shardlm speaks " + std::to_string(kProtocolVersion) +
                         ": upgrade both to the same version");
  }
  if (role > 1 || has_key > 1) {
    return Status::error("hello from " + std::string(peer) + " has an invalid role or key flag");
  }
  h.role = static_cast<Role>(role);
  h.has_key = has_key != 0;
  std::memcpy(h.nonce.data(), nonce.data(), kNonceBytes);
  return h;
}

Expected<Proof> parse_proof(std::span<const uint8_t> payload, std::string_view peer) {
  Reader r(payload, "cluster key proof from " + std::string(peer));
  std::span<const uint8_t> b;
  RETURN_IF_ERROR(r.get_bytes(kProofBytes, &b));
  RETURN_IF_ERROR(r.finish());
  Proof p{};
  std::memcpy(p.data(), b.data(), kProofBytes);
  return p;
}

Proof compute_proof(std::string_view key, const Nonce& a, const Nonce& b, std::string_view label) {
  std::vector<uint8_t> msg;
  msg.reserve(2 * kNonceBytes + label.size());
  msg.insert(msg.end(), a.begin(), a.end());
  msg.insert(msg.end(), b.begin(), b.end());
  msg.insert(msg.end(), label.begin(), label.end());
  Proof p{};
  unsigned int len = 0;
  const unsigned char* out = HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), msg.data(),
                                  msg.size(), p.data(), &len);
  CHECK_MSG(out != nullptr && len == kProofBytes, "HMAC-SHA256 failed");
  return p;
}

Expected<PeerInfo> handshake_initiator(Connection& c, const HandshakeOptions& opt) {
  FrameLimitGuard limit(c);
  const Nonce mine = fresh_nonce();
  auto theirs = exchange_hellos(c, opt, mine);
  if (!theirs.ok()) return theirs.status();
  RETURN_IF_ERROR(check_key_presence(c.peer(), opt, *theirs));
  PeerInfo info{theirs->role, theirs->software_version};
  if (opt.cluster_key.empty()) return info;

  const Proof my_proof = compute_proof(opt.cluster_key, theirs->nonce, mine, kInitiatorLabel);
  RETURN_IF_ERROR(c.send(MessageType::kAuthProof, my_proof, opt.timeout_s));
  auto m = c.recv(opt.timeout_s);
  if (!m.ok()) return m.status();
  if (m->type == MessageType::kError) {
    auto e = parse_error(m->payload, c.peer());
    if (e.ok() && e->code == ErrorCode::kKeyMismatch) return Status::error(mismatch_text(c.peer()));
    return peer_gave_up(c.peer(), m->payload);
  }
  if (m->type != MessageType::kAuthProof) return unexpected_type(c.peer(), m->type, MessageType::kAuthProof);
  auto their_proof = parse_proof(m->payload, c.peer());
  if (!their_proof.ok()) return their_proof.status();
  const Proof expected = compute_proof(opt.cluster_key, mine, theirs->nonce, kAcceptorLabel);
  if (CRYPTO_memcmp(expected.data(), their_proof->data(), kProofBytes) != 0) {
    send_error_quietly(c, ErrorCode::kKeyMismatch, "cluster key mismatch", opt.timeout_s);
    return Status::error(mismatch_text(c.peer()));
  }
  RETURN_IF_ERROR(c.send(MessageType::kAuthOk, {}, opt.timeout_s));
  return info;
}

Expected<PeerInfo> handshake_acceptor(Connection& c, const HandshakeOptions& opt) {
  FrameLimitGuard limit(c);
  const Nonce mine = fresh_nonce();
  auto theirs = exchange_hellos(c, opt, mine);
  if (!theirs.ok()) return theirs.status();
  // Now we know who called: name it by role ("root 10.0.0.1:51234").
  const std::string addr = c.address();
  if (!addr.empty()) c.set_peer(std::string(role_name(theirs->role)) + " " + addr);
  RETURN_IF_ERROR(check_key_presence(c.peer(), opt, *theirs));
  PeerInfo info{theirs->role, theirs->software_version};
  if (opt.cluster_key.empty()) return info;

  auto m = c.recv_expect(MessageType::kAuthProof, opt.timeout_s);
  if (!m.ok()) return m.status();
  auto their_proof = parse_proof(m->payload, c.peer());
  if (!their_proof.ok()) return their_proof.status();
  const Proof expected = compute_proof(opt.cluster_key, mine, theirs->nonce, kInitiatorLabel);
  if (CRYPTO_memcmp(expected.data(), their_proof->data(), kProofBytes) != 0) {
    send_error_quietly(c, ErrorCode::kKeyMismatch, "cluster key mismatch", opt.timeout_s);
    return Status::error(mismatch_text(c.peer()));
  }
  const Proof my_proof = compute_proof(opt.cluster_key, theirs->nonce, mine, kAcceptorLabel);
  RETURN_IF_ERROR(c.send(MessageType::kAuthProof, my_proof, opt.timeout_s));
  auto ok = c.recv(opt.timeout_s);
  if (!ok.ok()) return ok.status();
  if (ok->type == MessageType::kError) {
    auto e = parse_error(ok->payload, c.peer());
    if (e.ok() && e->code == ErrorCode::kKeyMismatch) return Status::error(mismatch_text(c.peer()));
    return peer_gave_up(c.peer(), ok->payload);
  }
  if (ok->type != MessageType::kAuthOk) return unexpected_type(c.peer(), ok->type, MessageType::kAuthOk);
  return info;
}

}  // namespace net
