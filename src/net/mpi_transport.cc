// mpi_transport.cc: MpiTransport (polled point-to-point messages, MPI_Iallreduce as the
// native sum), the hello over MPI and the MPI_Allreduce measurement. Without SHARDLM_MPI
// only the functions that say how to get MPI are built.
// Deliberately not here: choosing an algorithm (runtime/auto_collective.h).
#include "net/mpi_transport.h"

#include <cstdlib>

#if SHARDLM_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only: no deprecated C++ bindings to link
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include "net/handshake.h"
#include "tensor/quants.h"
#include "util/timer.h"
#endif

namespace net {

bool mpi_launched() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

int mpi_env_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
    if (const char* r = std::getenv(v)) return std::atoi(r);
  return -1;
}

#if !SHARDLM_MPI

bool mpi_built() { return false; }

Expected<std::unique_ptr<Transport>> mpi_start(const MpiOptions&) {
  return Status::error(
      "--transport mpi: this shardlm was built without MPI; install an MPI library (Debian: apt-get install "
      "libopenmpi-dev openmpi-bin) and build again (cmake --preset release finds it; -DSHARDLM_MPI=ON insists), "
      "or run over TCP: `shardlm worker --port P` on each worker and --workers on the root");
}

void mpi_end(int) {}

#else

bool mpi_built() { return true; }

namespace {

bool g_started = false;

std::string mpi_error(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, size_t(len));
}

// Polls: yields the core for the spin time, then sleeps 20 µs doubling to 100 µs, and to
// 1 ms after 1 s of waiting: an idle rank (a worker between requests) costs nothing, and
// one whose partner was descheduled mid-step (a loaded machine) answers within 100 µs.
class Poll {
 public:
  Poll(double spin_s, double timeout_s) : start_(util::now_seconds()), spin_s_(spin_s), timeout_s_(timeout_s) {}
  bool expired() const { return util::now_seconds() - start_ > timeout_s_; }
  // busy: something of ours is in flight (a send, an all-reduce): sleeps stay at 20 µs.
  void wait(bool busy = false) {
    if (util::now_seconds() - start_ < spin_s_) {
      sched_yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(busy ? 20 : sleep_us_));
    if (!busy) sleep_us_ = std::min(util::now_seconds() - start_ < 1.0 ? 100 : 1000, sleep_us_ * 2);
  }

 private:
  double start_, spin_s_, timeout_s_;
  int sleep_us_ = 20;
};

// MPI_SUM of f16 values (uint16 bit patterns), each pair added in f32 and rounded to f16.
void f16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  float x[256], y[256];
  for (int i = 0; i < *len; i += 256) {
    const int n = std::min(256, *len - i);
    tensor::dequantize_row(tensor::Type::F16, reinterpret_cast<const uint8_t*>(a + i), x, n);
    tensor::dequantize_row(tensor::Type::F16, reinterpret_cast<const uint8_t*>(b + i), y, n);
    for (int k = 0; k < n; ++k) y[k] = x[k] + y[k];
    tensor::quantize_row(tensor::Type::F16, y, reinterpret_cast<uint8_t*>(b + i), n);
  }
}

