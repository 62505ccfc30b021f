// net_test.cc: the net module's links: frame encoding, every refusal a receiver makes (on a
// socketpair and on loopback TCP), the cluster-key handshake, timeouts and lost peers.
// All-reduce, broadcast and gather on whole clusters are collectives_test.cc's; link
// encryption and keys (issue 18) link_test.cc's. Deliberately no timed assertions beyond
// the timeout test (±0.5 s).
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "net/collectives.h"
#include "net/handshake.h"
#include "net/link_crypto.h"
#include "net/mpi_transport.h"
#include "net/tcp_transport.h"
#include "net/wire.h"
#include "util/timer.h"
#include "net_loopback.h"

namespace net {
namespace {

// ---- frames ----

// --sync-type auto keeps exact sync when every worker is on this machine.
TEST(HostPort, LoopbackMeansThisMachine) {
  for (const char* a : {"127.0.0.1:9000", "127.1.2.3:1", "localhost:80", "[::1]:9001"})
    EXPECT_TRUE(net::parse_host_port(a).value().loopback()) << a;
  for (const char* a : {"10.0.0.2:9000", "128.0.0.1:9000", "localhost.example:80", "[::2]:1", "host127:5"})
    EXPECT_FALSE(net::parse_host_port(a).value().loopback()) << a;
}

TEST(Wire, HeaderRoundTrip) {
  FrameHeader h;
  h.type = MessageType::kAllReduce;
  h.seq = 0x0102030405060708ull;
  h.payload_bytes = 123456789;
  uint8_t b[kHeaderBytes];
  encode_header(h, b);
  EXPECT_EQ(0, std::memcmp(b, "SHLM", 4));
  EXPECT_EQ(b[4], kProtocolVersion & 0xff);  // little-endian
  EXPECT_EQ(b[12], 0x08);
  EXPECT_EQ(b[19], 0x01);
  auto d = decode_header(b, "worker x", uint64_t{1} << 30);
  ASSERT_TRUE(d.ok()) << d.error();
  EXPECT_EQ(d->type, MessageType::kAllReduce);
  EXPECT_EQ(d->seq, h.seq);
  EXPECT_EQ(d->payload_bytes, h.payload_bytes);
  EXPECT_EQ(d->version, kProtocolVersion);
}

TEST(Wire, WriterReaderRoundTrip) {
  Writer w;
  w.put_u8(0xab);
  w.put_u16(0xbeef);
  w.put_u32(0xdeadbeef);
  w.put_u64(0x1122334455667788ull);
  w.put_i32(-5);
  w.put_f32(-1.5f);
  w.put_string("hello");
  const uint8_t raw[3] = {1, 2, 3};
  w.put_bytes(raw);
  const auto buf = w.take();
  EXPECT_EQ(buf[1], 0xef);  // u16 low byte first
  Reader r(buf, "test message");
  uint8_t a; uint16_t b; uint32_t c; uint64_t d; int32_t e; float f; std::string s;
  std::span<const uint8_t> bytes;
  ASSERT_TRUE(r.get_u8(&a).ok());
  ASSERT_TRUE(r.get_u16(&b).ok());
  ASSERT_TRUE(r.get_u32(&c).ok());
  ASSERT_TRUE(r.get_u64(&d).ok());
  ASSERT_TRUE(r.get_i32(&e).ok());
  ASSERT_TRUE(r.get_f32(&f).ok());
  ASSERT_TRUE(r.get_string(&s, 100).ok());
  ASSERT_TRUE(r.get_bytes(3, &bytes).ok());
  EXPECT_TRUE(r.finish().ok());
  EXPECT_EQ(a, 0xab); EXPECT_EQ(b, 0xbeef); EXPECT_EQ(c, 0xdeadbeefu);
  EXPECT_EQ(d, 0x1122334455667788ull); EXPECT_EQ(e, -5); EXPECT_EQ(f, -1.5f); EXPECT_EQ(s, "hello");
  EXPECT_EQ(bytes[2], 3);
  uint32_t more;
  Status st = r.get_u32(&more);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("test message is truncated"), std::string::npos) << st.message();
}

TEST(Wire, ReaderRefusesLongStringAndTrailingBytes) {
  Writer w;
  w.put_string(std::string(50, 'x'));
  w.put_u8(7);
  const auto buf = w.take();
  Reader r(buf, "m");
  std::string s;
  EXPECT_FALSE(r.get_string(&s, 10).ok());
  Reader r2(buf, "m");
  ASSERT_TRUE(r2.get_string(&s, 100).ok());
  EXPECT_FALSE(r2.finish().ok());
}

// A Connection on one end of a socketpair, raw bytes written to the other end.
struct Pair {
  Pair(uint64_t max_frame = kDefaultMaxFrameBytes) {
    int fds[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    conn = Connection(Socket::adopt(fds[0], "worker 10.0.0.2:9000"), max_frame);
    raw = fds[1];
  }
  ~Pair() { if (raw >= 0) close(raw); }
  void write_raw(const std::vector<uint8_t>& b) { ASSERT_EQ(::write(raw, b.data(), b.size()), ssize_t(b.size())); }
  void close_raw() { close(raw); raw = -1; }
  Connection conn;
  int raw = -1;
};

std::vector<uint8_t> raw_frame(uint16_t version, uint16_t type, uint32_t flags, uint64_t seq,
                               uint64_t len, size_t actual_payload) {
  Writer w;
  for (uint8_t c : kMagic) w.put_u8(c);  // (put_bytes here trips GCC 12's -Wstringop-overflow)
  w.put_u16(version);
  w.put_u16(type);
  w.put_u32(flags);
  w.put_u64(seq);
  w.put_u64(len);
  auto b = w.take();
  b.resize(b.size() + actual_payload, 0x5a);
  return b;
}

std::string recv_error(Connection& c, double timeout_s = 2.0) {
  auto m = c.recv(timeout_s);
  EXPECT_FALSE(m.ok());
  return m.ok() ? std::string() : m.error();
}

TEST(Refusal, FrameRoundTripOnSocketpair) {
  Pair p;
  const std::vector<uint8_t> payload = {1, 2, 3, 4, 5};
  p.write_raw(encode_frame(MessageType::kPing, 0, payload));
  p.write_raw(encode_frame(MessageType::kPong, 1, {}));
  auto m = p.conn.recv(2.0);
  ASSERT_TRUE(m.ok()) << m.error();
  EXPECT_EQ(m->type, MessageType::kPing);
  EXPECT_EQ(m->payload, payload);
  auto m2 = p.conn.recv_expect(MessageType::kPong, 2.0);
  ASSERT_TRUE(m2.ok()) << m2.error();
  EXPECT_TRUE(m2->payload.empty());
  EXPECT_EQ(p.conn.counters().bytes_received, 2 * kHeaderBytes + 5);
}

TEST(Refusal, WrongMagic) {
  Pair p;
  p.write_raw(std::vector<uint8_t>{'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P', '/', '1', '.', '1',
                                   '\r', '\n', 'H', 'o', 's', 't', ':', ' ', 'x', '\r', '\n', '\r', '\n', 'x'});
  const std::string e = recv_error(p.conn);
  EXPECT_NE(e.find("worker 10.0.0.2:9000 sent bytes that are not a shardlm frame"), std::string::npos) << e;
  EXPECT_NE(e.find("HTTP"), std::string::npos) << e;
}

TEST(Refusal, OtherProtocolVersion) {
  Pair p;
  p.write_raw(raw_frame(kProtocolVersion + 2, 1, 0, 0, 0, 0));
  const std::string e = recv_error(p.conn);
  EXPECT_EQ(e, "worker 10.0.0.2:9000 speaks protocol " + std::to_string(kProtocolVersion + 2) +
                   ", this shardlm speaks " + std::to_string(kProtocolVersion) +
                   ": upgrade both to the same version");
}

TEST(Refusal, OversizeFrame) {
  Pair p(1024);
  p.write_raw(raw_frame(kProtocolVersion, uint16_t(MessageType::kBroadcast), 0, 0, 1025, 0));
  const std::string e = recv_error(p.conn);
  EXPECT_NE(e.find("worker 10.0.0.2:9000 sent a broadcast frame of 1025 bytes, over this node's limit of 1024"),
            std::string::npos) << e;
}

TEST(Refusal, UnknownTypeAndFlags) {
  {
    Pair p;
    p.write_raw(raw_frame(kProtocolVersion, 999, 0, 0, 0, 0));
    const std::string e = recv_error(p.conn);
    EXPECT_NE(e.find("worker 10.0.0.2:9000 sent a frame of unknown message type 999"), std::string::npos) << e;
  }
  {
    Pair p;
    p.write_raw(raw_frame(kProtocolVersion, 1, 0x10, 0, 0, 0));
    EXPECT_NE(recv_error(p.conn).find("unknown flags 0x10"), std::string::npos);
  }
}

TEST(Refusal, UnexpectedTypeAndSequence) {
  {
    Pair p;
    p.write_raw(encode_frame(MessageType::kReady, 0, {}));
    auto m = p.conn.recv_expect(MessageType::kHello, 2.0);
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.error(), "worker 10.0.0.2:9000 sent a ready message where a hello message was expected: "
                         "the nodes are out of step");
  }
  {
    Pair p;
    p.write_raw(encode_frame(MessageType::kReady, 5, {}));
    EXPECT_NE(recv_error(p.conn).find("sent frame number 5 where 0 was expected"), std::string::npos);
  }
  {
    Pair p;  // a peer's error message becomes a Status naming it
    p.write_raw(encode_frame(MessageType::kError, 0, encode_error({ErrorCode::kOther, "out of memory"})));
    auto m = p.conn.recv_expect(MessageType::kHello, 2.0);
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.error(), "worker 10.0.0.2:9000 gave up: out of memory");
  }
}

