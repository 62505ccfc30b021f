// loader.cc: GGUF -> LoadedModel.
#include "model/loader.h"

namespace model {

util::Expected<std::unique_ptr<LoadedModel>> load_model(const std::string& path) {
  auto file = gguf::File::open(path);
  if (!file) return file.status();
  auto m = std::make_unique<LoadedModel>();
  m->file = std::move(file).value();
  auto cfg = load_config(*m->file);
  if (!cfg) return util::Status::error(path + ": " + cfg.error());
  m->config = std::move(cfg).value();
  auto w = bind_weights(*m->file, m->config);
  if (!w) return util::Status::error(path + ": " + w.error());
  m->weights = std::move(w).value();
  return m;
}

}  // namespace model
