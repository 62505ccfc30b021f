// main.cc: `shardlm` entry point: dispatches to the subcommands in cli/.
#include <cstdio>
#include <map>

#include "cli/commands.h"

#ifndef SHARDLM_VERSION
#define SHARDLM_VERSION "dev"
#endif

namespace cli {
int fail(const std::string& msg) {
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  return 1;
}
}  // namespace cli

int main(int argc, char** argv) {
  CLI::App app{"shardlm: run large language models across several ordinary computers"};
  app.set_version_flag("--version", std::string("shardlm ") + SHARDLM_VERSION);
  app.require_subcommand(1);
  std::map<CLI::App*, cli::Runner> runners;
  auto add = [&](cli::Runner (*fn)(CLI::App&)) {
    cli::Runner r = fn(app);
    runners[app.get_subcommands({}).back()] = std::move(r);
  };
  add(cli::add_generate);
  add(cli::add_inspect);
  add(cli::add_quantize);
  add(cli::add_bench);
  add(cli::add_make_model);
  add(cli::add_plan);
  add(cli::add_worker);
  add(cli::add_serve);
  add(cli::add_chat);
  add(cli::add_perplexity);
  add(cli::add_keygen);
  add(cli::add_devices);
  const cli::Runner parse_and_run = [&]() -> int {
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    }
    for (auto& [sub, run] : runners)
      if (sub->parsed()) return run();
    return cli::fail("no subcommand given; run `shardlm --help`");
  };
  // Every rank of an MPI job runs this command line; rank 0 parses and runs it (cli/mpi.cc).
  if (cli::wants_mpi(argc, argv)) return cli::run_mpi(argc, argv, parse_and_run);
  return parse_and_run();
}
