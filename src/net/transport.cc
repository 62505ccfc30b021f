// transport.cc: the default exchange and InProcessTransport (mutex + condition variable
// mailboxes, one FIFO per ordered pair of ranks). Deliberately unbounded queues: a send
// never blocks, which is what makes the default exchange deadlock-free in-process.
#include "net/transport.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "util/timer.h"

namespace net {

Expected<Message> Transport::recv_expect(int peer, MessageType type, double timeout_s) {
  auto m = recv(peer, timeout_s);
  if (!m.ok()) return m.status().at_rank(peer);
  if (m->type == type) return m;
  if (m->type == MessageType::kError) return peer_gave_up(peer_name(peer), m->payload).at_rank(peer);
  return unexpected_type(peer_name(peer), m->type, type).at_rank(peer);
}

Status Transport::exchange(std::span<const SendItem> sends, std::span<const RecvItem> recvs, double timeout_s) {
  const double deadline = util::now_seconds() + timeout_s;
  for (const SendItem& s : sends) RETURN_IF_ERROR(send(s.peer, s.type, s.payload, timeout_s).at_rank(s.peer));
  for (const RecvItem& r : recvs) {
    const double left = std::max(0.0, deadline - util::now_seconds());
    auto m = recv(r.peer, left);
    if (!m.ok()) {
      // Report the caller's timeout, not what was left of it.
      if (left < timeout_s && m.status().is(util::Status::Code::kTimeout))
        return Status::error(timeout_message(peer_name(r.peer), timeout_s), util::Status::Code::kTimeout, r.peer);
      return m.status().at_rank(r.peer);
    }
    if (m->type != r.type) {
      if (m->type == MessageType::kError) return peer_gave_up(peer_name(r.peer), m->payload).at_rank(r.peer);
      return unexpected_type(peer_name(r.peer), m->type, r.type).at_rank(r.peer);
    }
    *r.out = std::move(*m);
  }
  return {};
}

Status Transport::native_sum(std::span<float>, bool, double) {
  return Status::error("the mpi all-reduce needs --transport mpi (MPI_Allreduce)");
}

namespace {

struct Hub {
  explicit Hub(int n) : n(n), boxes(size_t(n) * n), closed(n, false) {}
  struct Box { std::deque<Message> q; };
  int n;
  std::mutex mu;
  std::condition_variable cv;  // one for all: in-process clusters are small
  std::vector<Box> boxes;      // boxes[dst * n + src]
  std::vector<bool> closed;
};

class InProcessTransport final : public Transport {
 public:
  InProcessTransport(std::shared_ptr<Hub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}
  ~InProcessTransport() override {
    std::lock_guard<std::mutex> lock(hub_->mu);
    hub_->closed[rank_] = true;
    hub_->cv.notify_all();
  }
  int rank() const override { return rank_; }
  int size() const override { return hub_->n; }
  std::string peer_name(int peer) const override {
    return "node " + std::to_string(peer) + " (in-process)";
  }

  Status send(int peer, MessageType type, std::span<const uint8_t> payload, double) override {
    CHECK(peer >= 0 && peer < hub_->n && peer != rank_);
    Message m{type, std::vector<uint8_t>(payload.begin(), payload.end())};
    {
      std::lock_guard<std::mutex> lock(hub_->mu);
      if (hub_->closed[peer]) return Status::error(peer_name(peer) + " closed the connection", util::Status::Code::kLostPeer);
      hub_->boxes[size_t(peer) * hub_->n + rank_].q.push_back(std::move(m));
      hub_->cv.notify_all();
    }
    counters_.bytes_sent += kHeaderBytes + payload.size();
    counters_.frames_sent++;
    return {};
  }

  Expected<Message> recv(int peer, double timeout_s) override {
    CHECK(peer >= 0 && peer < hub_->n && peer != rank_);
    std::unique_lock<std::mutex> lock(hub_->mu);
    auto& box = hub_->boxes[size_t(rank_) * hub_->n + peer];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (box.q.empty()) {
      if (hub_->closed[peer]) return Status::error(peer_name(peer) + " closed the connection", util::Status::Code::kLostPeer);
      if (hub_->cv.wait_until(lock, deadline) == std::cv_status::timeout && box.q.empty()) {
        if (hub_->closed[peer]) return Status::error(peer_name(peer) + " closed the connection", util::Status::Code::kLostPeer);
        return Status::error(timeout_message(peer_name(peer), timeout_s), util::Status::Code::kTimeout);
      }
    }
    Message m = std::move(box.q.front());
    box.q.pop_front();
    lock.unlock();
    counters_.bytes_received += kHeaderBytes + m.payload.size();
    counters_.frames_received++;
    return m;
  }

  ByteCounters counters() const override { return counters_; }
  void reset_counters() override { counters_ = {}; }

 private:
  std::shared_ptr<Hub> hub_;
  int rank_;
  ByteCounters counters_;
};

}  // namespace

std::vector<std::unique_ptr<Transport>> make_in_process_cluster(int n) {
  CHECK(n >= 1);
  auto hub = std::make_shared<Hub>(n);
  std::vector<std::unique_ptr<Transport>> out;
  for (int i = 0; i < n; ++i) out.push_back(std::make_unique<InProcessTransport>(hub, i));
  return out;
}

}  // namespace net
