// link_test.cc: link security (issue 18): HKDF's RFC 5869 vectors, per-direction keys,
// every bit of a sealed frame checked, and over loopback through a frame-aware proxy: a
// flipped byte in either direction, every header field, replayed / renumbered / reordered
// / dropped / cross-connection / clear frames each end the session with an "integrity"
// error naming the peer, the payload never shows on the wire when keyed; the handshake's
// --link-encryption agreement; key files, key sources and the worker's refusal to listen
// beyond loopback without a key. (All-reduce over sealed links: net_test.cc.)
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "net/cluster_key.h"
#include "net/handshake.h"
#include "net/link_crypto.h"
#include "net/tcp_transport.h"
#include "net/wire.h"
#include "net_loopback.h"

namespace net {
namespace {

std::vector<uint8_t> from_hex(std::string_view h) {
  std::vector<uint8_t> b;
  for (size_t i = 0; i + 1 < h.size(); i += 2) b.push_back(uint8_t(std::stoi(std::string(h.substr(i, 2)), nullptr, 16)));
  return b;
}

TEST(LinkCrypto, HkdfMatchesRfc5869) {
  const std::vector<uint8_t> ikm(22, 0x0b);
  std::vector<uint8_t> okm(42);
  hkdf_sha256(ikm, from_hex("000102030405060708090a0b0c"), from_hex("f0f1f2f3f4f5f6f7f8f9"), okm);  // test case 1
  EXPECT_EQ(okm, from_hex("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"));
  hkdf_sha256(ikm, {}, {}, okm);  // test case 3: no salt, no info
  EXPECT_EQ(okm, from_hex("8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"));
}

TEST(LinkCrypto, KeysPerDirectionConnectionAndTranscript) {
  Nonce ni{}, na{};
  ni[0] = 1;
  na[0] = 2;
  const std::vector<uint8_t> hi = {1, 2, 3}, ha = {4, 5};
  const LinkKeys i = derive_link_keys("k", ni, na, hi, ha, true);
  const LinkKeys a = derive_link_keys("k", ni, na, hi, ha, false);
  EXPECT_EQ(i.send, a.recv);
  EXPECT_EQ(i.recv, a.send);
  EXPECT_NE(i.send, i.recv);
  Nonce other = na;
  other[31] ^= 1;
  EXPECT_NE(derive_link_keys("k", ni, other, hi, ha, true).send, i.send);      // another connection
  EXPECT_NE(derive_link_keys("k2", ni, na, hi, ha, true).send, i.send);        // another key
  EXPECT_NE(derive_link_keys("k", ni, na, hi, std::vector<uint8_t>{4, 6}, true).send, i.send);  // altered hello
  EXPECT_EQ(gcm_nonce(0x0102030405060708ull),
            (std::array<uint8_t, 12>{0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1}));
}

TEST(LinkCrypto, EveryBitOfHeaderPayloadAndTagIsChecked) {
  LinkKey k{};
  for (size_t i = 0; i < k.size(); ++i) k[i] = uint8_t(i * 11 + 1);
  FrameCipher seal(k, FrameCipher::Mode::kSeal), open(k, FrameCipher::Mode::kOpen);
  std::vector<uint8_t> msg(77);
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = uint8_t(i * 13);
  uint8_t header[kHeaderBytes];
  encode_header({kProtocolVersion, app_message(5), kFlagSealed, 9, msg.size() + kTagBytes}, header);
  std::vector<uint8_t> ct(msg.size());
  uint8_t tag[kTagBytes];
  seal.seal(9, header, msg, ct.data(), tag);
  EXPECT_NE(ct, msg);
  auto opens = [&](uint64_t seq, const uint8_t* h, std::vector<uint8_t> c, const uint8_t* t) {
    const bool ok = open.open(seq, h, c, t);
    return ok && c == msg;
  };
  EXPECT_TRUE(opens(9, header, ct, tag));
  EXPECT_FALSE(opens(10, header, ct, tag));  // another sequence number: replayed or reordered
  for (size_t bit = 0; bit < kHeaderBytes * 8; ++bit) {
    uint8_t h[kHeaderBytes];
    std::memcpy(h, header, sizeof h);
    h[bit / 8] ^= uint8_t(1u << (bit % 8));
    ASSERT_FALSE(opens(9, h, ct, tag)) << "header bit " << bit;
  }
  for (size_t bit = 0; bit < ct.size() * 8; ++bit) {
    auto c = ct;
    c[bit / 8] ^= uint8_t(1u << (bit % 8));
    ASSERT_FALSE(opens(9, header, c, tag)) << "payload bit " << bit;
  }
  for (size_t bit = 0; bit < kTagBytes * 8; ++bit) {
    uint8_t t[kTagBytes];
    std::memcpy(t, tag, sizeof t);
    t[bit / 8] ^= uint8_t(1u << (bit % 8));
    ASSERT_FALSE(opens(9, header, ct, t)) << "tag bit " << bit;
  }
  std::vector<uint8_t> shorter(ct.begin(), ct.end() - 1);  // a truncated payload
  EXPECT_FALSE(open.open(9, header, shorter, tag));
  LinkKey k2 = k;
  k2[0] ^= 1;
  FrameCipher open2(k2, FrameCipher::Mode::kOpen);
  auto c = ct;
  EXPECT_FALSE(open2.open(9, header, c, tag));  // another connection's (or direction's) key
}

// A frame-aware TCP proxy on loopback in front of `target`: it accepts one client,
// connects to the target and forwards whole frames both ways, handing each to `edit`,
// which returns what to forward instead (nothing: dropped; twice: replayed). It records
// the bytes it forwarded each way. Either side closing ends both directions.
class FrameProxy {
 public:
  enum Dir { kToServer = 0, kToClient = 1 };
  using Edit = std::function<std::vector<std::vector<uint8_t>>(Dir, std::vector<uint8_t>)>;

