// collectives_test.cc: clusters of the net module: the TCP mesh's ranks and a wrong key,
// and all-reduce / broadcast / gather on the in-process and TCP transports for N = 1, 2,
// 3, 4, 6, 9 with odd lengths: every node bit-identical, bit-equal to a reference that
// replays the algorithm's order of operations, within the encoding's tolerance of the
// exact sum, and with byte counters equal to the formula (plus the tag on sealed links);
// lost and silent peers named, row gathers, the MPI transport's refusals. Frames, the
// handshake and single links are net_test.cc's. Deliberately no timed assertions beyond
// the timeout test (±0.5 s); the loopback latency test only prints its measurement.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "net/collectives.h"
#include "net/link_crypto.h"
#include "net/mpi_transport.h"
#include "net/tcp_transport.h"
#include "util/timer.h"
#include "net_loopback.h"

namespace net {
namespace {

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
