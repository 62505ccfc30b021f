// vocab.cc: loads tokenizer.ggml.* metadata into a Vocab and applies llama.cpp's
// post-processing (llama_vocab::impl::load): default special ids per vocab type, flag
// defaults per pre-tokenizer, auto-detected EOT/EOM/FIM tokens, the end-of-generation
// set, the longest-first special-token list and the token -> piece cache.
// Deliberately not here: per-model LSTRIP/RSTRIP attributes (phi-3, jina, modern-bert),
// the unused-token scan (it only affects logging), WPM/UGM/RWKV vocabularies.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"
#include "util/log.h"

namespace tokenizer {
namespace {

constexpr char kMergeSep = '\xFF';  // never occurs in UTF-8 token strings

// token_to_piece(id, special=true) as llama.cpp computes it for its cache.
std::string make_piece(const Vocab& v, int32_t id) {
  const uint32_t a = v.attr[id];
  const std::string& t = v.text[id];
  if (a & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return t;
  if (a & kAttrNormal) {
    if (v.type == VocabType::kSpm) {
      std::string r;
      for (size_t i = 0; i < t.size(); ++i) {
        if (t.compare(i, 3, "\xE2\x96\x81") == 0) {
          r += ' ';
          i += 2;
        } else {
          r += t[i];
        }
      }
      return r;
    }
    // Byte-level BPE: every codepoint stands for one byte.
    std::string r;
    const std::string s = sanitize_utf8(t);
    for (size_t i = 0; i < s.size();) {
      const size_t n = std::min(utf8_len(static_cast<uint8_t>(s[i])), s.size() - i);
      uint32_t cpt = static_cast<uint8_t>(s[i]);
      if (n == 2) cpt = ((cpt & 0x1F) << 6) | (s[i + 1] & 0x3F);
      if (n == 3) cpt = ((cpt & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
      if (n == 4) cpt = ((cpt & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
      const int b = bpe_cpt_to_byte(cpt);
      if (b >= 0) {
        r += static_cast<char>(b);
      } else {  // llama_decode_text's marker for a codepoint outside the byte map
        r += "[UNK_BYTE_0x";
        for (size_t k = 0; k < n; ++k) {
          char hex[3];
          std::snprintf(hex, sizeof hex, "%02x", static_cast<uint8_t>(s[i + k]));
          r += hex;
        }
        r += t + "]";
      }
      i += n;
    }
    return r;
  }
  if ((a & kAttrByte) && t.size() >= 5) {
    return std::string(1, static_cast<char>(std::strtol(t.substr(3, 2).c_str(), nullptr, 16)));
  }
  return "";
}

util::Status read_id(const gguf::File& f, const char* key, int32_t n_vocab, int32_t& id) {
  if (id >= n_vocab) id = -1;  // default out of range: disabled
  const gguf::Value* val = f.find(key);
  if (!val) return util::ok_status();
  const auto x = val->as_int();
  if (!x) return util::Status::error(std::string("tokenizer: ") + key + " is not an integer");
  if (*x >= 0 && *x < n_vocab) {
    id = static_cast<int32_t>(*x);
  } else {
    LOG_WARN("tokenizer: bad special token id %s = %lld, using default %d", key,
                   static_cast<long long>(*x), id);
  }
  return util::ok_status();
}

}  // namespace

int32_t Vocab::bpe_rank(std::string_view left, std::string_view right, std::string& scratch) const {
  scratch.assign(left);
  scratch += kMergeSep;
  scratch.append(right);
  auto it = merge_rank.find(std::string_view(scratch));
  return it == merge_rank.end() ? -1 : it->second;
}

int32_t Vocab::byte_to_token(uint8_t b) const {
  if (type == VocabType::kSpm) {
    char buf[7];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    const int32_t id = find(buf);
    if (id >= 0) return id;
    return find(std::string_view(reinterpret_cast<const char*>(&b), 1));
  }
  return find(byte_to_bpe_char(b));
}

util::Status load_vocab(const gguf::File& f, Vocab& v) {
  const auto model = f.get_string("tokenizer.ggml.model");
  if (!model) {
    return util::Status::error(
        "tokenizer: this GGUF has no tokenizer (key tokenizer.ggml.model is missing); "
        "use a model file converted with its vocabulary");
  }
  if (*model == "llama") {
    v.type = VocabType::kSpm;
    v.bos_id = 1, v.eos_id = 2, v.unk_id = 0;
    v.add_space_prefix = true, v.add_bos = true;
    v.pre_name = "default";
  } else if (*model == "gpt2") {
    v.type = VocabType::kBpe;
    v.bos_id = 11, v.eos_id = 11, v.unk_id = -1;  // llama.cpp's BPE defaults
    v.pre_name = f.get_string("tokenizer.ggml.pre").value_or("");
    PreInfo info;
    if (v.pre_name.empty() || !lookup_pre(v.pre_name, info)) {
      LOG_WARN("tokenizer: missing or unrecognized pre-tokenizer '%s', using 'default'; "
                     "tokenization may differ from the original model", v.pre_name.c_str());
      v.pre_name = "default";
      info = PreInfo{};
    }
    v.pre_type = info.type;
    v.ignore_merges = info.ignore_merges;
    v.add_bos = info.add_bos;
  } else {
    return util::Status::error("tokenizer: unsupported tokenizer.ggml.model '" + *model +
                               "' (supported: 'llama' = SentencePiece, 'gpt2' = byte-level BPE)");
  }
  if (auto b = f.get_bool("tokenizer.ggml.add_space_prefix")) v.add_space_prefix = *b;

  const gguf::Value* toks = f.find("tokenizer.ggml.tokens");
  if (!toks || toks->type != gguf::ValueType::ARRAY || toks->elem_type != gguf::ValueType::STRING) {
    return util::Status::error("tokenizer: tokenizer.ggml.tokens is missing or not a string array");
  }
  const size_t n = toks->strs.size();
  if (n == 0 || n > (size_t(1) << 31) - 1) return util::Status::error("tokenizer: empty or oversized vocabulary");
  const gguf::Value* scores = f.find("tokenizer.ggml.scores");
  if (scores && scores->floats.size() < n && scores->ints.size() < n) {
    return util::Status::error("tokenizer: tokenizer.ggml.scores has fewer entries than tokens");
  }
  const gguf::Value* types = f.find("tokenizer.ggml.token_type");
  if (types && types->ints.size() < n) {
    return util::Status::error("tokenizer: tokenizer.ggml.token_type has fewer entries than tokens");
  }
  v.text.resize(n);
  v.score.assign(n, 0.0f);
  v.attr.assign(n, kAttrNormal);
  v.token_to_id.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    v.text[i] = toks->strs[i].empty() ? "[EMPTY_" + std::to_string(i) + "]" : toks->strs[i];
    v.token_to_id[v.text[i]] = static_cast<int32_t>(i);
    if (scores) v.score[i] = scores->floats.size() >= n ? float(scores->floats[i]) : float(scores->ints[i]);
    if (types) {
      switch (types->ints[i]) {
        case 1: v.attr[i] = kAttrNormal; break;
        case 2: v.attr[i] = kAttrUnknown; break;
        case 3: v.attr[i] = kAttrControl; break;
        case 4: v.attr[i] = kAttrUserDefined; break;
        case 5: v.attr[i] = kAttrUnused; break;
        case 6: v.attr[i] = kAttrByte; break;
        default: v.attr[i] = kAttrUndefined; break;
      }
    }
  }

  if (v.type == VocabType::kBpe) {
    const gguf::Value* merges = f.find("tokenizer.ggml.merges");
    if (!merges || merges->type != gguf::ValueType::ARRAY || merges->elem_type != gguf::ValueType::STRING) {
      return util::Status::error("tokenizer: BPE vocabulary without tokenizer.ggml.merges (string array)");
    }
    v.merge_rank.reserve(merges->strs.size());
    for (size_t i = 0; i < merges->strs.size(); ++i) {
      const std::string& m = merges->strs[i];
      const size_t pos = m.find(' ', 1);
      std::string key;
      if (pos != std::string::npos) key = m.substr(0, pos) + kMergeSep + m.substr(pos + 1);
      else key = std::string(1, kMergeSep);
      v.merge_rank.emplace(std::move(key), static_cast<int32_t>(i));  // first rank wins
    }
  }

  const int32_t nv = v.n_vocab();
  RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.bos_token_id", nv, v.bos_id));
  RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.eos_token_id", nv, v.eos_id));
  RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.eot_token_id", nv, v.eot_id));
  RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.eom_token_id", nv, v.eom_id));
  RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.unknown_token_id", nv, v.unk_id));
  RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.fim_pad_token_id", nv, v.fim_pad_id));
  RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.fim_rep_token_id", nv, v.fim_rep_id));
  RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.fim_sep_token_id", nv, v.fim_sep_id));
  if (auto b = f.get_bool("tokenizer.ggml.add_bos_token")) v.add_bos = *b;
  if (auto b = f.get_bool("tokenizer.ggml.add_eos_token")) v.add_eos = *b;
  if (v.add_bos && v.bos_id < 0) return util::Status::error("tokenizer: add_bos_token is set but there is no BOS token");
  if (v.add_eos && v.eos_id < 0) return util::Status::error("tokenizer: add_eos_token is set but there is no EOS token");

  // Auto-detected special tokens by their text (llama.cpp's workaround for converters that
  // do not write the ids). The found token becomes a control token. llama.cpp takes the
  // first hit in hash-map order when several candidates exist; we take the lowest id.
  auto detect = [&](int32_t& id, std::initializer_list<const char*> names) {
    if (id >= 0) return;
    for (const char* nm : names) {
      const int32_t found = v.find(nm);
      if (found >= 0 && (id < 0 || found < id)) id = found;
    }
    if (id >= 0) v.attr[id] |= kAttrControl;
  };
  detect(v.eot_id, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                    "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
                    "<end_of_utterance>"});
  detect(v.eom_id, {"<|eom_id|>"});
  int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1;
  RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.fim_pre_token_id", nv, fim_pre));
  RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.fim_suf_token_id", nv, fim_suf));
  RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.fim_mid_token_id", nv, fim_mid));
  detect(fim_pre, {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>",
                   "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"});
  detect(fim_suf, {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>",
                   "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"});
  detect(fim_mid, {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>",
                   "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"});
  detect(v.fim_pad_id, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"});
  detect(v.fim_rep_id, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
  detect(v.fim_sep_id, {"<|file_sep|>"});

  // End-of-generation set.
  for (int32_t id : {v.fim_pad_id, v.fim_rep_id, v.fim_sep_id, v.eos_id, v.eot_id, v.eom_id})
    if (id >= 0) v.eog_ids.insert(id);
  static const char* const kEogText[] = {
      "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
      "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
      "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
      "<｜end▁of▁sentence｜>", "[e~["};
  for (const char* t : kEogText) {
    auto it = v.token_to_id.find(std::string_view(t));
    if (it == v.token_to_id.end()) continue;
    v.eog_ids.insert(it->second);
    v.attr[it->second] |= kAttrControl;
  }
  for (const char* t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    auto it = v.token_to_id.find(std::string_view(t));
    if (it != v.token_to_id.end()) v.attr[it->second] = kAttrUserDefined;  // gpt-oss: always rendered
  }
  auto has_eog = [&](const char* t) {
    const int32_t id = v.find(t);
    return id >= 0 && v.eog_ids.count(id) ? id : -1;
  };
  const int32_t end_id = has_eog("<|end|>");
  if (end_id >= 0 && ((has_eog("<|return|>") >= 0 && has_eog("<|call|>") >= 0) ||
                      (has_eog("<|calls|>") >= 0 && has_eog("<|flush|>") >= 0))) {
    v.eog_ids.erase(end_id);
    v.attr[end_id] = kAttrUserDefined;
  }
  const int32_t s_id = has_eog("</s>");
  if (s_id >= 0 && (has_eog("<|tool_response>") >= 0 || has_eog("<|plamo:eos|>") >= 0)) {
    v.eog_ids.erase(s_id);
    v.attr[s_id] = kAttrNormal;
  }

  // Special tokens matched in raw text, longest first (std::sort on ascending ids, the same
  // algorithm and input order as llama.cpp, so equal-length ties come out the same).
  for (int32_t id = 0; id < nv; ++id)
    if (v.attr[id] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) v.special_cache.push_back(id);
  std::sort(v.special_cache.begin(), v.special_cache.end(),
            [&](int32_t a, int32_t b) { return v.text[a].size() > v.text[b].size(); });

  v.pieces.resize(n);
  for (int32_t id = 0; id < nv; ++id) v.pieces[id] = make_piece(v, id);
  return util::ok_status();
}

}  // namespace tokenizer
