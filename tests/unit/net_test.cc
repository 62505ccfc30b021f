// net_test.cc: the net module: frame encoding, every refusal a receiver makes (on a
// socketpair and on loopback TCP), the cluster-key handshake, timeouts and lost peers,
// and all-reduce / broadcast / gather on the in-process and TCP transports for N = 1, 2,
// 3, 4, 6, 9 with odd lengths: every node bit-identical, bit-equal to a reference that
// replays the algorithm's order of operations, within the encoding's tolerance of the
// exact sum, and with byte counters equal to the formula (plus the tag on sealed links).
// Link encryption and keys (issue 18) are in link_test.cc.
// Deliberately no timed assertions beyond the timeout test (±0.5 s); the loopback latency
// test only prints its measurement.
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

// ---- clusters ----

TEST(TcpTransport, MeshRanksMatchAddressOrderAndWrongKeyIsReported) {
  auto c = make_tcp_cluster(4);
  ASSERT_TRUE(c.ok()) << c.error();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ((*c)[i]->rank(), i);
    EXPECT_EQ((*c)[i]->size(), 4);
  }
  EXPECT_NE((*c)[2]->peer_name(3).find("worker 127.0.0.1:"), std::string::npos);
  EXPECT_NE((*c)[2]->peer_name(0).find("root 127.0.0.1:"), std::string::npos);
  auto bad = make_tcp_cluster(2, "a", "b");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("cluster key mismatch with "), std::string::npos) << bad.error();
}

