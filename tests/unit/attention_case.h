// attention_case.h: the random attention problem of attention_test and attention_bf16_test:
// a KV cache of n_kv_heads heads x (pos0 + n_q) positions in padded rows (stride != width;
// every 29th key 4x larger, so the running max moves both ways) and n_q queries; and the same
// cache laid out as a ring or as shuffled 64-row blocks of a pool, to test those views.
#pragma once
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/attention.h"

struct AttentionCase {
  int n_q, pos0, head_dim;
  kernels::KvFormat format;
  std::vector<int> kv_of_head;
  int n_kv_heads = 0;
  size_t row_bytes;
  std::vector<std::vector<uint8_t>> k, v;  // [n_kv_heads][n_ctx * row_bytes] (or the ring / pool)
  std::vector<kernels::KvHeadView> views;
  std::vector<float> q;                    // [n_q][n_heads * head_dim]
  std::vector<int32_t> table;              // paged: block ids

  AttentionCase(int n_q_, int pos0_, int head_dim_, kernels::KvFormat f, std::vector<int> map, uint32_t seed)
      : n_q(n_q_), pos0(pos0_), head_dim(head_dim_), format(f), kv_of_head(std::move(map)) {
    for (int g : kv_of_head) n_kv_heads = std::max(n_kv_heads, g + 1);
    row_bytes = kernels::kv_row_bytes(f, head_dim) + 8;
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(head_dim);
    for (int g = 0; g < n_kv_heads; ++g) {
      k.emplace_back(size_t(n_ctx()) * row_bytes);
      v.emplace_back(size_t(n_ctx()) * row_bytes);
      for (int p = 0; p < n_ctx(); ++p) {
        const float boost = (p % 29 == 3) ? 4.0f : 1.0f;
        for (float& e : x) e = nd(rng) * boost;
        kernels::kv_store_row(f, x.data(), k[g].data() + p * row_bytes, head_dim);
        for (float& e : x) e = nd(rng);
        kernels::kv_store_row(f, x.data(), v[g].data() + p * row_bytes, head_dim);
      }
      views.push_back({f, k[g].data(), v[g].data(), row_bytes});
    }
    q.resize(size_t(n_q) * n_heads() * head_dim);
    for (float& e : q) e = 2.0f * nd(rng);
  }
  int n_ctx() const { return pos0 + n_q; }
  int n_heads() const { return int(kv_of_head.size()); }

 protected:
  // This (flat) cache as a ring of `ring` rows: position p in row p % ring, later positions
  // overwriting earlier ones, as a windowed layer keeps it.
  void make_ring(int ring) {
    views.clear();
    for (int g = 0; g < n_kv_heads; ++g) {
      std::vector<uint8_t> rk(size_t(ring) * row_bytes, 0), rv(size_t(ring) * row_bytes, 0);
      for (int p = 0; p < n_ctx(); ++p) {
        std::copy_n(k[g].data() + p * row_bytes, row_bytes, rk.data() + (p % ring) * row_bytes);
        std::copy_n(v[g].data() + p * row_bytes, row_bytes, rv.data() + (p % ring) * row_bytes);
      }
      k[g] = std::move(rk), v[g] = std::move(rv);
      views.push_back({format, k[g].data(), v[g].data(), row_bytes, ring});
    }
  }
  // This (flat) cache as 64-row blocks of a pool of n_blocks + 3, in shuffled order.
  void make_paged() {
    const int n_blocks = (n_ctx() + 63) / 64, pool_blocks = n_blocks + 3;
    table.resize(n_blocks);
    for (int b = 0; b < n_blocks; ++b) table[b] = (b * 5 + 2) % pool_blocks;  // 5 is prime to pool_blocks
    views.clear();
    const size_t block = 64 * row_bytes;
    for (int g = 0; g < n_kv_heads; ++g) {
      std::vector<uint8_t> pk(pool_blocks * block, 0), pv(pool_blocks * block, 0);
      for (int p = 0; p < n_ctx(); ++p) {
        const size_t off = table[p / 64] * block + (p % 64) * row_bytes;
        std::copy_n(k[g].data() + p * row_bytes, row_bytes, pk.data() + off);
        std::copy_n(v[g].data() + p * row_bytes, row_bytes, pv.data() + off);
      }
      k[g] = std::move(pk), v[g] = std::move(pv);
      views.push_back({format, k[g].data(), v[g].data(), row_bytes, 0, table.data(), 64, block});
    }
  }
};
