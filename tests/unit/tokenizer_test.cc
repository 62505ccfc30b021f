// tokenizer_test.cc: the tokenizer against llama.cpp. Golden ids (tests/data/
// tok_golden_<vocab>.txt, made by tools/make_tokenizer_golden.py with llama-cpp-python)
// for every line of tests/data/tokenizer_corpus.txt, llama.cpp's own
// models/ggml-vocab-*.gguf.inp/.out cases, decode round trips, the streaming decoder and
// load errors. Vocab files: SmolLM2 from SHARDLM_DEFAULT_MODEL (or $SHARDLM_MODEL), the
// vocab-only GGUFs from ${SHARDLM_SOURCE_DIR}/.deps/vocab/, Gemma 3's 262k SentencePiece
// vocab from its model file in .deps/pip/gemma3/ (tests skip when absent).
// Corpus convention: one text per line, "#|" lines are comments, escapes \n \r \t \\ \xHH
// expand (see tools/make_tokenizer_golden.py).
// Deliberately no timing assertions: the speed check only prints its time.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "gguf/gguf.h"
#include "model/synthetic.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

namespace fs = std::filesystem;
const std::string kSrc = SHARDLM_SOURCE_DIR;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string unescape(std::string_view l) {
  std::string out;
  auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
  for (size_t i = 0; i < l.size(); ++i) {
    if (l[i] == '\\' && i + 1 < l.size()) {
      const char n = l[i + 1];
      if (n == 'n') { out += '\n'; ++i; continue; }
      if (n == 'r') { out += '\r'; ++i; continue; }
      if (n == 't') { out += '\t'; ++i; continue; }
      if (n == '\\') { out += '\\'; ++i; continue; }
      if (n == 'x' && i + 3 < l.size() && hex(l[i + 2]) && hex(l[i + 3])) {
        out += static_cast<char>(std::stoi(std::string(l.substr(i + 2, 2)), nullptr, 16));
        i += 3;
        continue;
      }
    }
    out += l[i];
  }
  return out;
}

const std::vector<std::string>& corpus() {
  static const std::vector<std::string> texts = [] {
    std::vector<std::string> t;
    std::istringstream in(read_file(kSrc + "/tests/data/tokenizer_corpus.txt"));
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("#|", 0) == 0) continue;
      t.push_back(unescape(line));
    }
    return t;
  }();
  return texts;
}

std::vector<int32_t> parse_ids(std::string_view s) {
  std::vector<int32_t> ids;
  std::istringstream in{std::string(s)};
  for (long x; in >> x;) ids.push_back(static_cast<int32_t>(x));
  return ids;
}

struct Golden {
  std::vector<std::vector<int32_t>> parse;          // one per corpus text
  std::map<size_t, std::vector<int32_t>> noparse;   // index -> ids with parse_special=false
};

Golden read_golden(const std::string& name) {
  Golden g;
  std::istringstream in(read_file(kSrc + "/tests/data/tok_golden_" + name + ".txt"));
  bool noparse = false;
  for (std::string line; std::getline(in, line);) {
    if (line == "#noparse") { noparse = true; continue; }
    if (!line.empty() && line[0] == '#') continue;
    if (!noparse) {
      g.parse.push_back(parse_ids(line));
    } else {
      const size_t tab = line.find('\t');
      g.noparse[std::stoul(line.substr(0, tab))] = parse_ids(line.substr(tab + 1));
    }
  }
  return g;
}

std::string model_path(const std::string& name) {
  if (name == "smollm2") {
    const char* env = std::getenv("SHARDLM_MODEL");
    return env ? env : SHARDLM_DEFAULT_MODEL;
  }
  if (name == "gemma3") return kSrc + "/.deps/pip/gemma3/gemma-3-270m-q4_k_m.gguf";  // `make gemma3`
  if (name == "toy_gpt_oss") {
    // make-model's toy-gpt-oss (Q8_0, seed 3): o200k ("gpt-4o") pre-tokenizer, toy merges.
    static const std::string path = [] {
      const std::string p = (fs::temp_directory_path() / ("shardlm_tok_" + std::to_string(getpid()) + "_toy_gpt_oss.gguf")).string();
      const util::Status st = model::write_synthetic_model(p, *model::shape_by_name("toy-gpt-oss"), tensor::Type::Q8_0, 3);
      EXPECT_TRUE(st.ok()) << st.message();
      std::atexit([] { std::error_code ec; fs::remove(fs::temp_directory_path() / ("shardlm_tok_" + std::to_string(getpid()) + "_toy_gpt_oss.gguf"), ec); });
      return p;
    }();
    return path;
  }
  static const std::map<std::string, std::string> files = {
      {"llama_spm", "ggml-vocab-llama-spm.gguf"}, {"llama_bpe", "ggml-vocab-llama-bpe.gguf"},
      {"qwen2", "ggml-vocab-qwen2.gguf"}};
  return kSrc + "/.deps/vocab/" + files.at(name);
}