TEST(Refusal, TruncatedHeaderAndPayload) {
  {
    Pair p;
    auto f = encode_frame(MessageType::kPing, 0, {});
    f.resize(10);
    p.write_raw(f);
    p.close_raw();
    const std::string e = recv_error(p.conn);
    EXPECT_NE(e.find("worker 10.0.0.2:9000 closed the connection in the middle of a frame (got 10 of"),
              std::string::npos) << e;
  }
  {
    Pair p;
    p.write_raw(raw_frame(kProtocolVersion, uint16_t(MessageType::kPing), 0, 0, 100, 50));
    p.close_raw();
    const std::string e = recv_error(p.conn);
    EXPECT_NE(e.find("in the middle of a frame (got 78 of 128 bytes)"), std::string::npos) << e;
  }
  {
    Pair p;
    p.close_raw();
    EXPECT_EQ(recv_error(p.conn), "worker 10.0.0.2:9000 closed the connection");
  }
}

// ---- loopback TCP: handshake, timeouts, lost peers ----

struct HandshakeResult {
  Expected<PeerInfo> root = Status::error("not run");
  Expected<PeerInfo> worker = Status::error("not run");
};

HandshakeResult run_handshake(const std::string& root_key, const std::string& worker_key, std::string* addr_out) {
  Loopback lb;
  *addr_out = lb.addr;
  HandshakeResult r;
  std::thread worker([&] {
    Connection c = lb.accept();
    HandshakeOptions o;
    o.role = Role::kWorker;
    o.cluster_key = worker_key;
    o.software_version = "0.1.0";
    r.worker = handshake_acceptor(c, o);
  });
  Connection c = lb.connect();
  HandshakeOptions o;
  o.role = Role::kRoot;
  o.cluster_key = root_key;
  o.software_version = "0.1.0";
  r.root = handshake_initiator(c, o);
  worker.join();
  return r;
}

