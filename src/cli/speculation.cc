// speculation.cc: speculative-decoding options and the draft model (see speculation.h).
#include "cli/speculation.h"

#include "model/kv_cache.h"
#include "tokenizer/tokenizer.h"
#include "util/memory.h"

#ifndef SHARDLM_VERSION
#define SHARDLM_VERSION "dev"
#endif

namespace cli {

namespace {
// CLI11's own range check prints only the range; these say what to do instead.
std::string guesses(const std::string& v, const char* instead) {
  int n = 0;
  try {
    size_t used = 0;
    n = std::stoi(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
  } catch (...) {
    return "takes a whole number of guesses, not '" + v + "'";
  }
  if (n < 1 || n > runtime::kMaxGuesses)
    return v + " is not 1 to " + std::to_string(runtime::kMaxGuesses) + " guesses per step" + instead;
  return "";
}
}  // namespace

void add_spec_options(CLI::App* cmd, SpecCliOptions* o) {
  cmd->add_option("--lookup", o->lookup,
                  "speculative decoding: guess up to N tokens per step by finding the text's last few tokens "
                  "earlier in the prompt or reply (copying, editing, quoting); the output is unchanged")
      ->check([](const std::string& v) { return guesses(v, "; leave --lookup out to decode without it"); });
  cmd->add_option("--draft-model", o->draft_model,
                  "speculative decoding: a small GGUF model with the same vocabulary guesses the next tokens on "
                  "the root; the output is unchanged")
      ->check(root_file());
  cmd->add_option("--draft-max", o->draft_max, "guesses per step from --draft-model at most")
      ->check([](const std::string& v) { return guesses(v, ""); })
      ->capture_default_str();
  cmd->add_flag("--fixed-guesses", o->fixed,
                "verify every guess there is, instead of as many as the measured acceptance and row cost "
                "make worth it (for measurements)");
}

std::string draft_unfit(double draft_bytes, double root_bytes, double memory_bytes) {
  if (draft_bytes + root_bytes <= 0.8 * memory_bytes) return "";
  return "the draft model needs " + std::to_string(int64_t(draft_bytes / 1e6)) + " MB (weights and KV cache) beside " +
         std::to_string(int64_t(root_bytes / 1e6)) + " MB of the model on the root, more than this machine can hold (" +
         std::to_string(int64_t(memory_bytes / 1e6)) + " MB of memory); use a smaller draft model, lower --ctx or "
         "--parallel, or use --lookup instead";
}

std::string open_speculator(const SpecCliOptions& o, const model::LoadedModel& target, const std::string& target_path,
                            const RunOptions& ro, int ctx, int n_slots, double target_root_bytes,
                            util::ThreadPool& pool, Speculator* out) {
  out->spec.lookup = o.lookup;
  out->spec.adaptive = !o.fixed;
  if (o.draft_model.empty()) return "";
  auto m = model::load_model(o.draft_model);
  if (!m) return "--draft-model: " + m.error();
  const model::Config& dc = (*m)->config;
  const double draft_file = double((*m)->file->file_size()), target_file = double(target.file->file_size());
  if (draft_file >= target_file)
    return "--draft-model " + o.draft_model + " (" + std::to_string(int64_t(draft_file / 1e6)) +
           " MB) is not smaller than the model " + target_path + " (" + std::to_string(int64_t(target_file / 1e6)) +
           " MB); a draft model must be much smaller to save time";
  // The same vocabulary: the same token strings under the same ids.
  auto dt = tokenizer::Tokenizer::from_gguf(*(*m)->file);
  if (!dt) return "--draft-model " + o.draft_model + ": " + dt.error();
  auto tt = tokenizer::Tokenizer::from_gguf(*target.file);
  if (!tt) return target_path + ": " + tt.error();
  std::string differ;
  if (dc.n_vocab != target.config.n_vocab || (*dt)->n_vocab() != (*tt)->n_vocab()) {
    differ = std::to_string((*dt)->n_vocab()) + " tokens against the model's " + std::to_string((*tt)->n_vocab());
  } else {
    for (int32_t id = 0; id < (*tt)->n_vocab() && differ.empty(); ++id)
      if ((*dt)->piece(id, true) != (*tt)->piece(id, true))
        differ = "token " + std::to_string(id) + " is '" + (*dt)->piece(id, true) + "' there and '" +
                 (*tt)->piece(id, true) + "' in the model";
  }
  if (!differ.empty())
    return "--draft-model " + o.draft_model + " has another vocabulary (" + differ +
           "); a draft model must share the model's tokenizer (the same family, e.g. a smaller size or type)";
  const double kv =
      double(model::KvCache::bytes_per_position(dc.n_layers, dc.n_kv_heads, dc.head_dim, ro.run.kv_type)) * ctx * n_slots;
  if (std::string e = draft_unfit(draft_file + kv, target_root_bytes, util::physical_memory_bytes()); !e.empty())
    return e;
  runtime::ClusterOptions copt;  // one node: the draft runs where the root is
  copt.run = ro.run;
  copt.run.ctx = ctx;
  copt.run.n_slots = n_slots;
  copt.run.max_batch = ro.batch + n_slots * (1 + o.draft_max);
  copt.run.decode_lanes = false;  // the draft's decode rows in vec_dot order (--fast-batches is the model's)
  copt.progress = false;
  copt.software_version = SHARDLM_VERSION;
  auto cl = runtime::Cluster::start(**m, o.draft_model, copt, pool);
  if (!cl) return "--draft-model: " + cl.error();
  out->model = std::move(*m);
  out->cluster = std::move(*cl);
  out->spec.draft = out->cluster.get();
  out->spec.draft_max = o.draft_max;
  out->spec.draft_cost_ratio = draft_file / std::max(1.0, target_root_bytes);
  return "";
}

}  // namespace cli