// Runs fn(rank) on one thread per node.
void run_nodes(Cluster& c, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < int(c.size()); ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

std::vector<float> partial(int rank, size_t n, uint32_t salt) {
  std::mt19937 rng(1234u + 977u * uint32_t(rank) + salt);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = u(rng);
  if (n > 5) x[3] = 0.0f;  // a zero and a tiny value keep the encodings honest
  if (n > 7) x[7] = 1e-7f;
  return x;
}

std::vector<float> roundtrip(SyncType t, std::span<const float> x) {
  std::vector<uint8_t> e(encoded_bytes(t, x.size()));
  encode_values(t, x, e.data());
  std::vector<float> y(x.size());
  decode_values(t, e.data(), y);
  return y;
}

// Replays each algorithm's order of operations on one thread.
std::vector<float> reference(AllReduceAlgo a, SyncType t, const std::vector<std::vector<float>>& xs) {
  const int n_nodes = int(xs.size());
  const size_t n = xs[0].size();
  if (n_nodes == 1) return xs[0];
  if (a != AllReduceAlgo::kRing) {
    std::vector<float> sum = roundtrip(t, xs[0]);
    for (int p = 1; p < n_nodes; ++p) {
      auto d = roundtrip(t, xs[p]);
      for (size_t i = 0; i < n; ++i) sum[i] = sum[i] + d[i];
    }
    return a == AllReduceAlgo::kStar ? roundtrip(t, sum) : sum;
  }
  std::vector<float> out(n);
  for (int c = 0; c < n_nodes; ++c) {
    auto [lo, hi] = ring_chunk(n, n_nodes, c);
    std::vector<float> acc(xs[(c + 1) % n_nodes].begin() + lo, xs[(c + 1) % n_nodes].begin() + hi);
    for (int k = 2; k <= n_nodes; ++k) {
      acc = roundtrip(t, acc);
      const auto& own = xs[(c + k) % n_nodes];
      for (size_t i = 0; i < acc.size(); ++i) acc[i] = acc[i] + own[lo + i];
    }
    acc = roundtrip(t, acc);
    std::copy(acc.begin(), acc.end(), out.begin() + lo);
  }
  return out;
}

// Error bound against the exact sum: each encoding of a vector whose values are at most
// m in magnitude costs at most m/127 (Q8_0: half a step plus the F16 scale) or m/2048 (F16).
double tolerance(AllReduceAlgo a, SyncType t, int n_nodes, double amax) {
  const double u = t == SyncType::kQ8_0 ? 1.0 / 127 : t == SyncType::kF16 ? 1.0 / 2048 : 0.0;
  const double n = n_nodes;
  const double float_sum = n * n * amax * 1e-6;
  if (n_nodes == 1) return 0;
  if (a == AllReduceAlgo::kAllGather) return n * amax * u + float_sum;
  if (a == AllReduceAlgo::kStar) return 2 * n * amax * u + float_sum;
  return n * (n + 1) / 2 * amax * u + float_sum;
}

const size_t kLengths[] = {576, 33, 1000};
const AllReduceAlgo kAlgos[] = {AllReduceAlgo::kAllGather, AllReduceAlgo::kStar, AllReduceAlgo::kRing};
const SyncType kSyncs[] = {SyncType::kQ8_0, SyncType::kF16, SyncType::kF32};

// Every (length, algorithm, sync) on one cluster; all nodes run the same sequence.
// tag_bytes: what each frame adds on a sealed link (the formula counts frames in clear).
void check_all_reduce_matrix(Cluster& c, uint64_t tag_bytes = 0) {
  const int n_nodes = int(c.size());
  struct Case { size_t n; AllReduceAlgo a; SyncType t; };
  std::vector<Case> cases;
  for (size_t n : kLengths) for (auto a : kAlgos) for (auto t : kSyncs) cases.push_back({n, a, t});
  // results[case][rank], and byte deltas observed by each node.
  std::vector<std::vector<std::vector<float>>> results(cases.size(), std::vector<std::vector<float>>(n_nodes));
  std::vector<std::vector<ByteCounters>> deltas(cases.size(), std::vector<ByteCounters>(n_nodes));
  std::vector<std::vector<CollectiveStats>> stats(cases.size(), std::vector<CollectiveStats>(n_nodes));
  std::vector<Status> status(n_nodes);
  run_nodes(c, [&](int r) {
    Collectives coll(*c[r], {SyncType::kQ8_0, AllReduceAlgo::kAllGather, 20.0});
    for (size_t k = 0; k < cases.size(); ++k) {
      std::vector<float> x = partial(r, cases[k].n, uint32_t(k));
      const ByteCounters before = c[r]->counters();
      coll.reset_stats();
      Status st = coll.all_reduce(x, cases[k].a, cases[k].t);
      if (!st.ok()) { status[r] = st; return; }
      const ByteCounters after = c[r]->counters();
      deltas[k][r] = {after.bytes_sent - before.bytes_sent, after.bytes_received - before.bytes_received,
                      after.frames_sent - before.frames_sent, after.frames_received - before.frames_received};
      stats[k][r] = coll.stats();
      results[k][r] = std::move(x);
    }
  });
  for (int r = 0; r < n_nodes; ++r) ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r].message();
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& cs = cases[k];
    const std::string what = std::string("N=") + std::to_string(n_nodes) + " n=" + std::to_string(cs.n) + " " +
                             algo_name(cs.a) + " " + sync_type_name(cs.t);
    std::vector<std::vector<float>> xs;
    double amax = 0;
    for (int r = 0; r < n_nodes; ++r) {
      xs.push_back(partial(r, cs.n, uint32_t(k)));
      for (float v : xs.back()) amax = std::max(amax, double(std::fabs(v)));
    }
    // Bit-identical on every node, and bit-equal to the replayed reference.
    const std::vector<float> ref = reference(cs.a, cs.t, xs);
    for (int r = 0; r < n_nodes; ++r) {
      ASSERT_EQ(0, std::memcmp(results[k][r].data(), results[k][0].data(), cs.n * 4)) << what << " rank " << r;
    }
    ASSERT_EQ(0, std::memcmp(results[k][0].data(), ref.data(), cs.n * 4)) << what << " vs reference";
    // Close to the exact sum.
    const double tol = tolerance(cs.a, cs.t, n_nodes, amax);
    double worst = 0;
    for (size_t i = 0; i < cs.n; ++i) {
      double exact = 0;
      for (int r = 0; r < n_nodes; ++r) exact += xs[r][i];
      worst = std::max(worst, std::fabs(exact - results[k][0][i]));
    }
    EXPECT_LE(worst, tol) << what;
    // Bytes equal the formula, on the transport and in the collective stats.
    for (int r = 0; r < n_nodes; ++r) {
      const uint64_t want_sent = Collectives::all_reduce_bytes_sent(cs.a, cs.t, n_nodes, r, cs.n);
      const uint64_t want_recv = Collectives::all_reduce_bytes_received(cs.a, cs.t, n_nodes, r, cs.n);
      EXPECT_EQ(deltas[k][r].bytes_sent, want_sent + tag_bytes * deltas[k][r].frames_sent) << what << " rank " << r;
      EXPECT_EQ(deltas[k][r].bytes_received, want_recv + tag_bytes * deltas[k][r].frames_received)
          << what << " rank " << r;
      EXPECT_EQ(stats[k][r].bytes_sent, want_sent + tag_bytes * deltas[k][r].frames_sent) << what << " rank " << r;
      EXPECT_EQ(stats[k][r].calls, n_nodes > 1 ? 1u : 0u);
    }
  }
}