  FrameProxy(const std::string& target, Edit edit) : edit_(std::move(edit)) {
    auto l = Listener::listen("127.0.0.1", 0);
    CHECK(l.ok());
    listener_ = std::move(*l);
    addr = "127.0.0.1:" + std::to_string(listener_.port());
    thread_ = std::thread([this, target] { run(target); });
  }
  ~FrameProxy() { finish(); }
  // Waits until both directions ended; the bytes forwarded each way.
  std::array<std::vector<uint8_t>, 2> finish() {
    if (thread_.joinable()) thread_.join();
    return wire_;
  }
  std::string addr;

 private:
  static bool read_exact(int fd, size_t n, std::vector<uint8_t>* out) {
    const size_t start = out->size();
    out->resize(start + n);
    size_t got = 0;
    while (got < n) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 10000) <= 0) return false;
      const ssize_t r = ::recv(fd, out->data() + start + got, n - got, 0);
      if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (r <= 0) return false;
      got += size_t(r);
    }
    return true;
  }
  static bool write_all(int fd, const std::vector<uint8_t>& b) {
    size_t done = 0;
    while (done < b.size()) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, 10000) <= 0) return false;
      const ssize_t w = ::send(fd, b.data() + done, b.size() - done, MSG_NOSIGNAL);
      if (w < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (w <= 0) return false;
      done += size_t(w);
    }
    return true;
  }
  void pump(int from, int to, Dir d) {
    for (;;) {
      std::vector<uint8_t> f;
      if (!read_exact(from, kHeaderBytes, &f)) break;
      uint64_t len = 0;
      for (int i = 0; i < 8; ++i) len |= uint64_t(f[20 + i]) << (8 * i);
      if (len > (uint64_t{1} << 26) || !read_exact(from, size_t(len), &f)) break;
      std::vector<std::vector<uint8_t>> out;
      {
        std::lock_guard<std::mutex> lk(mu_);
        out = edit_(d, std::move(f));
      }
      bool ok = true;
      for (const auto& o : out) {
        if (!(ok = write_all(to, o))) break;
        std::lock_guard<std::mutex> lk(mu_);
        wire_[d].insert(wire_[d].end(), o.begin(), o.end());
      }
      if (!ok) break;
    }
    ::shutdown(from, SHUT_RDWR);
    ::shutdown(to, SHUT_RDWR);
  }
  void run(const std::string& target) {
    auto c = listener_.accept(10.0);
    if (!c.ok()) return;
    auto s = connect_tcp(parse_host_port(target).value(), 5.0, "worker");
    if (!s.ok()) return;
    std::thread up([&] { pump(c->fd(), s->fd(), kToServer); });
    pump(s->fd(), c->fd(), kToClient);
    up.join();
  }

  Edit edit_;
  Listener listener_;
  std::thread thread_;
  std::mutex mu_;
  std::array<std::vector<uint8_t>, 2> wire_;
};

