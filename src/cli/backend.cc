// backend.cc: opens the model, tokenizer, chat template, cluster and engine for `serve`
// and `chat`.
#include "cli/backend.h"

#include <cstdio>

#include "model/backend.h"
#include "runtime/node.h"
#include "util/memory.h"

#ifndef SHARDLM_VERSION
#define SHARDLM_VERSION "dev"
#endif

namespace cli {

namespace {
// "512M" -> bytes; -1 when it is not a size.
int64_t parse_bytes(const std::string& v) {
  size_t i = 0;
  while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i;
  if (i == 0 || i > 15) return -1;
  int64_t n = std::stoll(v.substr(0, i));
  std::string suffix = v.substr(i);
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  if (suffix.size() == 2 && (suffix[1] == 'i' || suffix[1] == 'I')) suffix.pop_back();
  if (suffix.empty()) return n;
  if (suffix.size() != 1) return -1;
  const char u = char(suffix[0] | 0x20);
  const int shift = u == 'k' ? 10 : u == 'm' ? 20 : u == 'g' ? 30 : u == 't' ? 40 : -1;
  if (shift < 0 || n > (int64_t(1) << (62 - shift))) return -1;
  return n << shift;
}
}  // namespace

std::string slots_unfit(const model::Config& c, const RunOptions& o, int ctx, int n_slots, int* kv_blocks) {
  if (n_slots < 1) return "--parallel must be at least 1 (the requests that run at once)";
  if (n_slots > runtime::kMaxSlots) return "--parallel must be at most " + std::to_string(runtime::kMaxSlots);
  if (kv_blocks) *kv_blocks = 0;
  if (!o.kv_memory.empty()) {
    const int64_t bytes = parse_bytes(o.kv_memory);
    if (bytes < 0) return "--kv-memory must be a size in bytes (such as 2G or 512M), not '" + o.kv_memory + "'";
    const double have = double(util::physical_memory_bytes());
    if (double(bytes) > have)
      return "--kv-memory " + o.kv_memory + " (" + std::to_string(bytes / 1000000) +
             " MB) is more than this machine's memory (" + std::to_string(int64_t(have / 1e6)) + " MB)";
    // A node holding every KV head: each block, and each running request's sliding-window rings.
    const std::vector<int> layer_ctx = model::kv_layer_ctx(c, ctx, o.batch + n_slots);
    const double block = double(model::KvCache::bytes_for(c.n_kv_heads, c.head_dim, ctx, o.run.kv_type, 0, layer_ctx, 1));
    const double rings =
        double(model::KvCache::bytes_for(c.n_kv_heads, c.head_dim, ctx, o.run.kv_type, n_slots, layer_ctx, 1)) - block;
    const int64_t blocks = int64_t(std::max(0.0, double(bytes) - rings) / block);
    const int64_t one = model::kv_blocks_for(ctx);
    if (blocks < one)
      return "--kv-memory " + o.kv_memory + " holds " + std::to_string(blocks * model::kKvBlockRows) +
             " positions (blocks of " + std::to_string(model::kKvBlockRows) + ", " + std::to_string(int64_t(block)) +
             " bytes each" + (rings > 0 ? ", after the sliding-window rings of --parallel requests" : "") +
             "), less than one context of --ctx " + std::to_string(ctx) + ": give at least " +
             std::to_string(int64_t(double(one) * block + rings)) + " bytes";
    if (kv_blocks) *kv_blocks = int(std::min<int64_t>(blocks, int64_t(1) << 30));
    return "";
  }
  const runtime::MemoryFit fit = runtime::memory_fit(c, c.n_kv_heads, o.run.kv_type, ctx, n_slots, o.batch + n_slots, 0, 0.8);
  if (!fit.fits)
    return "--parallel " + std::to_string(n_slots) + " slots of " + std::to_string(ctx) + " positions need " +
           std::to_string(int64_t(fit.kv_bytes / 1e6)) +
           " MB of KV cache on the root, more than this machine can hold (" + std::to_string(int64_t(fit.have / 1e6)) +
           " MB of memory); lower --parallel or --ctx, or use --kv-type q8_0";
  return "";
}

int host_cache_blocks(const model::Config& c, const RunOptions& o, int ctx, int n_slots, int kv_blocks,
                      double weight_bytes) {
  if (o.cache_ram_mib == 0) return 0;
  // What the root would hold with every KV head (the whole model's entries; a worker holds
  // its share), of the 80 % of its memory its checks allow, after its weights and the pool.
  const runtime::MemoryFit f = runtime::memory_fit(c, c.n_kv_heads, o.run.kv_type, ctx, n_slots, o.batch + n_slots,
                                                   weight_bytes, 0.8, kv_blocks, 1);
  const double entry = f.host_bytes, room = std::max(0.0, 0.8 * f.have - (f.need - entry));
  constexpr int64_t kMost = int64_t(1) << 30;
  const int64_t asked = o.cache_ram_mib < 0 ? kMost : (std::min(o.cache_ram_mib, int64_t(1) << 40) << 20) / int64_t(entry);
  return int(std::min({kMost, asked, int64_t(room / entry)}));
}

std::string kv_pool_options(const model::Config& c, const RunOptions& o, int ctx, int n_slots, double weight_bytes,
                            runtime::ClusterOptions* out) {
  int kv_blocks = 0;
  if (std::string e = slots_unfit(c, o, ctx, n_slots, &kv_blocks); !e.empty()) return e;
  out->run.kv_blocks = kv_blocks;
  // None where prefixes are never shared (sliding-window rings per slot: Cluster::no_prefix_sharing),
  // so no node counts it. A Vulkan node keeps its entries in host memory as a CPU node does.
  out->run.kv_host_blocks = c.n_swa > 0 ? 0 : host_cache_blocks(c, o, ctx, n_slots, kv_blocks, weight_bytes);
  return "";
}

std::string open_backend(const RunOptions& o, const ClusterCliOptions& co, const SpecCliOptions& so,
                         const std::string& chat_template, Backend* b, int n_slots, bool need_chat) {
  auto m = model::load_model(o.model);
  if (!m) return m.error();
  b->model = std::move(*m);
  auto tok = tokenizer::Tokenizer::from_gguf(*b->model->file);
  if (!tok) return o.model + ": " + tok.error();
  b->tok = std::move(*tok);
  auto prompts = serve::PromptBuilder::create(*b->model->file, *b->tok, chat_template);
  if (!prompts) return prompts.error();
  if (need_chat && !prompts->has_chat()) return serve::PromptBuilder::no_template_error();
  b->prompts.emplace(std::move(*prompts));
  std::string ctx_error;
  const int ctx = resolve_ctx(o, b->model->config, &ctx_error);
  if (!ctx_error.empty()) return ctx_error;
  runtime::ClusterOptions copt;
  if (std::string e = cluster_options(co, o, ctx, &copt, n_slots, so.guess_rows()); !e.empty()) return e;
  const double root_bytes = double(b->model->file->file_size()) / double(1 + co.workers.size());
  if (std::string e = kv_pool_options(b->model->config, o, ctx, n_slots, root_bytes, &copt); !e.empty()) return e;
  copt.software_version = SHARDLM_VERSION;
  b->pool = std::make_unique<util::ThreadPool>(o.threads);
  if (std::string e = open_speculator(so, *b->model, o.model, o, ctx, n_slots, root_bytes, *b->pool, &b->spec);
      !e.empty())
    return e;
  auto cl = runtime::Cluster::start(*b->model, o.model, copt, *b->pool);
  if (!cl) return cl.error();
  b->cluster = std::move(*cl);
  if (b->cluster->n_nodes() > 1) std::fprintf(stderr, "cluster: %s\n", b->cluster->describe().c_str());
  b->engine = std::make_unique<serve::Engine>(*b->cluster, *b->tok, o.batch, b->spec.spec);
  return "";
}

}  // namespace cli