const int kNodeCounts[] = {1, 2, 3, 4, 6, 9};

TEST(AllReduce, InProcessEveryAlgorithmSyncAndLength) {
  for (int n : kNodeCounts) {
    SCOPED_TRACE("N=" + std::to_string(n));
    Cluster c = make_in_process_cluster(n);
    check_all_reduce_matrix(c);
  }
}

TEST(AllReduce, TcpLoopbackEveryAlgorithmSyncAndLength) {
  for (int n : kNodeCounts) {
    SCOPED_TRACE("N=" + std::to_string(n));
    auto c = make_tcp_cluster(n);
    ASSERT_TRUE(c.ok()) << c.error();
    check_all_reduce_matrix(*c);
  }
}

TEST(AllReduce, TcpLoopbackSealedLinksEveryAlgorithmSyncAndLength) {
  // The same matrix over keyed, therefore sealed, links: results unchanged, 16 bytes of
  // tag per frame on top of the formula.
  for (int n : {2, 3}) {
    SCOPED_TRACE("N=" + std::to_string(n));
    auto c = make_tcp_cluster(n, "mesh-key-0123456789", "mesh-key-0123456789");
    ASSERT_TRUE(c.ok()) << c.error();
    check_all_reduce_matrix(*c, kTagBytes);
  }
}

TEST(AllReduce, FormulaForQ8AllGather) {
  // 576 values = 18 blocks of 34 bytes, plus the 28-byte frame and 12-byte collective headers.
  EXPECT_EQ(Collectives::all_reduce_bytes_sent(AllReduceAlgo::kAllGather, SyncType::kQ8_0, 2, 0, 576),
            28u + 12u + 18u * 34u);
  EXPECT_EQ(encoded_bytes(SyncType::kQ8_0, 33), 68u);
  EXPECT_EQ(encoded_bytes(SyncType::kF16, 33), 66u);
}

TEST(AllReduce, LargeBatchOverTcpDoesNotDeadlock) {
  // 8 MB per message: far above the socket buffers, every node sends before it reads.
  for (const char* key : {"", "large-batch-key-0123"}) {
  SCOPED_TRACE(std::string("key '") + key + "'");
  auto c = make_tcp_cluster(3, key, key);
  ASSERT_TRUE(c.ok()) << c.error();
  const size_t n = 2 * 1024 * 1024 + 7;
  std::vector<Status> st(3);
  std::vector<std::vector<float>> out(3);
  run_nodes(*c, [&](int r) {
    Collectives coll(*(*c)[r]);
    for (auto a : kAlgos) {
      std::vector<float> x(n, float(r + 1));
      st[r] = coll.all_reduce(x, a, SyncType::kF32);
      if (!st[r].ok()) return;
      out[r] = x;
    }
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].message();
    EXPECT_EQ(out[r][n - 1], 6.0f);
  }
  }
}

TEST(AllReduce, LostPeerIsReportedByName) {
  auto c = make_tcp_cluster(3);
  ASSERT_TRUE(c.ok()) << c.error();
  (*c)[2].reset();  // worker rank 2 goes away
  Status st0, st1;
  std::thread t1([&] {
    Collectives coll(*(*c)[1], {SyncType::kQ8_0, AllReduceAlgo::kAllGather, 5.0});
    std::vector<float> x(64, 1.0f);
    st1 = coll.all_reduce(x);
  });
  Collectives coll(*(*c)[0], {SyncType::kQ8_0, AllReduceAlgo::kAllGather, 5.0});
  std::vector<float> x(64, 1.0f);
  st0 = coll.all_reduce(x);
  t1.join();
  ASSERT_FALSE(st0.ok());
  EXPECT_NE(st0.message().find("worker 127.0.0.1:"), std::string::npos) << st0.message();
  EXPECT_NE(st0.message().find("closed the connection"), std::string::npos) << st0.message();
  ASSERT_FALSE(st1.ok());
}

