// handshake.cc: hello exchange and the HMAC-SHA256 challenge-response (see handshake.h).
// Deliberately uses only OpenSSL's HMAC, RAND_bytes and CRYPTO_memcmp (and link_crypto.h).
#include "net/handshake.h"

#include "net/link_crypto.h"

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
  return "cluster key mismatch with " + peer +
         " (its proof of the key failed the integrity check): start both with the same --cluster-key";
}

// Both ends know both hellos, so both reach the same verdict on key presence.
Status check_key_presence(const std::string& peer, const HandshakeOptions& opt, const Hello& theirs) {
  const bool mine = !opt.cluster_key.empty();
  const char* me = role_name(opt.role);
  if (mine && theirs.has_key) {
    const bool my_clear = !opt.link_encryption;
    if (my_clear == theirs.clear_links) return {};
    if (theirs.clear_links)
      return Status::error(peer + " runs with --link-encryption off but this " + me +
                           " encrypts its links: start both the same way", util::Status::Code::kRefused);
    return Status::error(peer + " encrypts its links but this " + std::string(me) +
                         " runs with --link-encryption off: start both the same way", util::Status::Code::kRefused);
  }
  if (mine == theirs.has_key) return {};
  if (mine) {
    return Status::error(peer + " was started without --cluster-key but this " + me +
                         " has one: start both with the same --cluster-key", util::Status::Code::kRefused);
  }
  return Status::error(peer + " requires a cluster key but this " + std::string(me) +
                       " has none: start both with the same --cluster-key", util::Status::Code::kRefused);
}

void send_error_quietly(Connection& c, ErrorCode code, const std::string& text, double timeout_s) {
  const auto payload = encode_error({code, text});
  (void)c.send(MessageType::kError, payload, timeout_s);
}

// Both hellos as sent (their bytes go into the link keys) and the peer's, parsed.
struct Hellos {
  std::vector<uint8_t> mine_bytes, theirs_bytes;
  Hello theirs;
};

Expected<Hellos> exchange_hellos(Connection& c, const HandshakeOptions& opt, const Nonce& mine) {
  Hello h;
  h.software_version = opt.software_version.substr(0, kMaxVersionString);
  h.role = opt.role;
  h.has_key = !opt.cluster_key.empty();
  h.clear_links = h.has_key && !opt.link_encryption;
  h.nonce = mine;
  Hellos out;
  out.mine_bytes = encode_hello(h);
  // Both ends send first, then read: a peer of another protocol version therefore still
  // receives our hello and reports the mismatch from its side too.
  RETURN_IF_ERROR(c.send(MessageType::kHello, out.mine_bytes, opt.timeout_s));
  auto m = c.recv_expect(MessageType::kHello, opt.timeout_s);
  if (!m.ok()) return m.status();
  auto theirs = parse_hello(m->payload, c.peer());
  if (!theirs.ok()) return theirs.status();
  out.theirs = std::move(*theirs);
  out.theirs_bytes = std::move(m->payload);
  return out;
}

// After a successful keyed handshake: seal every later frame (unless both said clear).
bool start_sealing(Connection& c, const HandshakeOptions& opt, const Hellos& h, const Nonce& mine, bool initiator) {
  if (!opt.link_encryption) return false;
  const Nonce& ni = initiator ? mine : h.theirs.nonce;
  const Nonce& na = initiator ? h.theirs.nonce : mine;
  const auto& hi = initiator ? h.mine_bytes : h.theirs_bytes;
  const auto& ha = initiator ? h.theirs_bytes : h.mine_bytes;
  LinkKeys k = derive_link_keys(opt.cluster_key, ni, na, hi, ha, initiator);
  c.enable_sealing(k);
  OPENSSL_cleanse(&k, sizeof k);
  return true;
}

}  // namespace

const char* role_name(Role r) { return r == Role::kRoot ? "root" : "worker"; }

std::vector<uint8_t> encode_hello(const Hello& h) {
  Writer w;
  w.put_u16(h.protocol_version);
  w.put_string(h.software_version);
  w.put_u8(static_cast<uint8_t>(h.role));
  w.put_u8(h.has_key ? (h.clear_links ? 2 : 1) : 0);
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
                         ": upgrade both to the same version", util::Status::Code::kRefused);
  }
  if (role > 1 || has_key > 2) {
    return Status::error("hello from " + std::string(peer) + " has an invalid role or key flag", util::Status::Code::kProtocol);
  }
  h.role = static_cast<Role>(role);
  h.has_key = has_key != 0;
  h.clear_links = has_key == 2;
  std::memcpy(h.nonce.data(), nonce.data(), kNonceBytes);
  return h;
}

