// commands.h: the `shardlm` subcommands. Each registers its options on the CLI11 app and
// runs when chosen; each returns the process exit code. Errors go to stderr as one line
// saying what is wrong and what to do.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace cli {

using Runner = std::function<int()>;

// Each adds a subcommand and returns the function that runs it.
Runner add_generate(CLI::App& app);
Runner add_inspect(CLI::App& app);
Runner add_quantize(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_make_model(CLI::App& app);
Runner add_plan(CLI::App& app);
Runner add_worker(CLI::App& app);
Runner add_serve(CLI::App& app);
Runner add_chat(CLI::App& app);
Runner add_perplexity(CLI::App& app);
Runner add_keygen(CLI::App& app);
Runner add_devices(CLI::App& app);

// --transport mpi (mpi.cc): whether the command line asks for it; runs this rank of the
// job (rank 0: `root`, the parsed command; others: a worker session) and ends MPI.
bool wants_mpi(int argc, char** argv);
int run_mpi(int argc, char** argv, const Runner& root);

// Prints "error: msg" to stderr and returns 1.
int fail(const std::string& msg);

}  // namespace cli