bool is_sealed(const std::vector<uint8_t>& f) { return (f[8] & kFlagSealed) != 0; }
void set_seq(std::vector<uint8_t>* f, uint64_t seq) {
  for (int i = 0; i < 8; ++i) (*f)[12 + i] = uint8_t(seq >> (8 * i));
}

// An edit that calls `change` on the first sealed frame going `dir` and forwards the rest.
FrameProxy::Edit on_first_sealed(FrameProxy::Dir dir,
                                 std::function<std::vector<std::vector<uint8_t>>(std::vector<uint8_t>)> change) {
  auto done = std::make_shared<bool>(false);
  return [=](FrameProxy::Dir d, std::vector<uint8_t> f) -> std::vector<std::vector<uint8_t>> {
    if (d != dir || *done || !is_sealed(f)) return {std::move(f)};
    *done = true;
    return change(std::move(f));
  };
}
FrameProxy::Edit pass_through() {
  return [](FrameProxy::Dir, std::vector<uint8_t> f) { return std::vector<std::vector<uint8_t>>{std::move(f)}; };
}

// A root (initiator) connected to a worker (acceptor, listening on `server`) through a
// FrameProxy, both handshaken with `key`; worker_fn runs on the worker's thread. Returns
// the bytes the proxy forwarded (to the worker, to the root).
std::array<std::vector<uint8_t>, 2> through_proxy(Loopback& server, const std::string& key, FrameProxy::Edit edit,
                                                  const std::function<void(Connection&)>& worker_fn,
                                                  const std::function<void(Connection&, const std::string&)>& root_fn) {
  FrameProxy proxy(server.addr, std::move(edit));
  std::thread worker([&] {
    Connection c = server.accept();
    HandshakeOptions o;
    o.role = Role::kWorker;
    o.cluster_key = key;
    auto info = handshake_acceptor(c, o);
    EXPECT_TRUE(info.ok()) << info.error();
    if (!info.ok()) return;
    EXPECT_EQ(info->sealed, !key.empty());
    EXPECT_EQ(c.sealed(), !key.empty());
    worker_fn(c);
  });
  {
    auto s = connect_tcp(parse_host_port(proxy.addr).value(), 2.0, "worker");
    CHECK(s.ok());
    Connection c(std::move(*s));
    HandshakeOptions o;
    o.role = Role::kRoot;
    o.cluster_key = key;
    auto info = handshake_initiator(c, o);
    EXPECT_TRUE(info.ok()) << info.error();
    if (info.ok()) root_fn(c, proxy.addr);
  }
  worker.join();
  return proxy.finish();
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (auto& v : b) v = uint8_t(rng());
  return b;
}

bool contains(const std::vector<uint8_t>& hay, std::span<const uint8_t> needle) {
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end()) != hay.end();
}

constexpr const char* kTestKey = "0123456789abcdef0123456789abcdef";

