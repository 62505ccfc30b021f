// plan.cc: make_plan and the slicing arithmetic (apportionment, KV ranges, re-encodes,
// exact byte counts). See plan.h for the rules; nothing here touches a file or socket.
#include "plan/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "util/check.h"
#include "util/swa_ring.h"

namespace plan {

namespace {

int block_of(tensor::Type t) { return tensor::traits(t).block_size; }

// Smallest multiple of `unit` elements that holds whole blocks of every type in `types`.
int lcm_blocks(const std::vector<tensor::Type>& types) {
  int l = 1;
  for (tensor::Type t : types) l = std::lcm(l, block_of(t));
  return l;
}

std::string fmt(const char* f, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), f, args...);
  return buf;
}

std::string range_str(Range r) { return fmt("[%d,%d)", r.begin, r.end); }

// "0-3, 5, 7-9" for a sorted list of node ids.
std::string id_list(const std::vector<int>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!out.empty()) out += ", ";  // (appended apart: "-" + std::string&& trips GCC 12's -Wrestrict)
    out += std::to_string(ids[i]);
    if (j > i) {
      out += '-';
      out += std::to_string(ids[j]);
    }
    i = j + 1;
  }
  return out;
}

// Notes on re-encoded Wo (wo = true) or down slices: one per node when few, else grouped.
void add_reencode_notes(Plan& p, bool wo) {
  const ModelShape& s = p.shape;
  std::vector<int> ids;
  double extra = 0;  // bytes beyond the slice in its file type
  for (int i = 0; i < p.n_nodes(); ++i) {
    const NodeSlice& ns = p.nodes[i];
    if ((wo ? ns.n_wo_reencoded : ns.n_down_reencoded) == 0) continue;
    ids.push_back(i);
    const int64_t c0 = wo ? int64_t(ns.heads.begin) * s.head_dim : ns.ff.begin;
    const int64_t c1 = wo ? int64_t(ns.heads.end) * s.head_dim : ns.ff.end;
    for (int l = 0; l < s.n_layers; ++l) {
      const tensor::Type t = wo ? s.types(l).wo : s.types(l).down;
      const tensor::Type st = slice_type(t, c0, c1);
      if (st == t) continue;
      const auto& tr = tensor::traits(t);
      extra += double(s.dim) * (double(tensor::row_bytes(st, c1 - c0)) -
                                double(c1 - c0) * tr.block_bytes / tr.block_size);
    }
  }
  if (ids.empty()) return;
  const char* what = wo ? "Wo" : "down";
  const tensor::Type t = wo ? s.types(0).wo : s.types(0).down;
  if (ids.size() <= 4) {
    for (int i : ids) {
      const NodeSlice& ns = p.nodes[i];
      const int64_t c0 = wo ? int64_t(ns.heads.begin) * s.head_dim : ns.ff.begin;
      const int64_t c1 = wo ? int64_t(ns.heads.end) * s.head_dim : ns.ff.end;
      p.notes.push_back(fmt("node %d: %s columns [%lld,%lld) cut %s blocks of %d: the root re-encodes "
                            "that slice to %s in %d of %d layers", i, what, (long long)c0,
                            (long long)c1, tensor::type_name(t), block_of(t),
                            tensor::type_name(slice_type(t, c0, c1)),
                            wo ? ns.n_wo_reencoded : ns.n_down_reencoded, s.n_layers));
    }
    p.notes.push_back(fmt("re-encoded %s slices cost %.1f MB more than in %s", what, extra / 1e6,
                          tensor::type_name(t)));
  } else {
    const NodeSlice& first = p.nodes[ids[0]];
    const tensor::Type to = wo ? slice_type(t, int64_t(first.heads.begin) * s.head_dim,
                                            int64_t(first.heads.end) * s.head_dim)
                               : slice_type(t, first.ff.begin, first.ff.end);
    p.notes.push_back(fmt("nodes %s (%zu of %d): %s column slices cut %s blocks of %d: the root "
                          "re-encodes them to %s, %.1f MB more in all", id_list(ids).c_str(),
                          ids.size(), p.n_nodes(), what, tensor::type_name(t), block_of(t),
                          tensor::type_name(to), extra / 1e6));
  }
}

}  // namespace