// A proof that does not parse shows no key: the peer is refused as for a wrong one.
Expected<Proof> parse_proof(std::span<const uint8_t> payload, std::string_view peer) {
  Reader r(payload, "cluster key proof from " + std::string(peer));
  std::span<const uint8_t> b;
  Status st = r.get_bytes(kProofBytes, &b);
  if (st.ok()) st = r.finish();
  if (!st.ok()) return Status::error(st.message(), Status::Code::kRefused);
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

namespace {

// The peer's answer to our proof of the key, of type want (Connection::recv_expect), where
// a kError saying that proof was wrong reads as the key mismatch it is.
Expected<Message> recv_after_proof(Connection& c, MessageType want, double timeout_s) {
  auto m = c.recv(timeout_s);
  if (!m.ok()) return m;
  if (m->type == MessageType::kError) {
    auto e = parse_error(m->payload, c.peer());
    if (e.ok() && e->code == ErrorCode::kKeyMismatch)
      return Status::error(mismatch_text(c.peer()), util::Status::Code::kRefused);
    return peer_gave_up(c.peer(), m->payload);
  }
  if (m->type != want) return unexpected_type(c.peer(), m->type, want);
  return m;
}

// The peer's proof of the key (m) against the one expected; a wrong one is refused, and the
// peer told so (kKeyMismatch).
Status check_proof(Connection& c, const HandshakeOptions& opt, const Message& m, const Proof& expected) {
  auto their_proof = parse_proof(m.payload, c.peer());
  if (!their_proof.ok()) return their_proof.status();
  if (CRYPTO_memcmp(expected.data(), their_proof->data(), kProofBytes) != 0) {
    send_error_quietly(c, ErrorCode::kKeyMismatch, "cluster key mismatch", opt.timeout_s);
    return Status::error(mismatch_text(c.peer()), util::Status::Code::kRefused);
  }
  return util::ok_status();
}

// Both sides in one place: the hellos, the acceptor naming its caller, the key check, then
// the proofs (the initiator proves first; the acceptor checks it, proves, and waits for the
// initiator's kAuthOk), and sealing.
Expected<PeerInfo> handshake(Connection& c, const HandshakeOptions& opt, bool initiator) {
  FrameLimitGuard limit(c);
  const Nonce mine = fresh_nonce();
  auto hellos = exchange_hellos(c, opt, mine);
  if (!hellos.ok()) return hellos.status();
  const Hello& theirs = hellos->theirs;
  // The acceptor now knows who called: name it by role ("root 10.0.0.1:51234").
  if (!initiator)
    if (const std::string addr = c.address(); !addr.empty()) c.set_peer(std::string(role_name(theirs.role)) + " " + addr);
  RETURN_IF_ERROR(check_key_presence(c.peer(), opt, theirs));
  PeerInfo info{theirs.role, theirs.software_version};
  if (opt.cluster_key.empty()) return info;

  const std::string_view my_label = initiator ? kInitiatorLabel : kAcceptorLabel;
  const std::string_view their_label = initiator ? kAcceptorLabel : kInitiatorLabel;
  const Proof my_proof = compute_proof(opt.cluster_key, theirs.nonce, mine, my_label);
  const Proof their_proof = compute_proof(opt.cluster_key, mine, theirs.nonce, their_label);
  if (initiator) {
    RETURN_IF_ERROR(c.send(MessageType::kAuthProof, my_proof, opt.timeout_s));
    auto m = recv_after_proof(c, MessageType::kAuthProof, opt.timeout_s);
    if (!m.ok()) return m.status();
    RETURN_IF_ERROR(check_proof(c, opt, *m, their_proof));
    RETURN_IF_ERROR(c.send(MessageType::kAuthOk, {}, opt.timeout_s));
  } else {
    auto m = c.recv_expect(MessageType::kAuthProof, opt.timeout_s);
    if (!m.ok()) return m.status();
    RETURN_IF_ERROR(check_proof(c, opt, *m, their_proof));
    RETURN_IF_ERROR(c.send(MessageType::kAuthProof, my_proof, opt.timeout_s));
    auto ok = recv_after_proof(c, MessageType::kAuthOk, opt.timeout_s);
    if (!ok.ok()) return ok.status();
  }
  info.sealed = start_sealing(c, opt, *hellos, mine, initiator);
  return info;
}

}  // namespace

Expected<PeerInfo> handshake_initiator(Connection& c, const HandshakeOptions& opt) { return handshake(c, opt, true); }

Expected<PeerInfo> handshake_acceptor(Connection& c, const HandshakeOptions& opt) { return handshake(c, opt, false); }

}  // namespace net