TEST(LinkSecurity, SealedFramesRoundTripAndHideTheirPayload) {
  const auto ask = pattern(4096, 1), answer = pattern(3000, 2);
  for (const std::string key : {"", kTestKey}) {
    SCOPED_TRACE("key '" + key + "'");
    Loopback server;
    auto wire = through_proxy(
        server, key, pass_through(),
        [&](Connection& c) {
          auto m = c.recv_expect(app_message(5), 5.0);
          ASSERT_TRUE(m.ok()) << m.error();
          EXPECT_EQ(m->payload, ask);
          auto e = c.recv_expect(app_message(7), 5.0);  // an empty message seals too
          ASSERT_TRUE(e.ok()) << e.error();
          EXPECT_TRUE(e->payload.empty());
          ASSERT_TRUE(c.send(app_message(6), answer, 5.0).ok());
        },
        [&](Connection& c, const std::string&) {
          ASSERT_TRUE(c.send(app_message(5), ask, 5.0).ok());
          ASSERT_TRUE(c.send(app_message(7), {}, 5.0).ok());
          auto m = c.recv_expect(app_message(6), 5.0);
          ASSERT_TRUE(m.ok()) << m.error();
          EXPECT_EQ(m->payload, answer);
        });
    // In clear every 16-byte slice of the payload shows on the wire; sealed, none does.
    for (size_t off : {size_t(0), size_t(100), size_t(2048), ask.size() - 16}) {
      EXPECT_EQ(contains(wire[FrameProxy::kToServer], std::span(ask).subspan(off, 16)), key.empty()) << off;
    }
    EXPECT_EQ(contains(wire[FrameProxy::kToClient], std::span(answer).subspan(500, 16)), key.empty());
  }
}

TEST(LinkSecurity, FlippedByteEndsTheSessionNamingThePeerInEitherDirection) {
  Loopback server;
  // Root -> worker: the worker refuses the frame, and tells the root.
  through_proxy(
      server, kTestKey,
      on_first_sealed(FrameProxy::kToServer, [](std::vector<uint8_t> f) {
        f[kHeaderBytes + 10] ^= 0x20;
        return std::vector<std::vector<uint8_t>>{std::move(f)};
      }),
      [](Connection& c) {
        auto m = c.recv(5.0);
        ASSERT_FALSE(m.ok());
        EXPECT_NE(m.error().find("integrity check failed on a frame from root 127.0.0.1:"), std::string::npos)
            << m.error();
        EXPECT_NE(m.error().find("app+5 frame 3 of 116 bytes does not match its authentication tag"),
                  std::string::npos)
            << m.error();
        EXPECT_FALSE(c.send(app_message(6), {}, 1.0).ok());  // the connection stays unusable
      },
      [](Connection& c, const std::string& worker_addr) {
        ASSERT_TRUE(c.send(app_message(5), pattern(100, 3), 5.0).ok());
        auto m = c.recv_expect(app_message(6), 5.0);  // the worker's kIntegrity error
        ASSERT_FALSE(m.ok());
        EXPECT_EQ(m.error(), "integrity check failed on the link to worker " + worker_addr +
                                 ": it refused a frame from this node as altered, replayed, reordered or dropped "
                                 "on the way, and ended the session");
      });
  // Worker -> root: the root refuses the reply naming the worker, and tells it.
  through_proxy(
      server, kTestKey,
      on_first_sealed(FrameProxy::kToClient, [](std::vector<uint8_t> f) {
        f.back() ^= 1;  // the tag's last byte
        return std::vector<std::vector<uint8_t>>{std::move(f)};
      }),
      [](Connection& c) {
        ASSERT_TRUE(c.recv(5.0).ok());
        ASSERT_TRUE(c.send(app_message(6), pattern(50, 4), 5.0).ok());
        auto m = c.recv_expect(app_message(5), 5.0);  // the root's kIntegrity error
        ASSERT_FALSE(m.ok());
        EXPECT_NE(m.error().find("integrity check failed on the link to root 127.0.0.1:"), std::string::npos)
            << m.error();
      },
      [](Connection& c, const std::string& worker_addr) {
        ASSERT_TRUE(c.send(app_message(5), pattern(10, 5), 5.0).ok());
        auto m = c.recv(5.0);
        ASSERT_FALSE(m.ok());
        EXPECT_EQ(m.error().rfind("integrity check failed on a frame from worker " + worker_addr + " (app+6 frame 2", 0),
                  0u)
            << m.error();
      });
  // The same listening worker then serves a clean session.
  through_proxy(
      server, kTestKey, pass_through(),
      [](Connection& c) {
        auto m = c.recv_expect(app_message(5), 5.0);
        ASSERT_TRUE(m.ok()) << m.error();
        ASSERT_TRUE(c.send(app_message(6), m->payload, 5.0).ok());
      },
      [](Connection& c, const std::string&) {
        ASSERT_TRUE(c.send(app_message(5), pattern(64, 6), 5.0).ok());
        auto m = c.recv_expect(app_message(6), 5.0);
        ASSERT_TRUE(m.ok()) << m.error();
        EXPECT_EQ(m->payload, pattern(64, 6));
      });
}