void set_all_types(ModelShape& s, tensor::Type t) {
  s.layer = MatrixTypes{t, t, t, t, t, t, t};
  s.layers.clear();
  s.output = t;
  s.token_embd = t;
}

util::Status validate(const ModelShape& s) {
  auto err = [](const std::string& m) { return util::Status::error("model shape: " + m); };
  if (s.dim <= 0 || s.n_layers <= 0 || s.n_heads <= 0 || s.n_kv_heads <= 0 || s.head_dim <= 0 ||
      s.n_ff <= 0 || s.n_vocab <= 0)
    return err(fmt("every dimension must be positive (dim %d, layers %d, heads %d, kv heads %d, "
                   "head dim %d, ff %d, vocab %d)", s.dim, s.n_layers, s.n_heads, s.n_kv_heads,
                   s.head_dim, s.n_ff, s.n_vocab));
  if (s.n_heads % s.n_kv_heads != 0)
    return err(fmt("%d query heads are not a multiple of %d KV heads", s.n_heads, s.n_kv_heads));
  if (!s.layers.empty() && static_cast<int>(s.layers.size()) != s.n_layers)
    return err(fmt("%zu per-layer type entries for %d layers", s.layers.size(), s.n_layers));
  auto fits = [&](const char* what, tensor::Type t, int64_t cols) -> util::Status {
    if (cols % block_of(t) != 0)
      return err(fmt("%s rows of %lld elements do not fill whole %s blocks of %d", what,
                     static_cast<long long>(cols), tensor::type_name(t), block_of(t)));
    return util::ok_status();
  };
  const int64_t q_dim = int64_t(s.n_heads) * s.head_dim;
  for (int l = 0; l < (s.layers.empty() ? 1 : s.n_layers); ++l) {
    const MatrixTypes& m = s.types(l);
    RETURN_IF_ERROR(fits("wq", m.wq, s.dim));
    RETURN_IF_ERROR(fits("wk", m.wk, s.dim));
    RETURN_IF_ERROR(fits("wv", m.wv, s.dim));
    RETURN_IF_ERROR(fits("wo", m.wo, q_dim));
    RETURN_IF_ERROR(fits("gate", m.gate, s.dim));
    RETURN_IF_ERROR(fits("up", m.up, s.dim));
    RETURN_IF_ERROR(fits("down", m.down, s.n_ff));
  }
  RETURN_IF_ERROR(fits("output", s.output, s.dim));
  RETURN_IF_ERROR(fits("token_embd", s.token_embd, s.dim));
  return util::ok_status();
}

tensor::Type slice_type(tensor::Type t, int64_t c0, int64_t c1) {
  const int b = block_of(t);
  if (c0 % b == 0 && c1 % b == 0) return t;
  if (c0 % tensor::kQK == 0 && c1 % tensor::kQK == 0) return tensor::Type::Q8_0;
  return tensor::Type::F16;
}

std::vector<int> apportion(int total, const std::vector<double>& caps, int min_each) {
  const int n = static_cast<int>(caps.size());
  CHECK(n >= 1);
  CHECK(min_each >= 0 && total >= int64_t(min_each) * n);
  double sum = 0;
  for (double c : caps) {
    CHECK(c > 0 && std::isfinite(c));
    sum += c;
  }
  std::vector<double> quota(n);
  std::vector<int> a(n);
  int64_t given = 0;
  for (int i = 0; i < n; ++i) {
    quota[i] = total * (caps[i] / sum);
    a[i] = std::max(min_each, static_cast<int>(std::floor(quota[i] + 1e-9)));
    given += a[i];
  }
  // Hand out what is left by largest remainder (ties: lower index)...
  while (given < total) {
    int best = 0;
    for (int i = 1; i < n; ++i)
      if (quota[i] - a[i] > quota[best] - a[best] + 1e-12) best = i;
    ++a[best];
    ++given;
  }
  // ...or take back what the minimum forced on us from the most over-served (ties: higher).
  while (given > total) {
    int best = -1;
    for (int i = 0; i < n; ++i)
      if (a[i] > min_each && (best < 0 || quota[i] - a[i] <= quota[best] - a[best] + 1e-12))
        best = i;
    CHECK(best >= 0);
    --a[best];
    --given;
  }
  return a;
}