TEST(Handshake, SucceedsWithoutAndWithKey) {
  std::string addr;
  auto a = run_handshake("", "", &addr);
  ASSERT_TRUE(a.root.ok()) << a.root.error();
  ASSERT_TRUE(a.worker.ok()) << a.worker.error();
  EXPECT_EQ(a.root->role, Role::kWorker);
  EXPECT_EQ(a.worker->role, Role::kRoot);
  EXPECT_EQ(a.worker->software_version, "0.1.0");
  auto b = run_handshake("s3cret", "s3cret", &addr);
  ASSERT_TRUE(b.root.ok()) << b.root.error();
  ASSERT_TRUE(b.worker.ok()) << b.worker.error();
}

TEST(Handshake, WrongKeyFailsOnBothSides) {
  std::string addr;
  auto r = run_handshake("key-one", "key-two", &addr);
  ASSERT_FALSE(r.root.ok());
  ASSERT_FALSE(r.worker.ok());
  EXPECT_EQ(r.root.error(), "cluster key mismatch with worker " + addr +
                            " (its proof of the key failed the integrity check): start both with the same --cluster-key");
  EXPECT_NE(r.worker.error().find("cluster key mismatch with root 127.0.0.1:"), std::string::npos) << r.worker.error();
}

TEST(Handshake, KeyOnOneSideOnly) {
  std::string addr;
  auto r = run_handshake("", "worker-key", &addr);
  ASSERT_FALSE(r.root.ok());
  ASSERT_FALSE(r.worker.ok());
  EXPECT_EQ(r.root.error(), "worker " + addr + " requires a cluster key but this root has none: "
                            "start both with the same --cluster-key");
  EXPECT_NE(r.worker.error().find("was started without --cluster-key but this worker has one"), std::string::npos)
      << r.worker.error();
  auto s = run_handshake("root-key", "", &addr);
  ASSERT_FALSE(s.root.ok());
  ASSERT_FALSE(s.worker.ok());
  EXPECT_EQ(s.root.error(), "worker " + addr + " was started without --cluster-key but this root has one: "
                            "start both with the same --cluster-key");
  EXPECT_NE(s.worker.error().find("requires a cluster key but this worker has none"), std::string::npos);
}