// Tampering with the first sealed root -> worker frame; the worker's error.
std::string worker_error_after(std::function<std::vector<std::vector<uint8_t>>(std::vector<uint8_t>)> change,
                               int n_frames = 2) {
  Loopback server;
  std::string err;
  through_proxy(
      server, kTestKey, on_first_sealed(FrameProxy::kToServer, std::move(change)),
      [&](Connection& c) {
        for (int i = 0; i < n_frames + 1; ++i) {
          auto m = c.recv(3.0);
          if (!m.ok()) {
            err = m.error();
            return;
          }
          EXPECT_EQ(m->payload, pattern(200, uint32_t(10 + i))) << "frame " << i << " was delivered altered";
        }
      },
      [&](Connection& c, const std::string&) {
        for (int i = 0; i < n_frames; ++i) ASSERT_TRUE(c.send(app_message(5), pattern(200, uint32_t(10 + i)), 5.0).ok());
        (void)c.recv(3.0);  // the worker's verdict
      });
  return err;
}

TEST(LinkSecurity, EveryHeaderFieldIsAuthenticated) {
  // Magic, version, type, flags, sequence and the length's top byte (a huge length): each
  // altered byte is refused as an integrity failure. (A length made slightly longer would
  // wait for bytes that are not coming: a timeout, or the next frame's integrity failure.)
  std::vector<size_t> offsets;
  for (size_t i = 0; i < 20; ++i) offsets.push_back(i);
  offsets.push_back(27);
  for (size_t off : offsets) {
    const std::string e = worker_error_after([off](std::vector<uint8_t> f) {
      f[off] ^= off == 27 ? 0x80 : 0x01;
      return std::vector<std::vector<uint8_t>>{std::move(f)};
    });
    EXPECT_EQ(e.rfind("integrity check failed on a frame from root 127.0.0.1:", 0), 0u) << "offset " << off << ": " << e;
  }
  const std::string shorter = worker_error_after([](std::vector<uint8_t> f) {
    f[20] -= 1;  // one byte shorter: the tag no longer matches
    return std::vector<std::vector<uint8_t>>{std::move(f)};
  });
  EXPECT_NE(shorter.find("does not match its authentication tag"), std::string::npos) << shorter;
}

