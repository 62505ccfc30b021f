// make_model.cc: `shardlm make-model --shape NAME --type T OUT`: writes a random-weight
// model of a named shape (for benchmarks of speed and transfer; its output is noise).
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "model/synthetic.h"
#include "util/timer.h"

namespace cli {

Command add_make_model(CLI::App& app) {
  auto* cmd = app.add_subcommand("make-model", "write a random-weight model of a named shape");
  auto shape = std::make_shared<std::string>("toy");
  auto type_name = std::make_shared<std::string>("Q4_0");
  auto out = std::make_shared<std::string>();
  auto seed = std::make_shared<uint64_t>(1);
  auto layers = std::make_shared<int>(0);
  cmd->add_option("--shape", *shape, std::string("one of: ") + model::shape_names())->capture_default_str();
  cmd->add_option("--type", *type_name, "weight type")->capture_default_str();
  cmd->add_option("--layers", *layers, "override the layer count (0: the shape's)");
  cmd->add_option("--seed", *seed)->capture_default_str();
  cmd->add_option("output", *out, "output GGUF")->required();
  return [=]() {
    auto s = model::shape_by_name(*shape);
    if (!s) return fail("unknown shape '" + *shape + "'; use one of: " + model::shape_names());
    if (*layers > 0) s->n_layers = *layers;
    auto type = tensor::type_from_name(*type_name);
    if (!type) return fail("unknown type '" + *type_name + "'");
    util::Timer timer;
    util::Status st = model::write_synthetic_model(*out, *s, *type, *seed);
    if (!st.ok()) return fail(st.message());
    std::fprintf(stderr, "wrote %s (%s, %s) in %.1f s\n", out->c_str(), shape->c_str(), type_name->c_str(),
                 timer.seconds());
    return 0;
  };
}

}  // namespace cli