struct Loaded {
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<tokenizer::Tokenizer> tok;
};

// Loaded once per vocab per process (the SmolLM2 file is a full model).
const Loaded* load(const std::string& path) {
  static std::map<std::string, std::unique_ptr<Loaded>> cache;
  auto it = cache.find(path);
  if (it != cache.end()) return it->second.get();
  std::unique_ptr<Loaded> l;
  if (fs::exists(path)) {
    auto f = gguf::File::open(path);
    EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.error());
    if (f.ok()) {
      auto t = tokenizer::Tokenizer::from_gguf(**f);
      EXPECT_TRUE(t.ok()) << path << ": " << (t.ok() ? "" : t.error());
      if (t.ok()) {
        l = std::make_unique<Loaded>();
        l->file = std::move(f).value();
        l->tok = std::move(t).value();
      }
    }
  }
  return (cache[path] = std::move(l)).get();
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t x : ids) s += std::to_string(x) + " ";
  return s;
}

std::string printable(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\n') o += "\\n";
    else if (c == '\r') o += "\\r";
    else if (c == '\t') o += "\\t";
    else o += c;
  }
  return o.size() > 160 ? o.substr(0, 160) + "..." : o;
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, CorpusMatchesLlamaCpp) {
  const std::string name = GetParam();
  const Loaded* l = load(model_path(name));
  if (!l) GTEST_SKIP() << "vocab not found: " << model_path(name);
  const Golden g = read_golden(name);
  const auto& texts = corpus();
  ASSERT_EQ(g.parse.size(), texts.size()) << "golden file out of date: rerun tools/make_tokenizer_golden.py";
  int mismatches = 0, shown = 0;
  auto check = [&](size_t i, bool parse_special, const std::vector<int32_t>& want) {
    const auto got = l->tok->encode(texts[i], /*add_special=*/true, parse_special);
    if (got == want) return;
    ++mismatches;
    if (shown++ < 8) {
      ADD_FAILURE() << name << " text #" << i << (parse_special ? "" : " (parse_special=false)") << " '"
                    << printable(texts[i]) << "'\n  want: " << ids_str(want) << "\n  got:  " << ids_str(got);
    }
  };
  for (size_t i = 0; i < texts.size(); ++i) check(i, true, g.parse[i]);
  const int parse_mismatches = mismatches;
  for (const auto& [i, want] : g.noparse) check(i, false, want);
  std::printf("[ tokenizer ] %s (%s): %d/%zu mismatching texts (parse_special), %d/%zu (no parse)\n",
              name.c_str(), std::string(l->tok->kind()).c_str(), parse_mismatches, texts.size(),
              mismatches - parse_mismatches, g.noparse.size());
  EXPECT_EQ(mismatches, 0);
}

