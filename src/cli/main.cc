// main.cc: `shardlm` entry point: dispatches to the subcommands in cli/.
#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "cli/options.h"

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
  std::map<CLI::App*, cli::Command> commands;
  auto add = [&](cli::Command (*fn)(CLI::App&)) {
    cli::Command c = fn(app);
    commands.emplace(app.get_subcommands({}).back(), std::move(c));
  };
#define SHARDLM_ADD_COMMAND(name) add(cli::add_##name);
  SHARDLM_COMMANDS(SHARDLM_ADD_COMMAND)
#undef SHARDLM_ADD_COMMAND
  // Every rank of an MPI job parses the same command line (files only the root opens are
  // checked on rank 0 alone: cli::root_file).
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto& [sub, command] : commands) {
    if (!sub->parsed()) continue;
    if (command.cluster && command.cluster->transport == "mpi") return cli::run_mpi(command);
    return command.run();
  }
  return cli::fail("no subcommand given; run `shardlm --help`");
}
