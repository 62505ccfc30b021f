// allreduce_bench.cc: all-reduce latency and bandwidth per message size, over our TCP mesh
// or under MPI, for docs/BENCHMARKS.md. Every rank runs the same loop; rank 0 prints one
// line per (size, algorithm): microseconds per all-reduce (the best of 3 runs of `reps`
// back-to-back calls) and the algorithm bandwidth (bytes per rank / time).
//   TCP:  allreduce_bench --listen [HOST:]PORT     (each worker, started first; HOST 127.0.0.1)
//         allreduce_bench --workers H:P,H:P,...    (the root)
//   MPI:  mpirun -np N allreduce_bench --mpi
// Options (root or every MPI rank): --sync f32|f16|q8_0 (default f32).
// Deliberately no statistics beyond best-of-3 and no checking of the sums (the unit
// tests check the algorithms; this only times them).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "net/collectives.h"
#include "net/mpi_transport.h"
#include "net/tcp_transport.h"
#include "util/timer.h"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: allreduce_bench --listen [HOST:]PORT | --workers H:P,... | --mpi  [--sync f32|f16|q8_0]\n");
  return 2;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t e; (e = s.find(',', b)) != std::string::npos; b = e + 1) out.push_back(s.substr(b, e - b));
  out.push_back(s.substr(b));
  return out;
}

int run(net::Transport& t, net::SyncType sync, bool native) {
  std::vector<net::AllReduceAlgo> algos = {net::AllReduceAlgo::kAllGather, net::AllReduceAlgo::kStar,
                                           net::AllReduceAlgo::kRing};
  if (native && sync != net::SyncType::kQ8_0) algos.push_back(net::AllReduceAlgo::kMpi);
  net::Collectives coll(t, {sync, net::AllReduceAlgo::kAllGather, 60.0});
  if (t.rank() == 0)
    std::printf("%d ranks, sync %s\n%10s %12s %12s %12s\n", t.size(), net::sync_type_name(sync), "values", "algorithm",
                "us", "MB/s");
  for (size_t n = 64; n <= (size_t(1) << 20); n *= 4) {
    std::vector<float> x(n, 1.0f);
    const int reps = n <= 4096 ? 200 : n <= 65536 ? 40 : 8;
    for (net::AllReduceAlgo a : algos) {
      double best = 1e30;
      for (int run = 0; run < 4; ++run) {  // the first run warms up
        util::Timer tm;
        for (int i = 0; i < reps; ++i) {
          std::fill(x.begin(), x.end(), float(t.rank() + 1));
          if (util::Status st = coll.all_reduce(std::span<float>(x), a, sync); !st.ok()) {
            std::fprintf(stderr, "rank %d: %s\n", t.rank(), st.message().c_str());
            return 1;
          }
        }
        if (run > 0) best = std::min(best, tm.seconds() / reps);
      }
      if (t.rank() == 0)
        std::printf("%10zu %12s %12.1f %12.1f\n", n, net::algo_name(a), best * 1e6,
                    double(net::encoded_bytes(sync, n)) / best / 1e6);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen, workers, sync_name = "f32";
  bool mpi = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mpi") mpi = true;
    else if (a == "--listen" && i + 1 < argc) listen = argv[++i];
    else if (a == "--workers" && i + 1 < argc) workers = argv[++i];
    else if (a == "--sync" && i + 1 < argc) sync_name = argv[++i];
    else return usage();
  }
  auto sync = net::sync_type_from_name(sync_name);
  if (!sync || int(mpi) + int(!listen.empty()) + int(!workers.empty()) != 1) return usage();
  std::unique_ptr<net::Transport> t;
  net::TcpOptions topt;
  topt.software_version = "allreduce_bench";
  if (mpi) {
    auto m = net::mpi_start({});
    if (!m) {
      std::fprintf(stderr, "error: %s\n", m.error().c_str());
      net::mpi_end(1);
      return 1;
    }
    t = std::move(*m);
  } else if (!listen.empty()) {
    const size_t c = listen.rfind(':');  // [HOST:]PORT, HOST default 127.0.0.1
    auto l = net::Listener::listen(c == std::string::npos ? "127.0.0.1" : listen.substr(0, c),
                                   uint16_t(std::atoi(listen.c_str() + (c == std::string::npos ? 0 : c + 1))));
    if (!l) return std::fprintf(stderr, "error: %s\n", l.error().c_str()), 1;
    auto w = net::TcpTransport::accept_worker(*l, topt, 600);
    if (!w) return std::fprintf(stderr, "error: %s\n", w.error().c_str()), 1;
    t = std::move(*w);
  } else {
    auto r = net::TcpTransport::connect_root(split(workers), topt);
    if (!r) return std::fprintf(stderr, "error: %s\n", r.error().c_str()), 1;
    t = std::move(*r);
  }
  const int rc = run(*t, *sync, mpi);
  t.reset();
  net::mpi_end(rc);
  return rc;
}