TEST(AllReduce, InProcessTimeoutNamesPeer) {
  Cluster c = make_in_process_cluster(2);
  Collectives coll(*c[0], {SyncType::kQ8_0, AllReduceAlgo::kAllGather, 0.2});
  std::vector<float> x(32, 1.0f);
  Status st = coll.all_reduce(x);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "node 1 (in-process) did not answer within 0.2 s");
}

TEST(AllReduce, TcpTimeoutNamesSilentWorker) {
  auto c = make_tcp_cluster(2);
  ASSERT_TRUE(c.ok()) << c.error();
  Collectives coll(*(*c)[0], {SyncType::kQ8_0, AllReduceAlgo::kRing, 0.5});
  std::vector<float> x(100, 1.0f);
  util::Timer t;
  Status st = coll.all_reduce(x);  // rank 1 never joins
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), (*c)[0]->peer_name(1) + " did not answer within 0.5 s");
  EXPECT_LT(t.seconds(), 1.0);
}

TEST(AllReduce, MismatchedLengthsAreRefused) {
  Cluster c = make_in_process_cluster(2);
  Status st[2];
  run_nodes(c, [&](int r) {
    Collectives coll(*c[r], {SyncType::kQ8_0, AllReduceAlgo::kAllGather, 2.0});
    std::vector<float> x(r == 0 ? 64 : 96, 1.0f);
    st[r] = coll.all_reduce(x);
  });
  ASSERT_FALSE(st[0].ok());
  EXPECT_NE(st[0].message().find("the nodes are out of step"), std::string::npos) << st[0].message();
}

void check_broadcast_gather(Cluster& c) {
  const int n = int(c.size());
  std::vector<std::vector<uint8_t>> got(n);
  std::vector<std::vector<std::vector<uint8_t>>> gathered(n);
  std::vector<Status> st(n);
  run_nodes(c, [&](int r) {
    Collectives coll(*c[r]);
    std::vector<uint8_t> blob;
    if (r == 0) blob = {9, 8, 7, 6};
    st[r] = coll.broadcast(0, &blob);
    if (!st[r].ok()) return;
    got[r] = blob;
    std::vector<uint8_t> mine(size_t(r) + 1, uint8_t(r));
    auto g = coll.gather(0, mine);
    if (!g.ok()) { st[r] = g.status(); return; }
    gathered[r] = *g;
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].message();
    EXPECT_EQ(got[r], (std::vector<uint8_t>{9, 8, 7, 6}));
  }
  ASSERT_EQ(int(gathered[0].size()), n);
  for (int r = 0; r < n; ++r) EXPECT_EQ(gathered[0][r], std::vector<uint8_t>(size_t(r) + 1, uint8_t(r)));
  for (int r = 1; r < n; ++r) EXPECT_TRUE(gathered[r].empty());
}

TEST(Collectives, BroadcastAndGather) {
  for (int n : {1, 2, 5}) {
    Cluster c = make_in_process_cluster(n);
    check_broadcast_gather(c);
    auto t = make_tcp_cluster(n);
    ASSERT_TRUE(t.ok()) << t.error();
    check_broadcast_gather(*t);
  }
}

TEST(AllReduce, TcpLoopbackLatencyReport) {
  // Prints the median of 1000 all-reduces of 576 floats between two nodes (Q8_0,
  // all-gather). A measurement, not an assertion.
  auto c = make_tcp_cluster(2);
  ASSERT_TRUE(c.ok()) << c.error();
  constexpr int kIters = 1000;
  for (auto sync : kSyncs) {
    std::vector<double> us(kIters);
    Status st[2];
    run_nodes(*c, [&](int r) {
      Collectives coll(*(*c)[r], {sync, AllReduceAlgo::kAllGather, 10.0});
      const std::vector<float> x0 = partial(r, 576, 0);
      std::vector<float> x(576);
      for (int i = 0; i < kIters; ++i) {
        x = x0;  // in place: reset, or the sums double every call
        util::Timer t;
        Status s = coll.all_reduce(x);
        if (r == 0) us[i] = t.seconds() * 1e6;
        if (!s.ok()) { st[r] = s; return; }
      }
    });
    ASSERT_TRUE(st[0].ok() && st[1].ok());
    std::sort(us.begin(), us.end());
    std::printf("loopback all-reduce, N=2, 576 floats, %s all-gather: median %.1f us, p90 %.1f us\n",
                sync_type_name(sync), us[kIters / 2], us[kIters * 9 / 10]);
  }
}


