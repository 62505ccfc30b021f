// worker.h: the worker side of a cluster (`shardlm worker`): listens, joins one root's
// session after another, receives (or slices locally, with --model) its part of the
// model, then runs steps in lockstep with the root until the root says shutdown or
// vanishes (closed connection or silence), and goes back to listening. Slices are kept
// in memory across sessions keyed by (model hash, slice), so a root that reconnects with
// the same model and plan does not stream the weights again. Under MPI a rank runs one
// session on the job's transport (run_worker_session).
// Deliberately no tokenizer and no sampling decision: a worker returns candidates.
#pragma once
#include <cstdint>
#include <string>

#include "model/backend.h"

#include "util/status.h"

namespace net {
class Transport;
}

namespace runtime {

struct WorkerOptions {
  std::string host = "0.0.0.0";
  uint16_t port = 0;          // 0: pick a free one (printed)
  int threads = 1;
  std::string cluster_key;
  bool link_encryption = true;  // with a key: seal every frame (net/handshake.h)
  std::string model_path;     // optional: slice this file locally (its hash must match)
  std::string software_version = "dev";
  double idle_timeout_s = 3600;  // a session whose root is silent this long ends
  double setup_timeout_s = 60;   // the same, before the root's session setup
  int max_sessions = -1;         // < 0: serve forever (tests may bound it)
  int cache_slices = 4;          // slices kept across sessions
  model::BackendFactory backend;  // `--device`; empty: the CPU on `threads` threads
  std::string device;             // its description (speed replies); empty: model::cpu_description(threads)
};

// Runs until max_sessions sessions were served (forever by default). Prints
// "listening on HOST:PORT" on stdout once the port is open. Errors of a session are
// logged to stderr and the worker goes on; only a failure to listen is returned.
util::Status run_worker(const WorkerOptions& o);

// One session on a transport formed already (a rank of an MPI job): setup, weights (or
// --model-local slicing of o.model_path), steps until the root says shutdown. Uses
// o.threads, o.model_path and the timeouts.
util::Status run_worker_session(net::Transport& t, const WorkerOptions& o);

}  // namespace runtime