TEST(Handshake, ProofDependsOnKeyNoncesAndDirection) {
  Nonce a{}, b{};
  a[0] = 1;
  b[0] = 2;
  const Proof p = compute_proof("k", a, b, "shardlm-v1");
  EXPECT_NE(p, compute_proof("k2", a, b, "shardlm-v1"));
  EXPECT_NE(p, compute_proof("k", b, a, "shardlm-v1"));
  EXPECT_NE(p, compute_proof("k", a, b, "shardlm-v1/acceptor"));
  EXPECT_EQ(p, compute_proof("k", a, b, "shardlm-v1"));
}

TEST(Tcp, ReadTimeoutFiresOnSilentPeer) {
  Loopback lb;
  Connection c = lb.connect();
  Connection silent = lb.accept();  // accepted, never writes
  util::Timer t;
  auto m = c.recv(1.0);
  const double s = t.seconds();
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error(), "worker " + lb.addr + " did not answer within 1.0 s");
  EXPECT_GT(s, 0.5);
  EXPECT_LT(s, 1.5);
}

TEST(Tcp, PeerClosingMidFrame) {
  Loopback lb;
  Connection c = lb.connect();
  {
    Connection peer = lb.accept();
    auto f = encode_frame(MessageType::kPing, 0, std::vector<uint8_t>(1000, 7));
    f.resize(500);
    ASSERT_EQ(::write(peer.fd(), f.data(), f.size()), 500);
  }  // closes
  auto m = c.recv(2.0);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error(), "worker " + lb.addr + " closed the connection in the middle of a frame (got 500 of 1028 "
                       "bytes): it probably crashed or was stopped; check its log");
  EXPECT_FALSE(c.send(MessageType::kPing, {}, 1.0).ok() && c.send(MessageType::kPing, {}, 1.0).ok());
}

TEST(Tcp, ConnectRefusedNamesWorker) {
  uint16_t port;
  { Loopback lb; port = lb.listener.port(); }  // closed again: nothing listens
  auto s = connect_tcp({"127.0.0.1", port}, 1.0, "worker");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("could not connect to worker 127.0.0.1:" + std::to_string(port)), std::string::npos);
}

}  // namespace
}  // namespace net