TEST_P(GoldenTest, DecodeRoundTrip) {
  const Loaded* l = load(model_path(GetParam()));
  if (!l) GTEST_SKIP();
  const auto& tok = *l->tok;
  int failures = 0;
  for (const std::string& text : corpus()) {
    if (!tokenizer::is_valid_utf8(text)) continue;  // lossy by design (U+FFFD / bytes)
    // Without specials: decode(encode(x)) == x. SPM's add_space_prefix adds a "▁" in
    // front that decode drops again (llama_detokenize's first-token lstrip).
    const auto ids = tok.encode(text, /*add_special=*/false, /*parse_special=*/false);
    const std::string back = tok.decode(ids);
    if (back != text && failures++ < 5) ADD_FAILURE() << "'" << printable(text) << "' -> '" << printable(back) << "'";
    // With BOS and parsed specials, rendering specials gives the text back for BPE; SPM
    // adds the prefix space after BOS and after every special token.
    if (tok.kind() != "spm") {
      const auto ids2 = tok.encode(text, true, true);
      std::string want = text;
      if (tok.add_bos()) want = tok.piece(tok.bos(), true) + want;
      const std::string back2 = tok.decode(ids2, /*render_special=*/true);
      if (back2 != want && failures++ < 5) ADD_FAILURE() << "special '" << printable(text) << "' -> '" << printable(back2) << "'";
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST_P(GoldenTest, StreamDecoderMatchesDecode) {
  const Loaded* l = load(model_path(GetParam()));
  if (!l) GTEST_SKIP();
  int failures = 0;
  for (const std::string& text : corpus()) {
    const auto ids = l->tok->encode(text, true, false);
    const std::string whole = l->tok->decode(ids);
    tokenizer::StreamDecoder sd(*l->tok);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string part = sd.push(id);
      if (!tokenizer::is_valid_utf8(part) && failures++ < 5) ADD_FAILURE() << "invalid UTF-8 chunk in '" << printable(text) << "'";
      streamed += part;
    }
    streamed += sd.flush();
    if (tokenizer::is_valid_utf8(whole) && streamed != whole && failures++ < 5) {
      ADD_FAILURE() << "'" << printable(text) << "': stream '" << printable(streamed) << "' vs '" << printable(whole) << "'";
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST_P(GoldenTest, EncodesLongTextQuickly) {
  const Loaded* l = load(model_path(GetParam()));
  if (!l) GTEST_SKIP();
  std::string big;
  for (const std::string& t : corpus()) big += t + "\n";
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = l->tok->encode(big, true, true);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ tokenizer ] %s: %zu bytes -> %zu tokens in %.1f ms\n", GetParam().c_str(), big.size(), ids.size(), ms);
  EXPECT_GT(ids.size(), 20000u);
}

// Long runs of one character class and arbitrary bytes: no crash, no regex stack
// exhaustion, ids in range, and lossless for the valid-UTF-8 runs.
TEST_P(GoldenTest, PathologicalInputs) {
  const Loaded* l = load(model_path(GetParam()));
  if (!l) GTEST_SKIP();
  const auto& tok = *l->tok;
  std::vector<std::string> inputs = {std::string(100000, ' '), std::string(100000, 'a'),
                                     std::string(100000, '7'), std::string(50000, '\n'),
                                     std::string(30000, '!')};
  std::string emoji;
  for (int i = 0; i < 5000; ++i) emoji += "\xF0\x9F\xA6\x99 \xE4\xB8\xAD";
  inputs.push_back(emoji);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int k = 0; k < 20; ++k) {
    std::string r;
    for (int i = 0; i < 3000; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      r += static_cast<char>(x & 0xFF);
    }
    inputs.push_back(r);
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    const std::string& in = inputs[k];
    const auto ids = tok.encode(in, false, true);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.n_vocab());
    // Random bytes are lossy by design (U+FFFD, vocabularies without some byte tokens),
    // and the corpus's \xHH lines check those against llama.cpp; here only no crash.
    if (k < 6) {
      EXPECT_TRUE(tok.decode(ids, true) == in) << "input #" << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabs, GoldenTest, ::testing::Values("smollm2", "llama_spm", "llama_bpe", "qwen2", "gemma3", "toy_gpt_oss"));

// llama.cpp's own test cases (models/ggml-vocab-<name>.gguf.inp/.out): texts separated by
// "\n__ggml_vocab_test__\n", ids tokenized with add_special=false, parse_special=false.
TEST(LlamaCppVocabTests, InpOutFiles) {
  const std::string dir = kSrc + "/.deps/vocab";
  if (!fs::exists(dir)) GTEST_SKIP() << dir << " missing";
  int n_files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string path = e.path().string();
    if (e.path().extension() != ".gguf" || !fs::exists(path + ".inp") || !fs::exists(path + ".out")) continue;
    auto f = gguf::File::open(path);
    ASSERT_TRUE(f.ok()) << f.error();
    auto tok = tokenizer::Tokenizer::from_gguf(**f);
    if (!tok.ok()) {
      std::printf("[ tokenizer ] %s: not supported (%s)\n", e.path().filename().c_str(), tok.error().c_str());
      continue;
    }
    // A pre-tokenizer we do not know falls back to "default" (with a warning): such a vocab
    // is unsupported, not a failure of the supported ones.
    const std::string pre = (*f)->get_string("tokenizer.ggml.pre").value_or("default");
    if ((*tok)->kind() == "bpe:default" && pre != "default") {
      std::printf("[ tokenizer ] %s: not supported (pre-tokenizer '%s')\n", e.path().filename().c_str(), pre.c_str());
      continue;
    }
    const std::string raw = read_file(path + ".inp");
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> inputs;
    for (size_t pos = 0; pos < raw.size();) {
      const size_t next = raw.find(sep, pos);
      if (next == std::string::npos) { inputs.push_back(raw.substr(pos)); break; }
      inputs.push_back(raw.substr(pos, next - pos));
      pos = next + sep.size();
    }
    std::vector<std::vector<int32_t>> outputs;
    std::istringstream out(read_file(path + ".out"));
    for (std::string line; std::getline(out, line);) outputs.push_back(parse_ids(line));
    ASSERT_EQ(inputs.size(), outputs.size()) << path;
    int bad = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto got = (*tok)->encode(inputs[i], false, false);
      if (got != outputs[i]) {
        ++bad;
        ADD_FAILURE() << e.path().filename() << " '" << printable(inputs[i]) << "'\n  want: " << ids_str(outputs[i])
                      << "\n  got:  " << ids_str(got);
      }
    }
    std::printf("[ tokenizer ] %s (%s): %d/%zu llama.cpp cases differ\n", e.path().filename().c_str(),
                std::string((*tok)->kind()).c_str(), bad, inputs.size());
    ++n_files;
  }
  if (n_files == 0) GTEST_SKIP() << "no ggml-vocab-*.gguf with .inp/.out in " << dir;
}

// --- hand-made vocabularies -------------------------------------------------------------

std::unique_ptr<gguf::File> write_and_open(gguf::Writer& w, const std::string& name) {
  const std::string path = (fs::temp_directory_path() / ("shardlm_tok_" + std::to_string(getpid()) + "_" + name + ".gguf")).string();
  EXPECT_TRUE(w.write(path).ok());
  auto f = gguf::File::open(path);
  EXPECT_TRUE(f.ok());
  fs::remove(path);
  return f.ok() ? std::move(f).value() : nullptr;
}

TEST(TokenizerErrors, MissingTokenizerKeys) {
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::string("llama"));
  auto f = write_and_open(w, "nokeys");
  ASSERT_TRUE(f);
  auto t = tokenizer::Tokenizer::from_gguf(*f);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().find("tokenizer.ggml.model"), std::string::npos) << t.error();
}

