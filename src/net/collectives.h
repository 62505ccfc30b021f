// collectives.h: all-reduce of float vectors, broadcast and gather of byte blobs over a
// Transport. Activations travel as Q8_0 by default (34 bytes per 32 values; a short tail
// block is zero-padded), or F16, or F32. Every all-reduce leaves a BIT-IDENTICAL vector
// on every node:
//   all-gather: every node encodes its partial once and sends the same bytes to all; every
//               node decodes all N encodings (its own included) and sums them in rank
//               order 0..N-1.
//   star:       rank 0 sums the decoded partials (its own decoded too) in rank order,
//               encodes the sum once and sends those bytes; everyone, rank 0 included,
//               decodes the same bytes.
//   ring:       reduce-scatter then all-gather over chunks of whole 32-blocks; chunk c's
//               owner (rank c) encodes its final sum once, those bytes are forwarded
//               unchanged around the ring and decoded by everyone, the owner included.
//               Chunk c is summed in the order c+1, c+2, ..., c (mod N), re-encoded at each
//               hop, so its rounding differs from all-gather's (still identical on all nodes).
//   mpi:        MPI_Allreduce (Transport::native_sum; --transport mpi only), F32 or F16
//               (each partial sum rounded to f16); MPI's algorithm and order, the same
//               result on every rank (OpenMPI's algorithms for a commutative op).
// With F32 all-gather and star are exact float sums in rank order; ring is the exact
// float sum in its chunk order. With N = 1 all_reduce leaves x untouched.
// A batch of B rows is one vector of B*dim values: one message per peer per step.
// Deliberately no algorithm selection from link measurements: the caller chooses.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "net/transport.h"

namespace net {

enum class SyncType : uint8_t { kQ8_0 = 0, kF16 = 1, kF32 = 2 };
enum class AllReduceAlgo : uint8_t { kAllGather = 0, kStar = 1, kRing = 2, kMpi = 3 };
const char* sync_type_name(SyncType t);      // "q8_0", "f16", "f32"
const char* algo_name(AllReduceAlgo a);      // "all-gather", "star", "ring", "mpi"
std::optional<SyncType> sync_type_from_name(std::string_view s);
std::optional<AllReduceAlgo> algo_from_name(std::string_view s);

// Bytes of n values encoded as t (Q8_0: ceil(n / 32) * 34).
size_t encoded_bytes(SyncType t, size_t n);
void encode_values(SyncType t, std::span<const float> x, uint8_t* out);  // encoded_bytes(t, x.size())
void decode_values(SyncType t, const uint8_t* in, std::span<float> x);

// Every collective message starts with this header: op, sync type, step, offset, count.
constexpr size_t kCollectiveHeaderBytes = 12;
// The element range [first, second) of ring chunk c for n values on n_nodes nodes
// (contiguous runs of whole 32-blocks, as even as possible; may be empty).
std::pair<size_t, size_t> ring_chunk(size_t n, int n_nodes, int c);

struct CollectiveOptions {
  SyncType sync = SyncType::kQ8_0;
  AllReduceAlgo algo = AllReduceAlgo::kAllGather;
  double timeout_s = 60.0;  // per collective: a peer silent this long is reported
};

struct CollectiveStats {
  uint64_t calls = 0;
  double seconds = 0;                       // wall time inside collectives
  uint64_t bytes_sent = 0, bytes_received = 0;  // whole frames
};

class Collectives {
 public:
  explicit Collectives(Transport& t, CollectiveOptions opt = {}) : t_(t), opt_(opt) {}

  // In place: x becomes the element-wise sum of every node's x (see the header comment).
  Status all_reduce(std::span<float> x) { return all_reduce(x, opt_.algo, opt_.sync); }
  Status all_reduce(std::span<float> x, AllReduceAlgo algo, SyncType sync);
  // Row-wise all-gather of byte segments (one-shot: every node sends its segments to every
  // peer). buf holds n_rows rows of row_bytes; this node filled bytes [offset, offset + len)
  // of every row. On return every row is whole on every node. The nodes' segments must
  // tile the row exactly (checked: a gap or overlap is reported as a configuration error).
  Status all_gather_rows(uint8_t* buf, size_t n_rows, size_t row_bytes, size_t offset, size_t len);
  // Rank `root`'s blob replaces everyone else's.
  Status broadcast(int root, std::vector<uint8_t>* blob);
  // Rank `root` gets every node's blob by rank (its own included); others get {}.
  Expected<std::vector<std::vector<uint8_t>>> gather(int root, std::span<const uint8_t> blob);

  const CollectiveStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }
  const CollectiveOptions& options() const { return opt_; }

  // Frame bytes one all_reduce of n values makes `rank` send / receive (mpi: the
  // payload, which is what the MPI transport counts; MPI's own traffic is not seen).
  static uint64_t all_reduce_bytes_sent(AllReduceAlgo a, SyncType t, int n_nodes, int rank, size_t n);
  static uint64_t all_reduce_bytes_received(AllReduceAlgo a, SyncType t, int n_nodes, int rank, size_t n);

 private:
  // One-shot exchange: `mine` to every peer, (*msgs)[p] from every peer p (own slot empty).
  Status send_to_all_receive_from_all(std::span<const uint8_t> mine, std::vector<Message>* msgs);
  Status all_gather_sum(std::span<float> x, SyncType sync);
  Status star(std::span<float> x, SyncType sync);
  Status ring(std::span<float> x, SyncType sync);
  Transport& t_;
  CollectiveOptions opt_;
  CollectiveStats stats_;
  std::vector<float> tmp_;  // decode scratch
};

}  // namespace net