std::vector<Range> split_ranges(int total, int unit, const std::vector<double>& caps, int min_each) {
  CHECK(unit >= 1 && total % unit == 0);
  const std::vector<int> counts = apportion(total / unit, caps, min_each);
  std::vector<Range> r(counts.size());
  int at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    r[i] = Range{at, at + counts[i] * unit};
    at = r[i].end;
  }
  CHECK(at == total);
  return r;
}

Range kv_range(Range heads, int group) {
  CHECK(heads.begin <= heads.end && group > 0);
  if (heads.size() == 0) return Range{heads.begin / group, heads.begin / group};  // no heads: no KV heads
  return Range{heads.begin / group, (heads.end - 1) / group + 1};
}

util::Expected<Plan> make_plan(const ModelShape& shape, std::vector<double> caps, bool exact) {
  RETURN_IF_ERROR(validate(shape));
  if (caps.empty()) caps = {1.0};
  for (size_t i = 0; i < caps.size(); ++i)
    if (!(caps[i] > 0) || !std::isfinite(caps[i]))
      return util::Status::error(fmt("capacity of node %zu is %g; every share must be a positive "
                                     "number (e.g. --shares 2,1,1)", i, caps[i]));
  const int n = static_cast<int>(caps.size());
  const ModelShape& s = shape;
  // Every node needs at least one MLP row, vocabulary row and (exact mode) output row; query
  // heads do not limit N: beyond H nodes, some nodes get none (and no KV heads).
  const int most = std::min({s.n_ff, s.n_vocab, s.dim});
  const char* what = most == s.n_ff      ? "MLP rows (feed_forward_length)"
                     : most == s.n_vocab ? "vocabulary rows"
                                         : "embedding dimensions";
  if (n > most)
    return util::Status::error(fmt("%d nodes but the model has only %d %s: every node needs at least one. Use at "
                                   "most %d nodes", n, most, what, most));

  Plan p;
  p.shape = s;
  p.nodes.resize(n);
  double sum = 0;
  for (double c : caps) sum += c;

  // Heads in units that keep Wo's column slices on block boundaries when possible.
  std::vector<tensor::Type> wo_types, down_types;
  for (int l = 0; l < (s.layers.empty() ? 1 : s.n_layers); ++l) {
    wo_types.push_back(s.types(l).wo);
    down_types.push_back(s.types(l).down);
  }
  const int wo_block = lcm_blocks(wo_types);
  const int u = wo_block / std::gcd(wo_block, s.head_dim);
  p.head_unit = (s.n_heads % u == 0 && s.n_heads / u >= n) ? u : 1;
  // More nodes than query heads: the smallest shares get none (min_each 0).
  const std::vector<Range> heads = split_ranges(s.n_heads, p.head_unit, caps, n > s.n_heads ? 0 : 1);

  // F in units of down's block (its column slices stay whole blocks; in exact mode the
  // gathered MLP hidden can go as Q8 blocks) or of 32 if larger, else of 32, else of 1. In exact mode down is
  // cut by rows, so a coarse unit only saves gather bytes: a smaller one is taken when the
  // block unit would put more than kFfSlack of F off the shares. The 30B-A3B shape (F = 768
  // of Q4_K) on 2 nodes: 512 / 256 rows, or 384 / 384 with the hidden gathered as F32
  // (3.5x its Q8_K bytes, ~18 KB more per layer and token: on a 1 Gbit link about what the
  // balance saves; on loopback 2x1 decode 61 -> 67 tokens/s, prompts 120 -> 145,
  // tools/dist_cost.py). With partial sums a smaller unit re-encodes down's slices to Q8_0,
  // whose extra bytes cancel the balance: the block unit stays.
  constexpr double kFfSlack = 0.10;
  auto off_shares = [&](int unit) {
    double worst = 0;
    const std::vector<Range> r = split_ranges(s.n_ff, unit, caps);
    for (int i = 0; i < n; ++i) worst = std::max(worst, std::abs(r[i].size() - s.n_ff * caps[i] / sum));
    return worst / s.n_ff;
  };
  const int down_block = lcm_blocks(down_types);
  p.ff_unit = 1;
  // Float types (block 1) take 32s first too: no node is left a sliver of a few columns of
  // down (a Vulkan node's matmul takes whole 32s), and a float slice needs no re-encoding.
  for (int cand : {std::max(down_block, int(tensor::kQK)), int(tensor::kQK), 1}) {
    if (s.n_ff % cand == 0 && s.n_ff / cand >= n && (!exact || cand == 1 || off_shares(cand) <= kFfSlack)) {
      p.ff_unit = cand;
      break;
    }
  }
  std::vector<Range> ff = split_ranges(s.n_ff, p.ff_unit, caps);
  const std::vector<Range> vocab = split_ranges(s.n_vocab, 1, caps);
  const std::vector<Range> rows = split_ranges(s.dim, (s.dim % 32 == 0 && s.dim / 32 >= n) ? 32 : 1, caps);
  // Exact mode gathers Wo's and down's inputs quantized when every range is whole blocks of
  // the activation (vec_dot) type of every layer's matrix.
  auto whole_blocks = [&](const std::vector<tensor::Type>& types, auto range_of) {
    for (tensor::Type t : types) {
      const int64_t b = tensor::traits(tensor::traits(t).vec_dot_type).block_size;
      for (int i = 0; i < n; ++i) {
        const auto [c0, c1] = range_of(i);
        if (c0 % b != 0 || c1 % b != 0) return false;
      }
    }
    return true;
  };
  const bool q8_att = whole_blocks(wo_types, [&](int i) {
    return std::pair<int64_t, int64_t>(int64_t(heads[i].begin) * s.head_dim, int64_t(heads[i].end) * s.head_dim);
  });
  for (int i = 0; i < n; ++i) {
    NodeSlice& ns = p.nodes[i];
    ns.share = ns.ff_share = caps[i] / sum;
    ns.heads = heads[i];
    ns.kv_heads = kv_range(heads[i], s.group());
    ns.ff = ff[i];
    ns.vocab = vocab[i];
    ns.holds_embedding = (i == 0);
    ns.exact = exact;
    ns.rows = rows[i];
    ns.gather_q8_att = exact && q8_att;
  }
  // Nodes without query heads skip attention's weights (Wq, Wk, Wv; with partial sums Wo
  // too): deal the MLP rows so that every node's bytes read per token, not just its MLP rows,
  // follow its share. B[i]: node i's bytes without MLP rows; node i gets MLP rows in
  // proportion to what its share of the total leaves after B[i] (at least a sliver).
  if (std::any_of(heads.begin(), heads.end(), [](const Range& r) { return r.size() == 0; })) {
    std::vector<double> base(n), ff_caps(n);
    double total = 0;
    for (int i = 0; i < n; ++i) {
      total += double(weight_bytes(p, i));
      p.nodes[i].ff = Range{0, 0};
      base[i] = double(weight_bytes(p, i));
    }
    for (int i = 0; i < n; ++i) ff_caps[i] = std::max(caps[i] / sum * total - base[i], 1e-3 * total / n);
    ff = split_ranges(s.n_ff, p.ff_unit, ff_caps);
    double ff_sum = 0;
    for (double c : ff_caps) ff_sum += c;
    for (int i = 0; i < n; ++i) {
      p.nodes[i].ff = ff[i];
      p.nodes[i].ff_share = ff_caps[i] / ff_sum;
    }
  }
  const bool q8_ff = whole_blocks(down_types, [&](int i) { return std::pair<int64_t, int64_t>(ff[i].begin, ff[i].end); });
  for (NodeSlice& ns : p.nodes) ns.gather_q8_ff = exact && q8_ff;
  // How many nodes compute each KV head (ranges are contiguous and ordered, so only a
  // range's ends can be shared; a node without heads has none).
  std::vector<int> kv_nodes(s.n_kv_heads, 0);
  for (const NodeSlice& ns : p.nodes)
    for (int g = ns.kv_heads.begin; g < ns.kv_heads.end; ++g) ++kv_nodes[g];
  for (int i = 0; i < n; ++i) {
    NodeSlice& ns = p.nodes[i];
    const bool has_heads = ns.heads.size() > 0;  // else no KV heads and an empty Wo slice
    ns.kv_first_shared = has_heads && kv_nodes[ns.kv_heads.begin] > 1;
    ns.kv_last_shared = has_heads && kv_nodes[ns.kv_heads.end - 1] > 1;
    ns.n_kv_shared = (ns.kv_heads.size() == 1) ? (ns.kv_first_shared || ns.kv_last_shared)
                                               : int(ns.kv_first_shared) + int(ns.kv_last_shared);
    for (int l = 0; l < s.n_layers && !exact; ++l) {
      const MatrixTypes& m = s.types(l);
      if (has_heads &&
          slice_type(m.wo, int64_t(ns.heads.begin) * s.head_dim, int64_t(ns.heads.end) * s.head_dim) != m.wo)
        ++ns.n_wo_reencoded;
      if (slice_type(m.down, ns.ff.begin, ns.ff.end) != m.down) ++ns.n_down_reencoded;
    }
  }

  // Notes for the printout.
  if (p.head_unit > 1)
    p.notes.push_back(fmt("query heads dealt in multiples of %d so every Wo column slice stays on "
                          "%s block boundaries (%d columns)", p.head_unit,
                          tensor::type_name(wo_types[0]), wo_block));
  if (p.ff_unit < down_block)
    p.notes.push_back(fmt("F = %d cannot be dealt %s in whole %d-blocks of down to %d nodes; dealt in "
                          "units of %d", s.n_ff, exact ? "by the shares" : "at all", down_block, n, p.ff_unit));
  std::vector<int> dup, headless;
  for (int g = 0; g < s.n_kv_heads; ++g)
    if (kv_nodes[g] > 1) dup.push_back(g);
  for (int i = 0; i < n; ++i)
    if (p.nodes[i].heads.size() == 0) headless.push_back(i);
  if (!dup.empty()) {
    std::string list;
    for (int k : dup) list += (list.empty() ? "" : ", ") + std::to_string(k);
    p.notes.push_back(fmt("KV heads %s are computed by more than one node (%s): their Wk/Wv rows go "
                          "to each and each caches them; no extra synchronisation",
                          list.c_str(), n > s.n_kv_heads ? "more nodes than KV heads"
                                                         : "a head range cuts a KV group"));
  }
  if (!headless.empty())
    p.notes.push_back(fmt("node%s %s: no query heads (%d nodes, %d heads): no attention and no KV cache there, "
                          "only %s, MLP rows and vocabulary rows", headless.size() > 1 ? "s" : "",
                          id_list(headless).c_str(), n, s.n_heads,
                          exact ? "their Wo rows (from the gathered attention output)" : "a zero attention partial"));
  add_reencode_notes(p, /*wo=*/true);
  add_reencode_notes(p, /*wo=*/false);
  if (s.n_swa_layers > 0)
    p.notes.push_back(fmt("sliding window: %d of %d layers attend to the last %d positions and cache only a ring "
                          "per request: the window, a step's rows and 31, rounded up to 64 (%d rows for steps of "
                          "1 row, %d for serve's default --batch 128); KV MB/1k counts the ring of this plan's --batch",
                          s.n_swa_layers, s.n_layers, s.n_swa, util::swa_ring_rows(s.n_swa, 1 << 30, 1),
                          util::swa_ring_rows(s.n_swa, 1 << 30, 129)));
  if (exact)
    p.notes.push_back(fmt("exact sync: Wo and down cut by output rows (nothing re-encoded); their inputs are "
                          "gathered as %s / %s, their outputs as F32: 4 gathers per layer",
                          q8_att ? "activation blocks" : "F32", q8_ff ? "activation blocks" : "F32"));
  return p;
}