TEST(TokenizerErrors, UnsupportedModelAndMissingArrays) {
  {
    gguf::Writer w;
    w.set("tokenizer.ggml.model", gguf::Value::string("bert"));
    w.set("tokenizer.ggml.tokens", gguf::Value::string_array({"a", "b"}));
    auto f = write_and_open(w, "bert");
    auto t = tokenizer::Tokenizer::from_gguf(*f);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.error().find("unsupported tokenizer.ggml.model 'bert'"), std::string::npos) << t.error();
  }
  {
    gguf::Writer w;
    w.set("tokenizer.ggml.model", gguf::Value::string("llama"));
    auto f = write_and_open(w, "notokens");
    auto t = tokenizer::Tokenizer::from_gguf(*f);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.error().find("tokenizer.ggml.tokens"), std::string::npos) << t.error();
  }
  {
    gguf::Writer w;
    w.set("tokenizer.ggml.model", gguf::Value::string("gpt2"));
    w.set("tokenizer.ggml.pre", gguf::Value::string("gpt-2"));
    w.set("tokenizer.ggml.tokens", gguf::Value::string_array({"a", "b"}));
    auto f = write_and_open(w, "nomerges");
    auto t = tokenizer::Tokenizer::from_gguf(*f);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.error().find("merges"), std::string::npos) << t.error();
  }
}

