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

// Each adds a subcommand and returns how to run it.
Command add_generate(CLI::App& app);
Command add_inspect(CLI::App& app);
Command add_quantize(CLI::App& app);
Command add_bench(CLI::App& app);
Command add_make_model(CLI::App& app);
Command add_plan(CLI::App& app);
Command add_worker(CLI::App& app);
Command add_serve(CLI::App& app);
Command add_chat(CLI::App& app);
Command add_perplexity(CLI::App& app);
Command add_keygen(CLI::App& app);
Command add_devices(CLI::App& app);
Command add_status(CLI::App& app);

// A parsed command under --transport mpi (mpi.cc): runs this rank of the job (rank 0: the
// command; others: a worker session from the same options) and ends MPI.
int run_mpi(const Command& command);

// Prints "error: msg" to stderr and returns 1.
int fail(const std::string& msg);

}  // namespace cli
