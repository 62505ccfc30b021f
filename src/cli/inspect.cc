// inspect.cc: `shardlm inspect FILE`: metadata (long arrays abbreviated) and tensor table.
#include <cstdio>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/weights.h"

namespace cli {

Command add_inspect(CLI::App& app) {
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
      if (cfg->n_swa > 0) {
        int n_swa_layers = 0;
        for (int l = 0; l < cfg->n_layers; ++l) n_swa_layers += cfg->is_swa(l);
        std::printf("sliding window: %d positions on %d of %d layers (period %d, the last of each global), rope base %g "
                    "(windowed) / %g (global); a windowed layer's KV cache keeps window + batch - 1 rows\n",
                    cfg->n_swa, n_swa_layers, cfg->n_layers, cfg->swa_pattern, cfg->rope_base_swa, cfg->rope_base);
      }
      if (cfg->moe()) {
        auto w = model::bind_weights(**f, *cfg);
        std::printf("experts: %d per layer of %d rows, %d used per token (weights %s%s); the router is replicated, "
                    "every expert's rows are split over the nodes\n",
                    cfg->n_expert, cfg->n_ff, cfg->n_expert_used, cfg->expert_norm ? "normalised to sum 1" : "not normalised",
                    cfg->expert_scale != 0.0f && cfg->expert_scale != 1.0f ? (", scaled by " + std::to_string(cfg->expert_scale)).c_str() : "");
        if (w) {
          size_t held = 0;
          for (const auto& l : w->layers)
            for (const model::Matrix* m : {&l.gate_exps, &l.up_exps, &l.down_exps}) held += m->bytes();
          std::printf("expert weights: %.1f MB held, %.1f MB read per token; all weights read per token: %.1f MB\n",
                      held / 1e6, double(held) / cfg->n_expert * cfg->n_expert_used / 1e6, w->matrix_bytes(*cfg) / 1e6);
        } else {
          std::printf("not a runnable model: %s\n", w.error().c_str());
        }
      }
      if (cfg->logit_softcap > 0) std::printf("final logit soft-cap: %g\n", cfg->logit_softcap);
    } else {
      std::printf("\nnot a runnable model: %s\n", cfg.error().c_str());
    }
    return 0;
  };
}

}  // namespace cli