TEST(TokenizerErrors, UnknownPreTokenizerFallsBackToDefault) {
  std::vector<std::string> toks;
  for (int b = 0; b < 256; ++b) toks.push_back(tokenizer::byte_to_bpe_char(static_cast<uint8_t>(b)));
  toks.push_back("ab");
  gguf::Writer w;
  w.set("tokenizer.ggml.model", gguf::Value::string("gpt2"));
  w.set("tokenizer.ggml.pre", gguf::Value::string("no-such-pre"));
  w.set("tokenizer.ggml.tokens", gguf::Value::string_array(toks));
  w.set("tokenizer.ggml.merges", gguf::Value::string_array({"a b"}));
  auto f = write_and_open(w, "unknownpre");
  auto t = tokenizer::Tokenizer::from_gguf(*f);
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ((*t)->kind(), "bpe:default");
  EXPECT_EQ((*t)->encode("ab", false, false), std::vector<int32_t>({256}));
  EXPECT_EQ((*t)->decode((*t)->encode("ab!? x", false, false)), "ab!? x");
}

TEST(StreamDecoder, HoldsSplitCharactersAndReplacesInvalid) {
  const Loaded* l = load(model_path("llama_spm"));
  if (!l) GTEST_SKIP();
  const auto& tok = *l->tok;
  // U+1F999 (llama) has no SPM token: four byte tokens.
  const auto ids = tok.encode("\xF0\x9F\xA6\x99", false, false);
  ASSERT_GE(ids.size(), 4u);
  tokenizer::StreamDecoder sd(tok);
  std::string got;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string part = sd.push(ids[i]);
    if (i + 1 < ids.size()) {
      EXPECT_TRUE(part.empty() || part == " ") << i;  // held
    }
    got += part;
  }
  EXPECT_EQ(got, "\xF0\x9F\xA6\x99");
  // A lone lead byte is held, then flushed as U+FFFD; a stray continuation byte is
  // replaced at once.
  const auto lead = tok.find_token("<0xF0>");
  const auto cont = tok.find_token("<0x80>");
  ASSERT_TRUE(lead && cont);
  tokenizer::StreamDecoder sd2(tok);
  EXPECT_EQ(sd2.push(*lead), "");
  EXPECT_EQ(sd2.push(*tok.find_token("A")), "\xEF\xBF\xBD" "A");
  EXPECT_EQ(sd2.push(*cont), "\xEF\xBF\xBD");
  EXPECT_EQ(sd2.push(*lead), "");
  EXPECT_EQ(sd2.flush(), "\xEF\xBF\xBD");
}

TEST(TokenizerApi, SpecialTokensAndEog) {
  if (const Loaded* l = load(model_path("smollm2"))) {
    const auto& t = *l->tok;
    EXPECT_EQ(t.kind(), "bpe:smollm");
    const auto ims = t.find_token("<|im_start|>");
    const auto ime = t.find_token("<|im_end|>");
    ASSERT_TRUE(ims && ime);
    EXPECT_TRUE(t.is_eog(*ime));
    EXPECT_TRUE(t.is_eog(*t.find_token("<|endoftext|>")));
    EXPECT_FALSE(t.is_eog(*ims));
    EXPECT_EQ(t.encode("<|im_start|>", false, true), std::vector<int32_t>({*ims}));
    EXPECT_GT(t.encode("<|im_start|>", false, false).size(), 1u);
    EXPECT_EQ(t.piece(*ims), "");
    EXPECT_EQ(t.piece(*ims, true), "<|im_start|>");
  }
  if (const Loaded* l = load(model_path("llama_bpe"))) {
    const auto& t = *l->tok;
    EXPECT_EQ(t.kind(), "bpe:llama-bpe");
    EXPECT_TRUE(t.add_bos());
    EXPECT_EQ(t.bos(), 128000);
    EXPECT_TRUE(t.is_eog(*t.find_token("<|eot_id|>")));
    EXPECT_TRUE(t.is_eog(t.eos()));
    EXPECT_EQ(t.encode("", true, true), std::vector<int32_t>({128000}));
  }
  if (const Loaded* l = load(model_path("llama_spm"))) {
    const auto& t = *l->tok;
    EXPECT_EQ(t.kind(), "spm");
    EXPECT_EQ(t.encode("", true, false), std::vector<int32_t>({1}));
    EXPECT_TRUE(t.is_eog(2));
    EXPECT_EQ(t.decode(t.encode("Hello world", true, false)), " Hello world");  // BOS keeps the prefix space
    EXPECT_EQ(t.decode(t.encode("Hello world", false, false)), "Hello world");
  }
}

}  // namespace
