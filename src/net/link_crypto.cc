// link_crypto.cc: HKDF-SHA256 key derivation and AES-256-GCM frame sealing (link_crypto.h).
// Deliberately only OpenSSL's HMAC, SHA-256 and EVP AES-256-GCM; no I/O.
#include "net/link_crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "util/check.h"

namespace net {

namespace {

constexpr std::string_view kLabelToAcceptor = "shardlm-v5 key initiator->acceptor";
constexpr std::string_view kLabelToInitiator = "shardlm-v5 key acceptor->initiator";

void hmac_sha256(std::span<const uint8_t> key, std::span<const uint8_t> msg, uint8_t out[32]) {
  unsigned int len = 0;
  const unsigned char* r = HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), msg.data(), msg.size(),
                                out, &len);
  CHECK_MSG(r != nullptr && len == 32, "HMAC-SHA256 failed");
}

LinkKey expand_key(std::span<const uint8_t> ikm, std::span<const uint8_t> salt, std::string_view label,
                   const uint8_t transcript[32]) {
  std::vector<uint8_t> info(label.begin(), label.end());
  info.insert(info.end(), transcript, transcript + 32);
  LinkKey k{};
  hkdf_sha256(ikm, salt, info, k);
  return k;
}

}  // namespace

void hkdf_sha256(std::span<const uint8_t> ikm, std::span<const uint8_t> salt, std::span<const uint8_t> info,
                 std::span<uint8_t> out) {
  CHECK(out.size() <= 255 * 32);
  uint8_t zeros[32] = {0};
  uint8_t prk[32];
  hmac_sha256(salt.empty() ? std::span<const uint8_t>(zeros, 32) : salt, ikm, prk);  // extract
  std::vector<uint8_t> msg;
  uint8_t t[32];
  size_t done = 0;
  for (uint8_t i = 1; done < out.size(); ++i) {  // expand: T(i) = HMAC(prk, T(i-1) || info || i)
    msg.clear();
    if (i > 1) msg.insert(msg.end(), t, t + 32);
    msg.insert(msg.end(), info.begin(), info.end());
    msg.push_back(i);
    hmac_sha256(prk, msg, t);
    const size_t n = std::min<size_t>(32, out.size() - done);
    std::memcpy(out.data() + done, t, n);
    done += n;
  }
  OPENSSL_cleanse(prk, sizeof prk);
  OPENSSL_cleanse(t, sizeof t);
}

LinkKeys derive_link_keys(std::string_view cluster_key, std::span<const uint8_t> nonce_initiator,
                          std::span<const uint8_t> nonce_acceptor, std::span<const uint8_t> hello_initiator,
                          std::span<const uint8_t> hello_acceptor, bool initiator) {
  std::vector<uint8_t> salt(nonce_initiator.begin(), nonce_initiator.end());
  salt.insert(salt.end(), nonce_acceptor.begin(), nonce_acceptor.end());
  std::vector<uint8_t> hellos(hello_initiator.begin(), hello_initiator.end());
  hellos.insert(hellos.end(), hello_acceptor.begin(), hello_acceptor.end());
  uint8_t transcript[32];
  SHA256(hellos.data(), hellos.size(), transcript);
  const std::span<const uint8_t> ikm(reinterpret_cast<const uint8_t*>(cluster_key.data()), cluster_key.size());
  const LinkKey to_acceptor = expand_key(ikm, salt, kLabelToAcceptor, transcript);
  const LinkKey to_initiator = expand_key(ikm, salt, kLabelToInitiator, transcript);
  LinkKeys k;
  k.send = initiator ? to_acceptor : to_initiator;
  k.recv = initiator ? to_initiator : to_acceptor;
  return k;
}

std::array<uint8_t, kGcmNonceBytes> gcm_nonce(uint64_t seq) {
  std::array<uint8_t, kGcmNonceBytes> n{};
  for (int i = 0; i < 8; ++i) n[4 + i] = static_cast<uint8_t>(seq >> (8 * i));
  return n;
}

struct FrameCipher::Ctx {
  EVP_CIPHER_CTX* ctx = nullptr;
  int enc = 1;
};

FrameCipher::FrameCipher(const LinkKey& key, Mode mode) : ctx_(std::make_unique<Ctx>()) {
  ctx_->ctx = EVP_CIPHER_CTX_new();
  ctx_->enc = mode == Mode::kSeal ? 1 : 0;
  CHECK_MSG(ctx_->ctx != nullptr, "EVP_CIPHER_CTX_new failed");
  CHECK_MSG(EVP_CipherInit_ex(ctx_->ctx, EVP_aes_256_gcm(), nullptr, key.data(), nullptr, ctx_->enc) == 1,
            "AES-256-GCM is not available in this OpenSSL");
}

FrameCipher::~FrameCipher() {
  if (ctx_ && ctx_->ctx) EVP_CIPHER_CTX_free(ctx_->ctx);
}

namespace {

// Feeds the header as associated data and `n` bytes from in to out, in int-sized pieces.
void run_gcm(EVP_CIPHER_CTX* c, int enc, uint64_t seq, const uint8_t* header, const uint8_t* in, uint8_t* out,
             size_t n) {
  const auto iv = gcm_nonce(seq);
  CHECK(EVP_CipherInit_ex(c, nullptr, nullptr, nullptr, iv.data(), enc) == 1);
  int len = 0;
  CHECK(EVP_CipherUpdate(c, nullptr, &len, header, static_cast<int>(kHeaderBytes)) == 1);
  constexpr size_t kPiece = size_t(1) << 30;
  for (size_t off = 0; off < n; off += kPiece) {
    const int m = static_cast<int>(std::min(kPiece, n - off));
    CHECK(EVP_CipherUpdate(c, out + off, &len, in + off, m) == 1 && len == m);
  }
}

}  // namespace

void FrameCipher::seal(uint64_t seq, const uint8_t header[kHeaderBytes], std::span<const uint8_t> in, uint8_t* out,
                       uint8_t tag[kTagBytes]) {
  CHECK(ctx_->enc == 1);
  run_gcm(ctx_->ctx, 1, seq, header, in.data(), out, in.size());
  int len = 0;
  uint8_t dummy[16];
  CHECK(EVP_CipherFinal_ex(ctx_->ctx, dummy, &len) == 1 && len == 0);
  CHECK(EVP_CIPHER_CTX_ctrl(ctx_->ctx, EVP_CTRL_GCM_GET_TAG, int(kTagBytes), tag) == 1);
}

bool FrameCipher::open(uint64_t seq, const uint8_t header[kHeaderBytes], std::span<uint8_t> data,
                       const uint8_t tag[kTagBytes]) {
  CHECK(ctx_->enc == 0);
  run_gcm(ctx_->ctx, 0, seq, header, data.data(), data.data(), data.size());
  CHECK(EVP_CIPHER_CTX_ctrl(ctx_->ctx, EVP_CTRL_GCM_SET_TAG, int(kTagBytes), const_cast<uint8_t*>(tag)) == 1);
  int len = 0;
  uint8_t dummy[16];
  return EVP_CipherFinal_ex(ctx_->ctx, dummy, &len) == 1;
}

}  // namespace net
