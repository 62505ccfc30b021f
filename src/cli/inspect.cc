// inspect.cc: `shardlm inspect FILE`: metadata (long arrays abbreviated) and tensor table.
#include <cstdio>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "model/config.h"

namespace cli {

Runner add_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "print a GGUF file's metadata and tensor table");
  auto path = std::make_shared<std::string>();
  auto all = std::make_shared<bool>(false);
  cmd->add_option("file", *path, "GGUF file")->required();
  cmd->add_flag("--all-tensors", *all, "list every tensor (default: abbreviate long tables)");
  return [path, all]() {
    auto f = gguf::File::open(*path);
    if (!f) return fail(f.error());
    gguf::print_info(**f, stdout, *all);
    auto cfg = model::load_config(**f);
    if (cfg) {
      std::printf("\nmodel: %s, dim %d, layers %d, heads %d (kv %d), head dim %d, ff %d, vocab %d\n",
                  cfg->arch_name.c_str(), cfg->dim, cfg->n_layers, cfg->n_heads, cfg->n_kv_heads,
                  cfg->head_dim, cfg->n_ff, cfg->n_vocab);
    } else {
      std::printf("\nnot a runnable model: %s\n", cfg.error().c_str());
    }
    return 0;
  };
}

}  // namespace cli
