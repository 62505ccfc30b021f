// mpi.cc: `--transport mpi`: every rank of an mpirun or srun job runs the same command
// line. main() hands it here before parsing: MPI is started (net/mpi_transport.h), rank 0
// runs the command as the root over the job's transport (cluster_options() picks it up
// through mpi_world()), every other rank reads only the options a worker needs (-t, -m
// with --model-local, the cluster key) and serves one session (runtime/worker.h). So the
// other ranks need no model file, and their command line is never checked beyond those.
// The job ends with MPI_Finalize when every rank succeeded, else with MPI_Abort: a root
// that gives up does not leave workers waiting, and mpirun names the rank that failed.
// Deliberately no recovery and no second session: the job is the session.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "net/cluster_key.h"
#include "net/mpi_transport.h"
#include "runtime/worker.h"

#ifndef SHARDLM_VERSION
#define SHARDLM_VERSION "dev"
#endif

namespace cli {

namespace {

std::shared_ptr<net::Transport> g_world;

struct RankOptions {
  int threads = std::max(1u, std::thread::hardware_concurrency());
  std::string model, cluster_key, cluster_key_file;
  bool model_local = false;
};

// The few options every rank reads itself, from the full command line; the rest is the
// root's (CLI11 leaves it as extras).
std::string parse_rank_options(int argc, char** argv, RankOptions* o) {
  CLI::App app;
  app.allow_extras();
  app.add_option("-t,--threads", o->threads);
  app.add_option("-m,--model", o->model);
  app.add_option("--cluster-key", o->cluster_key);
  app.add_option("--cluster-key-file", o->cluster_key_file);
  app.add_flag("--model-local", o->model_local);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return std::string("--transport mpi: ") + e.what();
  }
  if (o->threads < 1) o->threads = 1;
  return "";
}

// A failed rank: its message, then the whole job ends. Workers wait a moment so that the
// root's own account of the failure (it names the rank) comes first.
int end_with(int rc, const std::string& msg, int rank) {
  if (!msg.empty()) std::fprintf(stderr, "error: %s%s\n", rank > 0 ? ("MPI rank " + std::to_string(rank) + ": ").c_str() : "", msg.c_str());
  if (rc != 0 && rank > 0) std::this_thread::sleep_for(std::chrono::seconds(2));
  g_world.reset();
  net::mpi_end(rc);
  return rc;
}

}  // namespace

bool wants_mpi(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--transport=mpi") == 0) return true;
    if (std::strcmp(argv[i], "--transport") == 0 && i + 1 < argc && std::strcmp(argv[i + 1], "mpi") == 0) return true;
  }
  return false;
}

std::shared_ptr<net::Transport> mpi_world() { return g_world; }

int run_mpi(int argc, char** argv, const Runner& root) {
  RankOptions ro;
  if (std::string e = parse_rank_options(argc, argv, &ro); !e.empty()) return fail(e);
  std::vector<std::string> warnings;
  auto key = net::resolve_cluster_key(ro.cluster_key, ro.cluster_key_file, &warnings);
  if (!key) return fail(key.error());
  net::MpiOptions mo;
  mo.cluster_key = *key;
  mo.software_version = SHARDLM_VERSION;
  auto t = net::mpi_start(mo);
  if (!t) return end_with(1, t.error(), 0);
  g_world = std::move(*t);
  const int rank = g_world->rank();
  if (rank == 0) {
    for (const auto& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
    return end_with(root(), "", 0);
  }
  runtime::WorkerOptions wo;
  wo.threads = ro.threads;
  wo.software_version = SHARDLM_VERSION;
  // A silent root is no reason to end: it may be loading a large model, or serving nobody;
  // if it dies, mpirun ends the job.
  wo.setup_timeout_s = wo.idle_timeout_s = 1e9;
  if (ro.model_local) wo.model_path = ro.model;
  util::Status st = runtime::run_worker_session(*g_world, wo);
  return end_with(st.ok() ? 0 : 1, st.ok() ? "" : st.message(), rank);
}

}  // namespace cli