// Exact sync's row gather: every node fills its byte segment of each row; afterwards every
// row is whole on every node. Segments that leave a gap or overlap are refused by name.
TEST(GatherRows, SegmentsTileTheRowOnEveryNode) {
  const size_t rows = 5, row_bytes = 103;  // odd sizes, uneven segments
  const std::vector<size_t> cut = {0, 40, 41, 103};
  Cluster c = make_in_process_cluster(3);
  std::vector<std::vector<uint8_t>> buf(3, std::vector<uint8_t>(rows * row_bytes, 0));
  Status st[3];
  run_nodes(c, [&](int r) {
    for (size_t i = 0; i < rows; ++i)
      for (size_t b = cut[r]; b < cut[r + 1]; ++b) buf[r][i * row_bytes + b] = uint8_t(i * 31 + b * 7 + 1);
    Collectives coll(*c[r], {SyncType::kF32, AllReduceAlgo::kAllGather, 5.0});
    st[r] = coll.all_gather_rows(buf[r].data(), rows, row_bytes, cut[r], cut[r + 1] - cut[r]);
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].message();
    for (size_t i = 0; i < rows; ++i)
      for (size_t b = 0; b < row_bytes; ++b) ASSERT_EQ(buf[r][i * row_bytes + b], uint8_t(i * 31 + b * 7 + 1));
  }
}

TEST(GatherRows, GapOrOverlapIsRefused) {
  Cluster c = make_in_process_cluster(2);
  std::vector<std::vector<uint8_t>> buf(2, std::vector<uint8_t>(64, 0));
  Status st[2];
  run_nodes(c, [&](int r) {
    Collectives coll(*c[r], {SyncType::kF32, AllReduceAlgo::kAllGather, 5.0});
    st[r] = coll.all_gather_rows(buf[r].data(), 2, 32, r == 0 ? 0 : 10, 16);  // [0,16) and [10,26)
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(st[r].ok());
    EXPECT_NE(st[r].message().find("do not tile the row"), std::string::npos) << st[r].message();
  }
}

// --transport mpi outside mpirun, or in a build without MPI: a message saying how to
// start it (with MPI: mpirun/srun; without: how to build with MPI). MPI is not started.
TEST(Mpi, StartOutsideMpirunSaysHow) {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK"}) unsetenv(v);
  EXPECT_FALSE(mpi_launched());
  auto t = mpi_start({});
  ASSERT_FALSE(t.ok());
  const std::string want = mpi_built() ? "mpirun -np 3 shardlm" : "built without MPI";
  EXPECT_NE(t.error().find(want), std::string::npos) << t.error();
  mpi_end(0);  // nothing to end
}

// The mpi algorithm needs a native all-reduce: other transports refuse it, and q8_0 is
// refused whatever the transport.
TEST(Mpi, AllReduceAlgorithmNeedsTheMpiTransport) {
  EXPECT_EQ(algo_from_name("mpi"), AllReduceAlgo::kMpi);
  EXPECT_STREQ(algo_name(AllReduceAlgo::kMpi), "mpi");
  Cluster c = make_in_process_cluster(2);
  Status st[2], q8[2];
  run_nodes(c, [&](int r) {
    std::vector<float> x(64, 1.0f);
    Collectives coll(*c[r], {SyncType::kF32, AllReduceAlgo::kMpi, 1.0});
    st[r] = coll.all_reduce(x);
    q8[r] = coll.all_reduce(x, AllReduceAlgo::kMpi, SyncType::kQ8_0);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(st[r].ok());
    EXPECT_NE(st[r].message().find("--transport mpi"), std::string::npos) << st[r].message();
    ASSERT_FALSE(q8[r].ok());
    EXPECT_NE(q8[r].message().find("not q8_0"), std::string::npos) << q8[r].message();
  }
}

}  // namespace
}  // namespace net
