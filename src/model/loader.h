// loader.h: opens a GGUF model file and binds config and weights in one call (an MoE
// model's experts are mapped in at once, see loader.cc).
#pragma once
#include <memory>
#include <string>

#include "gguf/gguf.h"
#include "model/config.h"
#include "model/weights.h"
#include "util/status.h"

namespace model {

struct LoadedModel {
  std::unique_ptr<gguf::File> file;
  Config config;
  Weights weights;
};

// Errors name the file and the problem (not GGUF, truncated, unknown architecture, a
// missing or misshapen tensor) and what to do.
util::Expected<std::unique_ptr<LoadedModel>> load_model(const std::string& path);

}  // namespace model
