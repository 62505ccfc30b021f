// mpi.cc: `--transport mpi`: every rank of an mpirun or srun job runs the same command
// line, and main() parses it on every rank with the same flags (cli/flags.cc; files only
// the root opens are checked on rank 0 alone: root_file()). Then MPI is started
// (net/mpi_transport.h); rank 0 runs the command as the root over the job's transport
// (ClusterCliOptions::world, read by cluster_options()), every other rank serves one
// session (runtime/worker.h) from the same parsed options: -t, --device, the cluster key,
// and -m with --model-local. So the other ranks need no model file.
// The job ends with MPI_Finalize when every rank succeeded, else with MPI_Abort: a root
// that gives up does not leave workers waiting, and mpirun names the rank that failed.
// Deliberately no recovery and no second session: the job is the session.
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "cli/options.h"
#include "net/cluster_key.h"
#include "net/mpi_transport.h"
#include "runtime/worker.h"

#ifndef SHARDLM_VERSION
#define SHARDLM_VERSION "dev"
#endif

namespace cli {

namespace {

// A failed rank: its message, then the whole job ends (the job's transport is closed
// first). Workers wait a moment so that the root's own account of the failure (it names
// the rank) comes first.
int end_with(int rc, const std::string& msg, int rank, std::shared_ptr<net::Transport>* world) {
  if (!msg.empty()) std::fprintf(stderr, "error: %s%s\n", rank > 0 ? ("MPI rank " + std::to_string(rank) + ": ").c_str() : "", msg.c_str());
  if (rc != 0 && rank > 0) std::this_thread::sleep_for(std::chrono::seconds(2));
  world->reset();
  net::mpi_end(rc);
  return rc;
}

}  // namespace

int run_mpi(const Command& command) {
  const ClusterCliOptions& c = *command.cluster;
  const RunOptions& r = *command.options;
  std::vector<std::string> warnings;
  auto key = net::resolve_cluster_key(c.key.key, c.key.key_file, &warnings);
  if (!key) return fail(key.error());
  net::MpiOptions mo;
  mo.cluster_key = *key;
  mo.software_version = SHARDLM_VERSION;
  std::shared_ptr<net::Transport> world;
  auto t = net::mpi_start(mo);
  if (!t) return end_with(1, t.error(), 0, &world);
  world = std::move(*t);
  const int rank = world->rank();
  if (rank == 0) {
    command.cluster->world = world;
    const int rc = command.run();
    command.cluster->world.reset();
    return end_with(rc, "", 0, &world);
  }
  runtime::WorkerOptions wo;
  wo.threads = r.threads;
  wo.software_version = SHARDLM_VERSION;
  if (std::string e = worker_device(r.device, &wo); !e.empty()) return end_with(1, e, rank, &world);
  // A silent root is no reason to end: it may be loading a large model, or serving nobody;
  // if it dies, mpirun ends the job.
  wo.setup_timeout_s = wo.idle_timeout_s = 1e9;
  if (c.model_local) wo.model_path = r.model;
  util::Status st = runtime::run_worker_session(*world, wo);
  return end_with(st.ok() ? 0 : 1, st.ok() ? "" : st.message(), rank, &world);
}

}  // namespace cli