class MpiTransport final : public Transport {
 public:
  MpiTransport(MPI_Comm comm, int rank, int size, std::vector<std::string> hosts, double spin_s)
      : comm_(comm), rank_(rank), size_(size), hosts_(std::move(hosts)), spin_s_(spin_s) {
    MPI_Op_create(&f16_sum, /*commute=*/1, &f16_op_);
  }
  ~MpiTransport() override {
    MPI_Op_free(&f16_op_);
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string peer_name(int peer) const override {
    if (peer < 0 || peer >= size_) return "rank " + std::to_string(peer);
    return (peer == 0 ? "root (MPI rank 0 on " : "worker (MPI rank " + std::to_string(peer) + " on ") +
           hosts_[size_t(peer)] + ")";
  }

  Status send(int peer, MessageType type, std::span<const uint8_t> payload, double timeout_s) override {
    SendItem s{peer, type, payload};
    return exchange({&s, 1}, {}, timeout_s);
  }

  Expected<Message> recv(int peer, double timeout_s) override {
    CHECK(peer >= 0 && peer < size_ && peer != rank_);
    Poll poll(spin_s_, timeout_s);
    Message m;
    for (;;) {
      auto got = try_recv(peer, &m);
      if (!got.ok()) return got.status();
      if (*got) return m;
      if (poll.expired()) return Status::error(timeout_message(peer_name(peer), timeout_s), Status::Code::kTimeout, peer);
      poll.wait();
    }
  }

  // Every send posted at once (MPI_Isend), every receive matched as it arrives: ranks that
  // all send before they receive cannot deadlock.
  Status exchange(std::span<const SendItem> sends, std::span<const RecvItem> recvs, double timeout_s) override {
    std::vector<MPI_Request> reqs(sends.size(), MPI_REQUEST_NULL);
    for (size_t i = 0; i < sends.size(); ++i) {
      const SendItem& s = sends[i];
      CHECK(s.peer >= 0 && s.peer < size_ && s.peer != rank_);
      CHECK_MSG(s.payload.size() <= size_t(INT32_MAX), "an MPI message over 2 GiB");
      std::lock_guard<std::mutex> l(mu_);
      const int rc = MPI_Isend(s.payload.data(), int(s.payload.size()), MPI_BYTE, s.peer, int(s.type), comm_, &reqs[i]);
      if (rc != MPI_SUCCESS) return Status::error("MPI send to " + peer_name(s.peer) + " failed: " + mpi_error(rc));
      counters_.bytes_sent += kHeaderBytes + s.payload.size();
      counters_.frames_sent++;
    }
    std::vector<bool> sent(sends.size(), false), got(recvs.size(), false);
    size_t pending = sends.size() + recvs.size();
    Poll poll(spin_s_, timeout_s);
    while (pending > 0) {
      bool progress = false;
      for (size_t i = 0; i < sends.size(); ++i) {
        if (sent[i]) continue;
        int done = 0;
        std::lock_guard<std::mutex> l(mu_);
        const int rc = MPI_Test(&reqs[i], &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
          return Status::error("MPI send to " + peer_name(sends[i].peer) + " failed: " + mpi_error(rc));
        if (done) { sent[i] = true; --pending; progress = true; }
      }
      for (size_t j = 0; j < recvs.size(); ++j) {
        if (got[j]) continue;
        const RecvItem& r = recvs[j];
        CHECK(r.peer >= 0 && r.peer < size_ && r.peer != rank_);
        auto d = try_recv(r.peer, r.out);
        if (!d.ok()) return d.status();
        if (!*d) continue;
        if (r.out->type != r.type) {
          if (r.out->type == MessageType::kError) return peer_gave_up(peer_name(r.peer), r.out->payload).at_rank(r.peer);
          return unexpected_type(peer_name(r.peer), r.out->type, r.type).at_rank(r.peer);
        }
        got[j] = true;
        --pending;
        progress = true;
      }
      if (pending == 0 || progress) continue;
      if (poll.expired()) {
        for (size_t j = 0; j < recvs.size(); ++j)
          if (!got[j])
            return Status::error(timeout_message(peer_name(recvs[j].peer), timeout_s), Status::Code::kTimeout, recvs[j].peer);
        for (size_t i = 0; i < sends.size(); ++i)
          if (!sent[i])
            return Status::error(send_timeout_message(peer_name(sends[i].peer), timeout_s), Status::Code::kTimeout,
                                 sends[i].peer);
      }
      // A large send moves only while this rank calls into MPI: short sleeps until it is out.
      poll.wait(std::find(sent.begin(), sent.end(), false) != sent.end());
    }
    return {};
  }

  Status native_sum(std::span<float> x, bool f16, double timeout_s) override {
    CHECK_MSG(x.size() <= size_t(INT32_MAX), "an MPI all-reduce of more than 2^31 values");
    MPI_Request req = MPI_REQUEST_NULL;
    std::vector<uint16_t> h;
    int rc = 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (f16) {
        h.resize(x.size());
        tensor::quantize_row(tensor::Type::F16, x.data(), reinterpret_cast<uint8_t*>(h.data()), int64_t(x.size()));
        rc = MPI_Iallreduce(MPI_IN_PLACE, h.data(), int(h.size()), MPI_UINT16_T, f16_op_, comm_, &req);
      } else {
        rc = MPI_Iallreduce(MPI_IN_PLACE, x.data(), int(x.size()), MPI_FLOAT, MPI_SUM, comm_, &req);
      }
      const uint64_t bytes = x.size() * (f16 ? 2 : 4);  // payload each way: MPI's own traffic is its business
      counters_.bytes_sent += bytes;
      counters_.bytes_received += bytes;
    }
    if (rc != MPI_SUCCESS) return Status::error("MPI_Allreduce failed: " + mpi_error(rc));
    Poll poll(spin_s_, timeout_s);
    for (;;) {
      int done = 0;
      {
        std::lock_guard<std::mutex> l(mu_);
        rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      }
      if (rc != MPI_SUCCESS) return Status::error("MPI_Allreduce failed: " + mpi_error(rc));
      if (done) break;
      if (poll.expired())
        return Status::error("MPI_Allreduce did not complete within " + std::to_string(int(timeout_s)) +
                             " s (a rank is not taking part)");
      poll.wait(/*busy=*/true);  // MPI's algorithm moves data only while every rank calls into MPI
    }
    if (f16) tensor::dequantize_row(tensor::Type::F16, reinterpret_cast<const uint8_t*>(h.data()), x.data(), int64_t(x.size()));
    return {};
  }

  double native_sum_us(size_t bytes) const override { return fit_a_us_ + fit_b_us_per_byte_ * double(bytes); }

  ByteCounters counters() const override {
    std::lock_guard<std::mutex> l(mu_);
    return counters_;
  }
  void reset_counters() override {
    std::lock_guard<std::mutex> l(mu_);
    counters_ = {};
  }

  // The hello: protocol version and the cluster key, checked by the root with every worker.
  Status hello(const MpiOptions& o);
  // Times MPI_Allreduce of f32 at two sizes on every rank; the slowest rank's times (the
  // same on all) give the line native_sum_us follows.
  Status measure_native();

 private:
  // One message from peer if one is there (it fills *m).
  Expected<bool> try_recv(int peer, Message* m) {
    std::lock_guard<std::mutex> l(mu_);
    int flag = 0;
    MPI_Message msg;
    MPI_Status st;
    int rc = MPI_Improbe(peer, MPI_ANY_TAG, comm_, &flag, &msg, &st);
    if (rc != MPI_SUCCESS) return Status::error("MPI receive from " + peer_name(peer) + " failed: " + mpi_error(rc));
    if (!flag) return false;
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    m->type = MessageType(uint16_t(st.MPI_TAG));
    m->payload.resize(size_t(count));
    rc = MPI_Mrecv(m->payload.data(), count, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return Status::error("MPI receive from " + peer_name(peer) + " failed: " + mpi_error(rc));
    counters_.bytes_received += kHeaderBytes + size_t(count);
    counters_.frames_received++;
    return true;
  }
  Status refuse(int peer, const std::string& why) {
    (void)send(peer, MessageType::kError, encode_error({ErrorCode::kOther, why}), 5.0);
    return Status::error(why, Status::Code::kRefused, peer);
  }

  MPI_Comm comm_;
  int rank_, size_;
  std::vector<std::string> hosts_;
  double spin_s_;
  MPI_Op f16_op_ = MPI_OP_NULL;
  mutable std::mutex mu_;  // every MPI call and the counters
  ByteCounters counters_;
  double fit_a_us_ = 0, fit_b_us_per_byte_ = 0;
};

constexpr std::string_view kRootLabel = "shardlm-mpi-v1/root";
constexpr std::string_view kWorkerLabel = "shardlm-mpi-v1/worker";

Status MpiTransport::hello(const MpiOptions& o) {
  Hello mine;
  mine.software_version = o.software_version;
  mine.role = rank_ == 0 ? Role::kRoot : Role::kWorker;
  mine.has_key = !o.cluster_key.empty();
  CHECK(RAND_bytes(mine.nonce.data(), int(mine.nonce.size())) == 1);
  const double t = o.setup_timeout_s;
  const auto check_key = [&](int peer, const Hello& theirs) -> Status {
    if (theirs.has_key == mine.has_key) return {};
    return Status::error(mine.has_key ? peer_name(peer) + " was started without a cluster key, this rank with one: "
                                                          "give every rank the same --cluster-key(-file)"
                                      : peer_name(peer) + " was started with a cluster key, this rank without: give "
                                                          "every rank the same --cluster-key(-file)",
                         Status::Code::kRefused, peer);
  };
  if (rank_ != 0) {
    Message m;
    const std::vector<uint8_t> hb = encode_hello(mine);
    SendItem s{0, MessageType::kHello, hb};
    RecvItem r{0, MessageType::kHello, &m};
    RETURN_IF_ERROR(exchange({&s, 1}, {&r, 1}, t));
    auto root = parse_hello(m.payload, peer_name(0));
    if (!root) return refuse(0, root.error());
    if (Status st = check_key(0, *root); !st.ok()) return refuse(0, st.message());
    if (mine.has_key) {
      auto p = recv_expect(0, MessageType::kAuthProof, t);
      if (!p) return p.status();
      auto proof = parse_proof(p->payload, peer_name(0));
      if (!proof) return refuse(0, proof.error());
      const Proof want = compute_proof(o.cluster_key, mine.nonce, root->nonce, kRootLabel);
      if (CRYPTO_memcmp(want.data(), proof->data(), kProofBytes) != 0)
        return refuse(0, "the cluster key of " + peer_name(0) + " differs from this rank's (rank " +
                             std::to_string(rank_) + "): give every rank the same --cluster-key(-file)");
      const Proof back = compute_proof(o.cluster_key, root->nonce, mine.nonce, kWorkerLabel);
      RETURN_IF_ERROR(send(0, MessageType::kAuthProof, back, t));
    }
    auto ready = recv_expect(0, MessageType::kReady, t);
    return ready ? Status() : ready.status();
  }
  // Root: every worker's hello, checked, then (keyed) the proofs both ways.
  const std::vector<uint8_t> hb = encode_hello(mine);
  std::vector<Hello> theirs(static_cast<size_t>(size_));
  for (int r = 1; r < size_; ++r) {
    Message m;
    SendItem s{r, MessageType::kHello, hb};
    RecvItem rv{r, MessageType::kHello, &m};
    RETURN_IF_ERROR(exchange({&s, 1}, {&rv, 1}, t));
    auto h = parse_hello(m.payload, peer_name(r));
    if (!h) return refuse(r, h.error());
    if (Status st = check_key(r, *h); !st.ok()) return refuse(r, st.message());
    theirs[size_t(r)] = *h;
  }
  if (mine.has_key) {
    for (int r = 1; r < size_; ++r) {
      const Proof p = compute_proof(o.cluster_key, theirs[size_t(r)].nonce, mine.nonce, kRootLabel);
      RETURN_IF_ERROR(send(r, MessageType::kAuthProof, p, t));
      auto m = recv_expect(r, MessageType::kAuthProof, t);
      if (!m) return m.status();
      auto proof = parse_proof(m->payload, peer_name(r));
      if (!proof) return refuse(r, proof.error());
      const Proof want = compute_proof(o.cluster_key, mine.nonce, theirs[size_t(r)].nonce, kWorkerLabel);
      if (CRYPTO_memcmp(want.data(), proof->data(), kProofBytes) != 0)
        return refuse(r, "the cluster key of " + peer_name(r) + " differs from the root's");
    }
  }
  for (int r = 1; r < size_; ++r) RETURN_IF_ERROR(send(r, MessageType::kReady, {}, t));
  return {};
}

Status MpiTransport::measure_native() {
  const size_t small = 1024, big = size_t(1) << 18;  // f32 values: 4 KiB and 1 MiB
  std::vector<float> x(big, 1.0f);
  double best[2] = {1e30, 1e30};
  for (int k = 0; k < 2; ++k) {
    const size_t n = k == 0 ? small : big;
    for (int rep = 0; rep < 6; ++rep) {
      util::Timer tm;
      RETURN_IF_ERROR(native_sum(std::span<float>(x.data(), n), false, 30.0));
      if (rep > 0) best[k] = std::min(best[k], tm.seconds() * 1e6);  // the first warms up
    }
  }
  double worst[2];
  {
    std::lock_guard<std::mutex> l(mu_);
    const int rc = MPI_Allreduce(best, worst, 2, MPI_DOUBLE, MPI_MAX, comm_);
    if (rc != MPI_SUCCESS) return Status::error("MPI_Allreduce failed: " + mpi_error(rc));
  }
  fit_b_us_per_byte_ = std::max(0.0, (worst[1] - worst[0]) / double(4 * (big - small)));
  fit_a_us_ = std::max(0.0, worst[0] - fit_b_us_per_byte_ * 4 * small);
  reset_counters();
  return {};
}

}  // namespace

Expected<std::unique_ptr<Transport>> mpi_start(const MpiOptions& o) {
  // srun without an MPI plugin (--mpi=none, Slurm's default MpiDefault) sets SLURM_STEP_ID
  // but no PMI/PMIx variables: each rank would be a singleton. An sbatch script's own shell
  // has SLURM_PROCID but no SLURM_STEP_ID.
  if (!mpi_launched() && std::getenv("SLURM_STEP_ID"))
    return Status::error(
        "--transport mpi: started by srun without an MPI plugin (--mpi=none), so the ranks cannot find each "
        "other; use `srun --mpi=pmix ...` (`srun --mpi=list` shows the plugins; MpiDefault=pmix in slurm.conf "
        "makes it the default)");
  if (!mpi_launched())
    return Status::error(
        "--transport mpi: this process was not started by mpirun or srun; start every rank at once, e.g. "
        "`mpirun -np 3 shardlm generate -m FILE -p TEXT --transport mpi` (rank 0 is the root, the others are "
        "workers; as root add --allow-run-as-root), or under Slurm `srun --mpi=pmix -n 3 shardlm ...`");
  CHECK_MSG(!g_started, "mpi_start called twice");
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    return Status::error("--transport mpi: MPI_Init_thread failed");
  g_started = true;
  if (provided < MPI_THREAD_SERIALIZED)
    return Status::error("--transport mpi: the MPI library offers thread level " + std::to_string(provided) +
                         ", shardlm needs MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE (its engine and weight "
                         "streaming threads call MPI, one at a time)");
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (size < 2) {  // nobody waits for this rank: end MPI quietly
    MPI_Comm_free(&comm);
    MPI_Finalize();
    g_started = false;
    return Status::error("--transport mpi with 1 rank: start 2 or more (`mpirun -np 2 ...`), or leave out "
                         "--transport mpi to run on one node");
  }
  // Every rank's host name, for messages ("worker (MPI rank 2 on node07)").
  char name[64] = {0};
  gethostname(name, sizeof name - 1);
  std::vector<char> all(size_t(size) * sizeof name);
  MPI_Allgather(name, sizeof name, MPI_CHAR, all.data(), sizeof name, MPI_CHAR, comm);
  std::vector<std::string> hosts;
  for (int r = 0; r < size; ++r) hosts.emplace_back(all.data() + size_t(r) * sizeof name);
  const char* env = std::getenv("SHARDLM_SPIN_US");
  const double spin_s = (env && *env ? std::atof(env) : o.spin_us) * 1e-6;
  auto t = std::make_unique<MpiTransport>(comm, rank, size, std::move(hosts), spin_s);
  RETURN_IF_ERROR(t->hello(o));
  RETURN_IF_ERROR(t->measure_native());
  return std::unique_ptr<Transport>(std::move(t));
}

void mpi_end(int rc) {
  if (!g_started) return;
  g_started = false;
  if (rc == 0) {
    MPI_Finalize();
  } else {
    MPI_Abort(MPI_COMM_WORLD, rc);
  }
}

#endif  // SHARDLM_MPI

}  // namespace net