TEST(LinkSecurity, ReplayedReorderedAndDroppedFramesAreDetected) {
  using Frames = std::vector<std::vector<uint8_t>>;
  const std::string replay = worker_error_after([](std::vector<uint8_t> f) { return Frames{f, f}; });
  EXPECT_NE(replay.find("integrity check failed on a frame from root"), std::string::npos) << replay;
  EXPECT_NE(replay.find("frame number 3 where 4 was expected"), std::string::npos) << replay;
  // A replay renumbered to fit: its header is authenticated with the frame.
  const std::string renumbered = worker_error_after([](std::vector<uint8_t> f) {
    auto again = f;
    set_seq(&again, 4);
    return Frames{f, again};
  });
  EXPECT_NE(renumbered.find("app+5 frame 4 of 216 bytes does not match its authentication tag"), std::string::npos)
      << renumbered;
  const std::string dropped = worker_error_after([](std::vector<uint8_t>) { return Frames{}; });
  EXPECT_NE(dropped.find("frame number 4 where 3 was expected"), std::string::npos) << dropped;
  // Reordered: hold the first sealed frame back and send it after the second.
  auto held = std::make_shared<std::vector<uint8_t>>();
  auto n_sealed = std::make_shared<int>(0);
  std::string reordered;
  {
    Loopback server;
    through_proxy(
        server, kTestKey,
        [=](FrameProxy::Dir d, std::vector<uint8_t> f) -> Frames {
          if (d != FrameProxy::kToServer || !is_sealed(f)) return {std::move(f)};
          if ((*n_sealed)++ == 0) {
            *held = std::move(f);
            return {};
          }
          return {std::move(f), *held};
        },
        [&](Connection& c) {
          auto m = c.recv(3.0);
          reordered = m.ok() ? "delivered" : m.error();
        },
        [&](Connection& c, const std::string&) {
          for (int i = 0; i < 2; ++i) ASSERT_TRUE(c.send(app_message(5), pattern(200, uint32_t(10 + i)), 5.0).ok());
          (void)c.recv(3.0);
        });
  }
  EXPECT_NE(reordered.find("frame number 4 where 3 was expected"), std::string::npos) << reordered;
  // A frame recorded on one connection and played into another at the same position:
  // the other connection's keys differ.
  std::vector<uint8_t> recorded;
  {
    Loopback server;
    through_proxy(
        server, kTestKey,
        on_first_sealed(FrameProxy::kToServer, [&](std::vector<uint8_t> f) {
          recorded = f;
          return Frames{std::move(f)};
        }),
        [](Connection& c) { ASSERT_TRUE(c.recv(3.0).ok()); }, [](Connection& c, const std::string&) {
          ASSERT_TRUE(c.send(app_message(5), pattern(200, 10), 5.0).ok());
        });
  }
  ASSERT_FALSE(recorded.empty());
  const std::string cross = worker_error_after([&](std::vector<uint8_t>) { return Frames{recorded}; });
  EXPECT_NE(cross.find("app+5 frame 3 of 216 bytes does not match its authentication tag"), std::string::npos)
      << cross;
}

TEST(LinkSecurity, FrameInClearOnASealedLinkIsRefused) {
  const std::string e = worker_error_after([](std::vector<uint8_t> f) {
    // The attacker's own frame, in clear, at the right position.
    return std::vector<std::vector<uint8_t>>{encode_frame(app_message(5), 3, pattern(200, 10))};
  });
  EXPECT_NE(e.find("integrity check failed on a frame from root"), std::string::npos) << e;
  EXPECT_NE(e.find("app+5 frame 3 is not sealed, on an encrypted link"), std::string::npos) << e;
}

TEST(Handshake, LinkEncryptionSettingMustAgree) {
  Loopback lb;
  auto run = [&](bool root_enc, bool worker_enc, Expected<PeerInfo>* root, Expected<PeerInfo>* worker) {
    std::thread t([&] {
      Connection c = lb.accept();
      HandshakeOptions o;
      o.role = Role::kWorker;
      o.cluster_key = kTestKey;
      o.link_encryption = worker_enc;
      *worker = handshake_acceptor(c, o);
    });
    Connection c = lb.connect();
    HandshakeOptions o;
    o.role = Role::kRoot;
    o.cluster_key = kTestKey;
    o.link_encryption = root_enc;
    *root = handshake_initiator(c, o);
    t.join();
  };
  Expected<PeerInfo> r = Status::error("-"), w = Status::error("-");
  run(false, true, &r, &w);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), "worker " + lb.addr + " encrypts its links but this root runs with --link-encryption off: "
                       "start both the same way");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().find("runs with --link-encryption off but this worker encrypts its links"), std::string::npos)
      << w.error();
  run(false, false, &r, &w);  // both off: a keyed handshake, frames in clear
  ASSERT_TRUE(r.ok() && w.ok());
  EXPECT_FALSE(r->sealed);
  EXPECT_FALSE(w->sealed);
}

