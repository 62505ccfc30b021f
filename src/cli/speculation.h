// speculation.h: the speculative-decoding options of generate, chat and serve (--lookup,
// --draft-model, --draft-max, --fixed-guesses) and opening the draft model: its own
// one-node cluster on the root, checked to have the model's vocabulary and to fit beside it.
#pragma once
#include <memory>
#include <string>

#include "cli/options.h"
#include "model/loader.h"
#include "runtime/cluster.h"
#include "runtime/scheduler.h"
#include "util/thread_pool.h"

namespace cli {

struct SpecCliOptions {
  int lookup = 0;           // 0: off
  std::string draft_model;  // "": none
  int draft_max = 8;
  bool fixed = false;       // runtime::Speculation::adaptive = false
  // Rows a step may need beyond the decode row of each slot.
  int guess_rows() const { return std::max(lookup, draft_model.empty() ? 0 : draft_max); }
};

void add_spec_options(CLI::App* cmd, SpecCliOptions* o);

// The draft model, when there is one, and the scheduler's Speculation over it.
struct Speculator {
  std::unique_ptr<model::LoadedModel> model;
  std::unique_ptr<runtime::Cluster> cluster;
  runtime::Speculation spec;
};

// Opens what `o` asks for beside `target` (n_slots slots of ctx positions, the root's
// share of the target's weights: target_root_bytes); an error message, "" on success.
std::string open_speculator(const SpecCliOptions& o, const model::LoadedModel& target, const std::string& target_path,
                            const RunOptions& ro, int ctx, int n_slots, double target_root_bytes,
                            util::ThreadPool& pool, Speculator* out);

// Why a draft of draft_bytes (weights and KV cache) cannot sit beside the root's part of
// the model (root_bytes) in memory_bytes of memory ("" when it can).
std::string draft_unfit(double draft_bytes, double root_bytes, double memory_bytes);

}  // namespace cli
