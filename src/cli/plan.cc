// plan.cc: `shardlm plan`: how a model would be cut over N nodes and what it would cost
// per token (plan/ does the work). The model is a GGUF file (-m; only its metadata and
// tensor types are read, no weights) or a named synthetic shape (--shape, --type), so a
// 70B cluster can be planned without the file. Deliberately no network probing: α and β
// come from the command line (the runtime measures them when a cluster forms).
#include <cstdio>
#include <memory>
#include <vector>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/weights.h"
#include "model/synthetic.h"
#include "plan/cost.h"
#include "plan/plan.h"
#include "runtime/slicer.h"

namespace cli {

namespace {

struct PlanOptions {
  std::string model_path, shape_name, type_name = "Q4_0", sync = "q8_0";
  int nodes = 0, batch = 1, top_k = 40;
  std::vector<double> shares, mem_gbps = {10};
  double alpha_us = 50, beta_gbps = 1;
  bool shared_medium = false;
};

// The shape and per-layer matrix types of a GGUF model, as the runtime derives them from
// its bound weights (model/schema.h; matrices stay in the mapped file, unread).
util::Expected<plan::ModelShape> shape_from_file(const std::string& path) {
  auto f = gguf::File::open(path);
  if (!f) return f.status();
  auto cfg = model::load_config(**f);
  if (!cfg) return cfg.status();
  auto w = model::bind_weights(**f, *cfg);
  if (!w) return util::Status::error(path + ": " + w.error());
  plan::ModelShape s = runtime::shape_of(*cfg, *w);
  if (s.name.empty()) s.name = path;
  return s;
}

util::Expected<plan::ModelShape> shape_from_name(const std::string& name, const std::string& type_name) {
  auto sh = model::shape_by_name(name);
  if (!sh) return util::Status::error("unknown shape '" + name + "'; use one of: " + model::shape_names());
  auto type = tensor::type_from_name(type_name);
  if (!type) return util::Status::error("unknown type '" + type_name + "' (e.g. Q4_0, Q4_K, Q8_0, F16)");
  plan::ModelShape s;
  s.name = name;
  s.dim = sh->dim; s.n_layers = sh->n_layers; s.n_heads = sh->n_heads; s.n_kv_heads = sh->n_kv_heads;
  s.head_dim = sh->head_dim > 0 ? sh->head_dim : sh->dim / sh->n_heads; s.n_ff = sh->n_ff; s.n_vocab = sh->n_vocab;
  s.qkv_bias = sh->arch == "qwen2";
  s.qk_norm = sh->arch == "qwen3" || sh->arch == "qwen3moe" || sh->arch == "gemma3";
  s.qkv_bias = s.qkv_bias || sh->arch == "gpt-oss";
  if (sh->n_expert > 0)  // the MLP split is an expert's rows; the router stays F32 (make-model's)
    s.n_ff = sh->n_ff_exp, s.n_expert = sh->n_expert, s.n_expert_used = sh->n_expert_used;
  if (sh->sliding_window > 0) {  // every other layer windowed (gpt-oss), or 5 of 6 (gemma3)
    const int period = sh->arch == "gpt-oss" ? 2 : 6;
    s.n_swa = sh->sliding_window;
    for (int l = 0; l < s.n_layers; ++l) s.n_swa_layers += l % period < period - 1;
  }
  plan::set_all_types(s, *type);
  if (sh->expert_type)  // gpt-oss: the experts as published (MXFP4), whatever --type says of the rest
    s.layer.gate = s.layer.up = s.layer.down = *sh->expert_type;
  return s;
}

int run_plan(const PlanOptions& o) {
  if (o.model_path.empty() == o.shape_name.empty())
    return fail("give either -m FILE or --shape NAME (one of: " + std::string(model::shape_names()) + ")");
  auto shape = o.model_path.empty() ? shape_from_name(o.shape_name, o.type_name) : shape_from_file(o.model_path);
  if (!shape) return fail(shape.error());
  std::vector<double> caps = o.shares;
  if (caps.empty()) caps.assign(o.nodes > 0 ? o.nodes : 1, 1.0);
  if (o.nodes > 0 && static_cast<int>(caps.size()) != o.nodes)
    return fail("--nodes " + std::to_string(o.nodes) + " but --shares lists " + std::to_string(caps.size()) +
                " values; give one share per node (or drop --nodes)");
  plan::CostParams c;
  const bool exact = o.sync == "exact";
  if (exact) c.sync_type = tensor::Type::F32;  // only the step message's embedding rows
  else if (o.sync == "q8_0" || o.sync == "Q8_0") c.sync_type = tensor::Type::Q8_0;
  else if (o.sync == "f16" || o.sync == "F16") c.sync_type = tensor::Type::F16;
  else if (o.sync == "f32" || o.sync == "F32") c.sync_type = tensor::Type::F32;
  else return fail("--sync-type must be q8_0, f16, f32 or exact, not '" + o.sync + "'");
  if (c.sync_type == tensor::Type::Q8_0 && shape->dim % tensor::kQK != 0)
    return fail("dim " + std::to_string(shape->dim) + " is not a multiple of 32: use --sync-type f16");
  if (!(o.alpha_us >= 0) || !(o.beta_gbps > 0)) return fail("--link-latency-us must be >= 0 and --link-gbps > 0");
  if (o.batch < 1 || o.top_k < 0) return fail("--batch must be >= 1 and --top-k >= 0");
  for (double g : o.mem_gbps)
    if (!(g > 0)) return fail("--mem-gbps values must be positive");
  if (o.mem_gbps.size() != 1 && o.mem_gbps.size() != caps.size())
    return fail("--mem-gbps takes one value or one per node (" + std::to_string(caps.size()) + ")");
  c.link = plan::Link{o.alpha_us, o.beta_gbps, o.shared_medium};
  c.mem_gbps = o.mem_gbps;
  c.batch = o.batch;
  c.top_k = o.top_k;
  auto p = plan::make_plan(*shape, caps, exact && caps.size() > 1);
  if (!p) return fail(p.error());
  std::fputs(plan::format_plan(*p, c).c_str(), stdout);
  return 0;
}

}  // namespace

Command add_plan(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan", "show how a model is cut over N nodes and its cost per token");
  auto o = std::make_shared<PlanOptions>();
  cmd->add_option("-m,--model", o->model_path, "GGUF model (only metadata and tensor types are read)");
  cmd->add_option("--shape", o->shape_name, std::string("synthetic shape instead of a file: ") + model::shape_names());
  cmd->add_option("--type", o->type_name, "matrix type for --shape")->capture_default_str();
  cmd->add_option("--nodes", o->nodes, "number of nodes (default: one per share, else 1)");
  cmd->add_option("--shares", o->shares, "relative capacity of each node, e.g. 2,1,1")->delimiter(',');
  cmd->add_option("--link-latency-us", o->alpha_us, "link latency alpha in microseconds")->capture_default_str();
  cmd->add_option("--link-gbps", o->beta_gbps, "link bandwidth beta in Gbit/s")->capture_default_str();
  cmd->add_flag("--shared-medium", o->shared_medium, "all nodes share one medium (hub, Wi-Fi)");
  cmd->add_option("--sync-type", o->sync, "activation encoding on the wire: q8_0, f16 or f32; exact: 4 gathers per layer, bit-identical to one node")->capture_default_str();
  cmd->add_option("--mem-gbps", o->mem_gbps, "memory bandwidth GB/s: one value or one per node")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--batch", o->batch, "rows per step (prefill batch); all-reduces carry batch x D values")
      ->capture_default_str();
  cmd->add_option("--top-k", o->top_k, "sampling candidates each node returns")->capture_default_str();
  return [o]() { return run_plan(*o); };
}

}  // namespace cli
