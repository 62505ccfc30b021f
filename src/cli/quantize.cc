// quantize.cc: `shardlm quantize IN OUT TYPE` (see model/requantize.h for the rules).
#include <cstdio>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "cli/options.h"
#include "gguf/gguf.h"
#include "model/requantize.h"
#include "util/timer.h"

namespace cli {

Command add_quantize(CLI::App& app) {
  auto* cmd = app.add_subcommand("quantize", "rewrite a GGUF model's weight matrices in another type");
  auto in = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto type_name = std::make_shared<std::string>();
  auto threads = std::make_shared<int>(std::max(1u, std::thread::hardware_concurrency()));
  const char* kTypes = "F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS MXFP4";
  cmd->add_option("input", *in, "input GGUF")->required()->check(CLI::ExistingFile);
  cmd->add_option("output", *out, "output GGUF")->required();
  cmd->add_option("type", *type_name, kTypes)->required();
  add_threads_option(cmd, threads.get());
  return [=]() {
    auto type = tensor::type_from_name(*type_name);
    if (!type || *type == tensor::Type::Q8_1 || *type == tensor::Type::Q8_K)
      return fail("unknown or unsupported type '" + *type_name + "'; use one of " + kTypes);
    auto f = gguf::File::open(*in);
    if (!f) return fail(f.error());
    util::Timer timer;
    auto rep = model::requantize(**f, *out, *type, *threads);
    if (!rep) return fail(rep.error());
    // The first few fallbacks by name, then a count (a Q6_K SmolLM2 has 181 of them).
    size_t pos = 0;
    int shown = 0;
    for (size_t nl; shown < 5 && (nl = rep->notes.find('\n', pos)) != std::string::npos; pos = nl + 1, ++shown)
      std::fprintf(stderr, "note: %s\n", rep->notes.substr(pos, nl - pos).c_str());
    if (rep->n_fallback > shown) std::fprintf(stderr, "note: ... and %d more tensors like these\n", rep->n_fallback - shown);
    std::fprintf(stderr, "wrote %s: %.1f MB -> %.1f MB as %s in %.1f s (%d tensors fell back)\n", out->c_str(),
                 rep->bytes_in / 1e6, rep->bytes_out / 1e6, tensor::type_name(*type), timer.seconds(),
                 rep->n_fallback);
    return 0;
  };
}

}  // namespace cli
