// commands.h: the `shardlm` subcommands. Each registers its options on the CLI11 app and
// runs when chosen; each returns the process exit code. Errors go to stderr as one line
// saying what is wrong and what to do.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <string>
#include <type_traits>

namespace cli {

using Runner = std::function<int()>;
struct RunOptions;
struct ClusterCliOptions;

// A subcommand as registered: the function that runs it and, for the commands that run a
// model on a cluster, their parsed options (read by the other ranks of an MPI job).
struct Command {
  template <class F>
    requires std::is_invocable_r_v<int, F&>
  Command(F f) : run(std::move(f)) {}  // NOLINT: a plain command is its runner
  Command(Runner r, std::shared_ptr<RunOptions> ro, std::shared_ptr<ClusterCliOptions> co)
      : run(std::move(r)), options(std::move(ro)), cluster(std::move(co)) {}
  Runner run;
  std::shared_ptr<RunOptions> options;
  std::shared_ptr<ClusterCliOptions> cluster;
};

// The subcommands, in the order `shardlm --help` lists them. X(name): name.cc defines
// `Command add_name(CLI::App& app)`, which adds the subcommand and returns how to run it;
// main() adds every one. A new subcommand is its file and its name here.
#define SHARDLM_COMMANDS(X)                                                                      \
  X(generate) X(inspect) X(quantize) X(bench) X(make_model) X(plan) X(worker) X(serve) X(chat) \
  X(perplexity) X(keygen) X(devices) X(status)
#define SHARDLM_DECLARE_COMMAND(name) Command add_##name(CLI::App& app);
SHARDLM_COMMANDS(SHARDLM_DECLARE_COMMAND)
#undef SHARDLM_DECLARE_COMMAND

// A parsed command under --transport mpi (mpi.cc): runs this rank of the job (rank 0: the
// command; others: a worker session from the same options) and ends MPI.
int run_mpi(const Command& command);

// Prints "error: msg" to stderr and returns 1.
int fail(const std::string& msg);

}  // namespace cli