namespace {

// The bytes of node's weights with `experts` experts per MoE layer.
uint64_t node_bytes(const Plan& p, int node, uint64_t experts) {
  CHECK(node >= 0 && node < p.n_nodes());
  const ModelShape& s = p.shape;
  const NodeSlice& ns = p.nodes[node];
  const uint64_t d = s.head_dim, D = s.dim;
  const uint64_t q_rows = ns.heads.size() * d, kv_rows = ns.kv_heads.size() * d;
  const int64_t c0 = ns.heads.begin * d, c1 = ns.heads.end * d;
  uint64_t total = 0;
  for (int l = 0; l < s.n_layers; ++l) {
    const MatrixTypes& m = s.types(l);
    total += q_rows * tensor::row_bytes(m.wq, D);
    total += kv_rows * (tensor::row_bytes(m.wk, D) + tensor::row_bytes(m.wv, D));
    const uint64_t mlps = s.n_expert > 0 ? experts : 1;  // an MoE layer's MLP: its experts
    total += mlps * uint64_t(ns.ff.size()) * (tensor::row_bytes(m.gate, D) + tensor::row_bytes(m.up, D));
    if (ns.exact) {  // whole rows of Wo and down
      total += uint64_t(ns.rows.size()) * (tensor::row_bytes(m.wo, int64_t(s.n_heads) * d) +
                                           mlps * tensor::row_bytes(m.down, s.n_ff));
    } else {
      total += D * tensor::row_bytes(slice_type(m.wo, c0, c1), c1 - c0);
      total += mlps * D * tensor::row_bytes(slice_type(m.down, ns.ff.begin, ns.ff.end), ns.ff.size());
    }
    if (s.n_expert > 0) total += uint64_t(s.n_expert) * tensor::row_bytes(s.router, D);  // the router
    total += 2 * D * sizeof(float);                                       // attn_norm, ffn_norm
    if (s.qk_norm) total += 2 * d * sizeof(float);                        // q_norm, k_norm
    if (s.qkv_bias) total += (q_rows + 2 * kv_rows) * sizeof(float);      // bq, bk, bv slices
  }
  total += uint64_t(ns.vocab.size()) * tensor::row_bytes(s.output, D);  // output rows
  total += D * sizeof(float);                                            // output_norm
  return total;
}

}  // namespace

