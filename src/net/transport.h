// transport.h: the Transport interface that collectives and the runtime talk through:
// rank r of size N sends typed messages to, and receives them from, any other rank. Each
// (sender, receiver) pair is a FIFO channel. InProcessTransport connects N ranks inside
// one process with thread-safe queues (tests, single-process multi-node simulation);
// TcpTransport (tcp_transport.h) connects N processes over TCP; the MPI transport
// (mpi_transport.h) the ranks of an mpirun or srun job.
// A Transport object belongs to one node and is driven by one thread at a time; only the
// hub behind InProcessTransport is shared between threads. Exception: TcpTransport's
// send/recv to different peers touch only that peer's connection, so one thread per peer
// may use them at once (the root streams weights to every worker so); the MPI transport
// allows the same (its MPI calls are serialized under a mutex).
// Deliberately no collectives here (collectives.h) and no knowledge of payloads.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "net/socket.h"

namespace net {

struct SendItem {
  int peer;
  MessageType type;
  std::span<const uint8_t> payload;
};
struct RecvItem {
  int peer;
  MessageType type;  // anything else (a kError included) fails the exchange
  Message* out;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "worker 10.0.0.2:9000", "node 3 (in-process)": used in every error message.
  virtual std::string peer_name(int peer) const = 0;

  virtual Status send(int peer, MessageType type, std::span<const uint8_t> payload, double timeout_s) = 0;
  // The next message from `peer`, whatever its type; waits up to timeout_s.
  virtual Expected<Message> recv(int peer, double timeout_s) = 0;
  // As recv, refusing any other type (a kError becomes "<peer> gave up: ...").
  Expected<Message> recv_expect(int peer, MessageType type, double timeout_s);

  // Performs every send and every receive, concurrently where the transport can, so that
  // ranks that all send before they receive cannot deadlock on full socket buffers. At
  // most one receive per peer. The default sends everything, then receives.
  virtual Status exchange(std::span<const SendItem> sends, std::span<const RecvItem> recvs, double timeout_s);

  // A native all-reduce (MPI_Allreduce under MPI): x becomes the sum over every rank, the
  // same on all, carried as f32 or (f16) as f16. Transports without one return an error.
  virtual Status native_sum(std::span<float> x, bool f16, double timeout_s);
  // The measured time of one native_sum of `bytes` per rank, in µs; negative: none.
  virtual double native_sum_us(size_t bytes) const { return -1; }

  // Bytes of whole frames (28-byte header included, and the 16-byte tag on a sealed TCP
  // link) since the last reset; the in-process
  // transport counts as if it framed its messages, so formulas hold for both.
  virtual ByteCounters counters() const = 0;
  virtual void reset_counters() = 0;
};

// N connected in-process transports; result[i] has rank i.
std::vector<std::unique_ptr<Transport>> make_in_process_cluster(int n);

}  // namespace net