TEST(ClusterKey, KeygenFilesAndSources) {
  const std::string k1 = generate_cluster_key(), k2 = generate_cluster_key();
  EXPECT_EQ(k1.size(), 64u);
  EXPECT_EQ(k1.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(k1, k2);
  char dir_tmpl[] = "/tmp/shardlm_key_XXXXXX";
  ASSERT_NE(mkdtemp(dir_tmpl), nullptr);
  const std::string path = std::string(dir_tmpl) + "/key";
  ASSERT_TRUE(write_key_file(path, k1, false).ok());
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  Status again = write_key_file(path, k2, false);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.message().find("already exists"), std::string::npos);
  std::vector<std::string> warnings;
  auto read = read_key_file(path, &warnings);
  ASSERT_TRUE(read.ok()) << read.error();
  EXPECT_EQ(*read, k1);
  EXPECT_TRUE(warnings.empty());
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  ASSERT_TRUE(read_key_file(path, &warnings).ok());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("chmod 600"), std::string::npos);
  ASSERT_TRUE(write_key_file(path, "  spaced-key-0123456789 ", true).ok());  // --force
  EXPECT_EQ(read_key_file(path, nullptr).value(), "spaced-key-0123456789");
  ASSERT_TRUE(write_key_file(path, "", true).ok());
  EXPECT_NE(read_key_file(path, nullptr).error().find("is empty"), std::string::npos);

  // Sources: flag, then file, then the environment; flag and file together are refused.
  ASSERT_TRUE(write_key_file(path, k1, true).ok());
  setenv(kClusterKeyEnv, k2.c_str(), 1);
  EXPECT_EQ(resolve_cluster_key("flag-key-0123456789", "", nullptr).value(), "flag-key-0123456789");
  EXPECT_EQ(resolve_cluster_key("", path, nullptr).value(), k1);
  EXPECT_EQ(resolve_cluster_key("", "", nullptr).value(), k2);
  EXPECT_FALSE(resolve_cluster_key("flag", path, nullptr).ok());
  unsetenv(kClusterKeyEnv);
  EXPECT_EQ(resolve_cluster_key("", "", nullptr).value(), "");
  warnings.clear();
  EXPECT_EQ(resolve_cluster_key("short", "", &warnings).value(), "short");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("shardlm keygen"), std::string::npos);
  unlink(path.c_str());
  rmdir(dir_tmpl);
}

TEST(ClusterKey, WorkerNeedsAKeyBeyondLoopback) {
  for (const char* h : {"127.0.0.1", "127.3.4.5", "::1", "[::1]", "localhost"}) EXPECT_TRUE(is_loopback_host(h)) << h;
  for (const char* h : {"", "0.0.0.0", "::", "10.0.0.2", "192.168.1.1", "example.com", "128.0.0.1"})
    EXPECT_FALSE(is_loopback_host(h)) << h;
  std::vector<std::string> w;
  Status st = check_worker_security("", "", false, true, &w);  // the default: every address
  ASSERT_FALSE(st.ok());
  for (const char* word : {"refusing to listen on every address without a cluster key", "shardlm keygen",
                           "--cluster-key-file", "$SHARDLM_CLUSTER_KEY", "--insecure", "--host 127.0.0.1"})
    EXPECT_NE(st.message().find(word), std::string::npos) << word << " in: " << st.message();
  EXPECT_FALSE(check_worker_security("10.0.0.2", "", false, true, &w).ok());
  EXPECT_TRUE(check_worker_security("127.0.0.1", "", false, true, &w).ok());
  EXPECT_TRUE(check_worker_security("", kTestKey, false, true, &w).ok());
  EXPECT_TRUE(w.empty());
  EXPECT_TRUE(check_worker_security("", "", true, true, &w).ok());  // --insecure warns
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("--insecure"), std::string::npos);
  // --link-encryption off only with --insecure and a key.
  EXPECT_NE(check_worker_security("", kTestKey, false, false, &w).message().find("needs --insecure"),
            std::string::npos);
  EXPECT_TRUE(check_worker_security("", kTestKey, true, false, &w).ok());
  EXPECT_FALSE(check_worker_security("127.0.0.1", "", true, false, &w).ok());
  // The root: the same rule for --link-encryption off; a warning without a key beyond loopback.
  w.clear();
  EXPECT_TRUE(check_root_security({"127.0.0.1:9000"}, "", false, true, &w).ok());
  EXPECT_TRUE(w.empty());
  EXPECT_TRUE(check_root_security({"127.0.0.1:9000", "10.0.0.3:9000"}, "", false, true, &w).ok());
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("neither encrypted nor authenticated"), std::string::npos);
  EXPECT_FALSE(check_root_security({"10.0.0.3:9000"}, kTestKey, false, false, &w).ok());
}

}  // namespace
}  // namespace net