uint64_t weight_bytes(const Plan& p, int node) { return node_bytes(p, node, p.shape.n_expert_used); }
uint64_t resident_bytes(const Plan& p, int node) { return node_bytes(p, node, p.shape.n_expert); }

uint64_t embedding_bytes(const ModelShape& s) {
  return uint64_t(s.n_vocab) * tensor::row_bytes(s.token_embd, s.dim);
}

uint64_t kv_bytes_per_1k(const Plan& p, int node, tensor::Type kv_type, int max_batch) {
  CHECK(node >= 0 && node < p.n_nodes());
  const ModelShape& s = p.shape;
  // A windowed layer caches only its ring: the window, a step's rows and 31, rounded up to 64.
  const uint64_t ring = s.n_swa_layers > 0 ? uint64_t(util::swa_ring_rows(s.n_swa, 1000, max_batch)) : 0;
  const uint64_t positions = uint64_t(s.n_layers - s.n_swa_layers) * 1000 + uint64_t(s.n_swa_layers) * ring;
  return 2 * uint64_t(p.nodes[node].kv_heads.size()) * tensor::row_bytes(kv_type, s.head_dim) * positions;
}

std::string describe_slices(const Plan& p) {
  std::string out;
  for (int i = 0; i < p.n_nodes(); ++i) {
    const NodeSlice& ns = p.nodes[i];
    out += fmt("node %d: share %.3f heads %s kv %s%s ff %s vocab %s%s\n", i, ns.share,
               range_str(ns.heads).c_str(), range_str(ns.kv_heads).c_str(),
               ns.n_kv_shared ? fmt(" (%d shared)", ns.n_kv_shared).c_str() : "",
               range_str(ns.ff).c_str(), range_str(ns.vocab).c_str(),
               ns.holds_embedding ? " +token_embd" : "");
  }
  return out;
}

}  // namespace plan
