// gguf_test.cc: GGUF reader/writer tests. Round trips through our writer for every value
// type, tensor types and alignments; hostile inputs built byte by byte (each must give a
// Status naming the problem, never a crash); truncation at every length and seeded bit
// flips. Cross-checks against the Python gguf package run only where it is installed;
// the golden cross-checks against llama.cpp files live in tests/py.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "scratch.h"

namespace {

using gguf::File;
using gguf::Value;
using gguf::ValueType;
using gguf::Writer;

std::string tmp_path(const std::string& name) { return shardlm_test::scratch_path(name + ".gguf"); }

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Little-endian byte builder for hand-made (often hostile) files.
struct Raw {
  std::vector<uint8_t> b;
  Raw& uint(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  Raw& u8(uint8_t v) { return uint(v, 1); }
  Raw& u32(uint32_t v) { return uint(v, 4); }
  Raw& u64(uint64_t v) { return uint(v, 8); }
  Raw& str(const std::string& s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Raw& pad(size_t a) {
    while (b.size() % a) b.push_back(0);
    return *this;
  }
  Raw& zeros(size_t n) {
    b.insert(b.end(), n, 0);
    return *this;
  }
};

Raw header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
  Raw r;
  r.b = {'G', 'G', 'U', 'F'};
  return r.u32(version).u64(n_tensors).u64(n_kv);
}

// Tensor info: name, dims, type id, offset.
Raw& tensor_info(Raw& r, const std::string& name, std::vector<int64_t> ne, uint32_t type, uint64_t offset) {
  r.str(name).u32(static_cast<uint32_t>(ne.size()));
  for (int64_t d : ne) r.u64(static_cast<uint64_t>(d));
  return r.u32(type).u64(offset);
}

util::Expected<std::unique_ptr<File>> parse(const std::vector<uint8_t>& b) { return File::parse(b.data(), b.size()); }

void expect_error(const std::vector<uint8_t>& b, const std::string& substr) {
  auto r = parse(b);
  ASSERT_FALSE(r.ok()) << "expected an error containing '" << substr << "'";
  EXPECT_NE(r.error().find(substr), std::string::npos) << "message: " << r.error();
}

// Reads everything a consumer could touch (values, tensor bytes, the printout).
void touch_all(const File& f) {
  size_t sink = 0;
  for (const auto& [k, v] : f.kv()) sink += k.size() + v.to_string(4, 16).size() + v.count();
  for (const gguf::TensorInfo& t : f.tensors()) {
    for (uint64_t i = 0; i < t.n_bytes; i += 97) sink += t.data[i];
    if (t.n_bytes) sink += t.data[t.n_bytes - 1];
    sink += static_cast<size_t>(t.rows());
  }
  FILE* null = std::fopen("/dev/null", "w");
  gguf::print_info(f, null, true);
  std::fclose(null);
  EXPECT_GE(sink, 0u);
}

Value make_int(ValueType t, int64_t s, uint64_t u) {
  Value v;
  v.type = t;
  v.i64 = s;
  v.u64 = u;
  return v;
}

Value make_array(ValueType elem, std::vector<int64_t> ints, std::vector<double> floats = {}) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem_type = elem;
  v.ints = std::move(ints);
  v.floats = std::move(floats);
  return v;
}

// A small valid file: a few keys and three tensors of different types.
std::vector<uint8_t> small_file(const std::string& name) {
  Writer w;
  w.set("general.architecture", Value::string("llama"));
  w.set("llama.block_count", Value::u32(2));
  w.set("tokenizer.ggml.tokens", Value::string_array({"<s>", "</s>", "a"}));
  w.set("tokenizer.ggml.scores", Value::f32_array({0.f, -1.5f, 2.f}));
  std::vector<float> f32(8 * 2, 1.0f);
  w.add_tensor("a.weight", {8, 2}, tensor::Type::F32, f32.data());
  w.add_tensor("b.weight", {32, 1}, tensor::Type::Q8_0, [](std::vector<uint8_t>& out) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i);
  });
  w.add_tensor("c.weight", {3}, tensor::Type::F16, [](std::vector<uint8_t>& out) { std::fill(out.begin(), out.end(), 7); });
  const std::string path = tmp_path(name);
  EXPECT_TRUE(w.write(path).ok());
  return read_bytes(path);
}

TEST(GgufValue, ScalarRoundTripEveryType) {
  Writer w;
  w.set("u8", make_int(ValueType::UINT8, 0, 255));
  w.set("i8", make_int(ValueType::INT8, -128, 0));
  w.set("u16", make_int(ValueType::UINT16, 0, 65535));
  w.set("i16", make_int(ValueType::INT16, -32768, 0));
  w.set("u32", Value::u32(4000000000u));
  w.set("i32", Value::i32(-2000000000));
  w.set("f32", Value::f32(1e-5f));
  w.set("bool", Value::boolean(true));
  w.set("str", Value::string("héllo \"world\"\n"));
  w.set("u64", Value::u64v(~uint64_t(0)));
  w.set("i64", make_int(ValueType::INT64, INT64_MIN, 0));
  Value f64;
  f64.type = ValueType::FLOAT64;
  f64.f64 = 0.1;
  w.set("f64", f64);
  w.set("str", Value::string("héllo \"world\"\n"));  // replaces, does not duplicate
  const std::string path = tmp_path("scalars");
  ASSERT_TRUE(w.write(path).ok());
  auto r = File::open(path);
  ASSERT_TRUE(r.ok()) << r.error();
  const File& f = **r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.kv().size(), 12u);
  EXPECT_EQ(f.get_int("u8"), 255);
  EXPECT_EQ(f.get_int("i8"), -128);
  EXPECT_EQ(f.get_int("u16"), 65535);
  EXPECT_EQ(f.get_int("i16"), -32768);
  EXPECT_EQ(f.get_int("u32"), 4000000000LL);
  EXPECT_EQ(f.get_int("i32"), -2000000000);
  EXPECT_EQ(f.get_float("f32"), static_cast<double>(1e-5f));
  EXPECT_EQ(f.get_bool("bool"), true);
  EXPECT_EQ(f.get_int("bool"), 1);
  EXPECT_EQ(f.get_string("str"), "héllo \"world\"\n");
  EXPECT_EQ(f.find("u64")->u64, ~uint64_t(0));
  EXPECT_EQ(f.get_int("u64"), std::nullopt);  // does not fit int64
  EXPECT_EQ(f.get_int("i64"), INT64_MIN);
  EXPECT_EQ(f.get_float("f64"), 0.1);
  EXPECT_EQ(f.get_float("u32"), 4e9);
  EXPECT_EQ(f.get_string("u32"), std::nullopt);
  EXPECT_EQ(f.get_int("missing"), std::nullopt);
  EXPECT_EQ(f.find("f32")->to_string(), "1e-05");
  EXPECT_EQ(f.find("str")->to_string(), "\"héllo \\\"world\\\"\\n\"");
  EXPECT_EQ(f.find("bool")->to_string(), "true");
  EXPECT_EQ(f.find("i8")->to_string(), "-128");
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_EQ(f.data_offset(), f.file_size());  // vocab-only style: ends at the metadata
}

TEST(GgufValue, ArrayRoundTripEveryElementType) {
  Writer w;
  w.set("a.u8", make_array(ValueType::UINT8, {0, 1, 255}));
  w.set("a.i8", make_array(ValueType::INT8, {-128, 0, 127}));
  w.set("a.u16", make_array(ValueType::UINT16, {0, 65535}));
  w.set("a.i16", make_array(ValueType::INT16, {-32768, 32767}));
  w.set("a.u32", make_array(ValueType::UINT32, {0, 4294967295LL}));
  w.set("a.i32", Value::i32_array({-1, 2, -3}));
  w.set("a.f32", Value::f32_array({0.5f, -2.25f}));
  w.set("a.bool", make_array(ValueType::BOOL, {1, 0, 1}));
  w.set("a.str", Value::string_array({"", "x", "é"}));
  w.set("a.u64", make_array(ValueType::UINT64, {0, -1}));  // -1 = bit pattern of UINT64_MAX
  w.set("a.i64", make_array(ValueType::INT64, {INT64_MIN, INT64_MAX}));
  w.set("a.f64", make_array(ValueType::FLOAT64, {}, {1e300, -0.0}));
  w.set("a.empty", Value::string_array({}));
  const std::string path = tmp_path("arrays");
  ASSERT_TRUE(w.write(path).ok());
  auto r = File::open(path);
  ASSERT_TRUE(r.ok()) << r.error();
  const File& f = **r;
  EXPECT_EQ(f.find("a.u8")->ints, (std::vector<int64_t>{0, 1, 255}));
  EXPECT_EQ(f.find("a.i8")->ints, (std::vector<int64_t>{-128, 0, 127}));
  EXPECT_EQ(f.find("a.u16")->ints, (std::vector<int64_t>{0, 65535}));
  EXPECT_EQ(f.find("a.i16")->ints, (std::vector<int64_t>{-32768, 32767}));
  EXPECT_EQ(f.find("a.u32")->ints, (std::vector<int64_t>{0, 4294967295LL}));
  EXPECT_EQ(f.find("a.i32")->ints, (std::vector<int64_t>{-1, 2, -3}));
  EXPECT_EQ(f.find("a.f32")->floats, (std::vector<double>{0.5, -2.25}));
  EXPECT_EQ(f.find("a.bool")->ints, (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(f.find("a.str")->strs, (std::vector<std::string>{"", "x", "é"}));
  EXPECT_EQ(f.find("a.u64")->ints, (std::vector<int64_t>{0, -1}));
  EXPECT_EQ(f.find("a.i64")->ints, (std::vector<int64_t>{INT64_MIN, INT64_MAX}));
  EXPECT_EQ(f.find("a.f64")->floats, (std::vector<double>{1e300, -0.0}));
  EXPECT_EQ(f.find("a.empty")->count(), 0u);
  EXPECT_EQ(f.find("a.empty")->elem_type, ValueType::STRING);
  EXPECT_EQ(f.find("a.bool")->to_string(), "[true, false, true]");
  EXPECT_EQ(f.find("a.u64")->to_string(), "[0, 18446744073709551615]");
  EXPECT_EQ(f.find("a.f32")->to_string(), "[0.5, -2.25]");
  EXPECT_EQ(f.find("a.empty")->to_string(), "[]");
  EXPECT_EQ(f.find("a.i32")->count(), 3u);
}

TEST(GgufValue, ToStringAbbreviatesLongArraysAndStrings) {
  std::vector<std::string> toks(49152, "tok");
  toks[0] = "<|endoftext|>";
  toks[1] = "<|im_start|>";
  EXPECT_EQ(Value::string_array(toks).to_string(2), "[49152 strings: \"<|endoftext|>\", \"<|im_start|>\", ... ]");
  EXPECT_EQ(Value::i32_array({1, 2, 3, 4}).to_string(3), "[4 int32s: 1, 2, 3, ... ]");
  EXPECT_EQ(Value::i32_array({1, 2, 3}).to_string(3), "[1, 2, 3]");
  EXPECT_EQ(Value::string(std::string(300, 'x')).to_string(8, 10), "\"xxxxxxxxxx...\" (300 bytes)");
  EXPECT_EQ(Value::string("\xc3\xa9\xc3\xa9").to_string(8, 3), "\"\xc3\xa9...\" (4 bytes)");  // no half é
  EXPECT_EQ(Value::string("a\x01").to_string(), "\"a\\x01\"");
  EXPECT_EQ(Value::u32(7).as_float(), 7.0);
  EXPECT_EQ(Value::string("7").as_int(), std::nullopt);
  EXPECT_EQ(Value::f32(1.5f).as_int(), std::nullopt);
}

TEST(GgufWriter, TensorsOfSeveralTypes) {
  struct Case { const char* name; std::vector<int64_t> ne; uint32_t type; uint64_t bytes; };
  const std::vector<Case> cases = {
      {"f32", {5, 3}, 0, 60},         {"f16", {7}, 1, 14},          {"q4_0", {64, 2}, 2, 4 * 18},
      {"q8_0", {32}, 8, 34},          {"q4_k", {256, 2}, 12, 288},  {"q6_k", {512}, 14, 420},
      {"bf16", {3, 1, 2, 2}, 30, 24}, {"iq2_xxs", {256}, 16, 66},   {"empty", {0, 4}, 0, 0},
  };
  Writer w;
  w.set("general.name", Value::string("types"));
  int calls = 0;
  for (const Case& c : cases) {
    const uint8_t seed = static_cast<uint8_t>(c.type);
    w.add_tensor(c.name, c.ne, static_cast<tensor::Type>(c.type), [&calls, seed](std::vector<uint8_t>& out) {
      ++calls;
      for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(seed + i);
    });
  }
  const std::string path = tmp_path("types");
  ASSERT_TRUE(w.write(path).ok());
  EXPECT_EQ(calls, static_cast<int>(cases.size()));
  auto r = File::open(path);
  ASSERT_TRUE(r.ok()) << r.error();
  const File& f = **r;
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  ASSERT_EQ(f.tensors().size(), cases.size());
  for (const Case& c : cases) {
    const gguf::TensorInfo* t = f.find_tensor(c.name);
    ASSERT_NE(t, nullptr) << c.name;
    EXPECT_EQ(t->ne, c.ne) << c.name;
    EXPECT_EQ(static_cast<uint32_t>(t->type), c.type) << c.name;
    EXPECT_EQ(t->n_bytes, c.bytes) << c.name;
    EXPECT_EQ(t->offset % 32, 0u) << c.name;
    EXPECT_EQ(t->data, f.tensors()[0].data + (t->offset - f.tensors()[0].offset));
    for (uint64_t i = 0; i < t->n_bytes; ++i) ASSERT_EQ(t->data[i], static_cast<uint8_t>(c.type + i)) << c.name;
  }
  EXPECT_EQ(f.find_tensor("bf16")->rows(), 4);
  EXPECT_EQ(f.find_tensor("bf16")->n_elements(), 12);
  EXPECT_EQ(f.find_tensor("empty")->rows(), 4);
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
  touch_all(f);
}

TEST(GgufWriter, Alignment64) {
  Writer w;
  w.set_alignment(64);
  std::vector<float> x(3, 2.f);
  w.add_tensor("x", {3}, tensor::Type::F32, x.data());
  w.add_tensor("y", {3}, tensor::Type::F32, x.data());
  const std::string path = tmp_path("align64");
  ASSERT_TRUE(w.write(path).ok());
  auto r = File::open(path);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ((*r)->alignment(), 64u);
  EXPECT_EQ((*r)->get_int("general.alignment"), 64);
  EXPECT_EQ((*r)->data_offset() % 64, 0u);
  EXPECT_EQ((*r)->find_tensor("y")->offset, 64u);
  EXPECT_EQ((*r)->file_size(), (*r)->data_offset() + 128);  // each tensor padded
}

TEST(GgufWriter, ProducerOfWrongSizeIsACheckFailure) {
  Writer w;
  w.add_tensor("x", {4}, tensor::Type::F32, [](std::vector<uint8_t>& out) { out.push_back(1); });
  const std::string path = tmp_path("badproducer");  // named here: the dying child never cleans up
  EXPECT_DEATH((void)w.write(path), "n_bytes");
}

TEST(GgufWriter, UnwritablePathIsAStatus) {
  Writer w;
  util::Status st = w.write("/nonexistent-dir/x.gguf");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/nonexistent-dir/x.gguf"), std::string::npos) << st.message();
}

TEST(GgufReader, Version2HeaderAccepted) {
  std::vector<uint8_t> b = small_file("v2");
  b[4] = 2;
  auto r = parse(b);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ((*r)->version(), 2u);
  EXPECT_EQ((*r)->tensors().size(), 3u);
}

TEST(GgufReader, PrintInfo) {
  std::vector<uint8_t> b = small_file("print");
  auto r = parse(b);
  ASSERT_TRUE(r.ok()) << r.error();
  char* text = nullptr;
  size_t len = 0;
  FILE* out = open_memstream(&text, &len);
  gguf::print_info(**r, out, false);
  std::fclose(out);
  const std::string s(text, len);
  std::free(text);
  for (const char* want : {"GGUF v3", "alignment 32", "tensors:    3", "general.architecture", "\"llama\"",
                           "[\"<s>\", \"</s>\", \"a\"]", "[8, 2]", "Q8_0", "c.weight", "[FLOAT32]"}) {
    EXPECT_NE(s.find(want), std::string::npos) << "missing '" << want << "' in:\n" << s;
  }
}

TEST(GgufReader, OpenErrorsNameThePath) {
  auto r = File::open("/nonexistent/model.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("/nonexistent/model.gguf"), std::string::npos) << r.error();
  std::vector<uint8_t> b = small_file("cut");
  const std::string path = tmp_path("cut2");
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), 40);
  auto c = File::open(path);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find(path), std::string::npos) << c.error();
  EXPECT_NE(c.error().find("truncated"), std::string::npos) << c.error();
}

TEST(GgufReader, TruncatedAtEveryLength) {
  const std::vector<uint8_t> b = small_file("trunc");
  auto full = parse(b);
  ASSERT_TRUE(full.ok()) << full.error();
  uint64_t data_end = 0;  // the last tensor byte; only the final padding may be cut
  for (const auto& t : (*full)->tensors()) data_end = std::max(data_end, (*full)->data_offset() + t.offset + t.n_bytes);
  for (size_t len = 0; len < b.size(); ++len) {
    auto r = File::parse(b.data(), len);
    if (len >= data_end) {
      EXPECT_TRUE(r.ok()) << len << ": " << r.error();
      continue;
    }
    ASSERT_FALSE(r.ok()) << "accepted a file cut at " << len << " of " << b.size();
    const char* want = len < 4 ? "not a GGUF file" : "truncated";
    EXPECT_NE(r.error().find(want), std::string::npos) << len << ": " << r.error();
  }
}

TEST(GgufReader, RandomBitFlipsNeverCrash) {
  const std::vector<uint8_t> b = small_file("flips");
  std::mt19937 rng(1234);
  int accepted = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::vector<uint8_t> m = b;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t pos = rng() % m.size();
      if (iter % 2) m[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
      else m[pos] = static_cast<uint8_t>(rng());  // whole-byte garbage
    }
    auto r = parse(m);
    if (r.ok()) {
      ++accepted;
      touch_all(**r);
    } else {
      EXPECT_FALSE(r.error().empty());
    }
  }
  EXPECT_GT(accepted, 0);  // flips inside tensor data are harmless
}

TEST(GgufReader, HostileHeaders) {
  expect_error({}, "not a GGUF file");
  expect_error({'G', 'G', 'M', 'L', 3, 0, 0, 0}, "not a GGUF file");
  expect_error(header(0, 0, 0).b, "version 0");
  expect_error(header(0, 0, 1).b, "version 1 is no longer supported");
  expect_error(header(0, 0, 4).b, "newer than this reader");
  expect_error(header(0, 0, 0x03000000).b, "big-endian");
  expect_error(header(0, uint64_t(1) << 60).b, "truncated");
  expect_error(header(uint64_t(1) << 60, 0).b, "tensor infos");
  expect_error(header(0, ~uint64_t(0)).b, "negative");
  expect_error(header(~uint64_t(0) >> 1, 0).b, "truncated");
  EXPECT_TRUE(parse(header(0, 0).b).ok());
  EXPECT_TRUE(parse(header(0, 0, 2).b).ok());
}

TEST(GgufReader, HostileMetadata) {
  expect_error(header(0, 1).u64(uint64_t(1) << 60).zeros(16).b, "more than the limit");
  expect_error(header(0, 1).u64(1000).zeros(16).b, "truncated");
  expect_error(header(0, 1).str("").u32(4).u32(1).b, "empty metadata key");
  expect_error(header(0, 2).str("a").u32(4).u32(1).str("a").u32(4).u32(2).b, "duplicate key 'a'");
  expect_error(header(0, 1).str("k").u32(13).u32(0).b, "unknown value type 13");
  expect_error(header(0, 1).str("k").u32(0xFFFFFFFF).u32(0).b, "unknown value type -1");
  expect_error(header(0, 1).str("k").u32(9).u32(77).u64(0).b, "unknown value type 77");
  expect_error(header(0, 1).str("k").u32(9).u32(9).u64(1).u32(4).u64(1).u32(5).b, "nested array");
  expect_error(header(0, 1).str("k").u32(9).u32(8).u64(uint64_t(1) << 60).zeros(64).b, "exceeds the limit");
  expect_error(header(0, 1).str("k").u32(9).u32(8).u64(uint64_t(1) << 29).zeros(64).b, "truncated");
  expect_error(header(0, 1).str("k").u32(9).u32(12).u64(uint64_t(1) << 29).zeros(64).b, "truncated");
  expect_error(header(0, 1).str("k").u32(8).u64(uint64_t(1) << 40).zeros(64).b, "more than the limit");
  expect_error(header(0, 1).str("k").u32(8).u64(65).zeros(64).b, "key 'k'");
  expect_error(header(0, 1).str("k").u32(6).u8(0).b, "truncated");
  // general.alignment must be a UINT32 power of two.
  expect_error(header(0, 1).str("general.alignment").u32(4).u32(0).b, "nonzero power of two");
  expect_error(header(0, 1).str("general.alignment").u32(4).u32(48).b, "nonzero power of two");
  expect_error(header(0, 1).str("general.alignment").u32(5).u32(32).b, "must be UINT32");
  expect_error(header(0, 1).str("general.alignment").u32(10).u64(32).b, "must be UINT32");
  EXPECT_TRUE(parse(header(0, 1).str("general.alignment").u32(4).u32(1).b).ok());
}

// One tensor info (after a 0-kv header), padded, followed by `data_bytes` of data.
std::vector<uint8_t> one_tensor(const std::string& name, std::vector<int64_t> ne, uint32_t type, uint64_t offset,
                                size_t data_bytes) {
  Raw r = header(1, 0);
  tensor_info(r, name, std::move(ne), type, offset);
  return r.pad(32).zeros(data_bytes).b;
}

TEST(GgufReader, HostileTensorInfos) {
  EXPECT_TRUE(parse(one_tensor("t", {4}, 0, 0, 16)).ok());
  EXPECT_TRUE(parse(one_tensor("iq", {256}, 16, 0, 66)).ok());  // known but unsupported type
  EXPECT_TRUE(parse(one_tensor(std::string(63, 'n'), {4}, 0, 0, 16)).ok());
  expect_error(one_tensor(std::string(64, 'n'), {4}, 0, 0, 16), "tensor name is 64 bytes long");
  expect_error(one_tensor("t", {1, 1, 1, 1, 1}, 0, 0, 16), "n_dims = 5");
  expect_error(one_tensor("t", {4, -1}, 0, 0, 16), "negative");
  expect_error(one_tensor("t", {int64_t(1) << 32, int64_t(1) << 32}, 0, 0, 16), "overflows int64");
  expect_error(one_tensor("t", {int64_t(1) << 62}, 0, 0, 16), "byte size overflows");
  expect_error(one_tensor("t", {4}, 4, 0, 16), "unknown tensor type id 4");
  expect_error(one_tensor("t", {4}, 31, 0, 16), "unknown tensor type id 31");
  expect_error(one_tensor("t", {4}, 0xFFFFFFFF, 0, 16), "unknown tensor type id -1");
  expect_error(one_tensor("t", {33}, 2, 0, 64), "not a multiple of the Q4_0 block size 32");
  // The low-bit and codebook types: rows that are not whole blocks, and ids in the table's
  // gaps or past its end, are refused with the tensor's name.
  expect_error(one_tensor("blk.0.ffn_down.weight", {576, 2}, 23, 0, 1024),
               "tensor 'blk.0.ffn_down.weight'");
  expect_error(one_tensor("t", {576, 2}, 23, 0, 1024), "not a multiple of the IQ4_XS block size 256");
  expect_error(one_tensor("t", {48}, 39, 0, 64), "not a multiple of the MXFP4 block size 32");
  expect_error(one_tensor("t", {48}, 20, 0, 64), "not a multiple of the IQ4_NL block size 32");
  expect_error(one_tensor("t", {128}, 10, 0, 256), "not a multiple of the Q2_K block size 256");
  expect_error(one_tensor("t", {128}, 11, 0, 256), "not a multiple of the Q3_K block size 256");
  expect_error(one_tensor("blk.3.attn_q.weight", {32}, 36, 0, 64), "unknown tensor type id 36");
  expect_error(one_tensor("blk.3.attn_q.weight", {32}, 36, 0, 64), "tensor 'blk.3.attn_q.weight'");
  expect_error(one_tensor("t", {32}, 40, 0, 64), "unknown tensor type id 40");
  EXPECT_TRUE(parse(one_tensor("t", {256}, 23, 0, 136)).ok());
  EXPECT_TRUE(parse(one_tensor("t", {64}, 39, 0, 34)).ok());
  expect_error(one_tensor("t", {4}, 0, 16, 64), "not a multiple of the alignment");
  expect_error(one_tensor("t", {4}, 0, 32, 40), "extends past the end");
  expect_error(one_tensor("t", {4}, 0, uint64_t(1) << 63, 40), "extends past the end");
  expect_error(one_tensor("t", {4}, 0, ~uint64_t(0) - 31, 40), "'t'");
  expect_error(one_tensor("t", {4}, 0, 0, 15), "truncated");
  Raw two = header(2, 0);
  tensor_info(two, "same", {4}, 0, 0);
  tensor_info(two, "same", {4}, 0, 32);
  expect_error(two.pad(32).zeros(64).b, "duplicate tensor name 'same'");
  Raw cut = header(1, 0);
  tensor_info(cut, "t", {4}, 0, 0);
  expect_error(cut.b, "truncated");  // no padding or data after the infos
}

// Cross-check with the Python gguf package (skipped where it is not installed): it reads
// the file we wrote, and writes one we read.
TEST(GgufCross, PythonGgufPackage) {
  if (std::system("python3 -c 'import gguf, numpy' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python gguf missing";
  const std::vector<uint8_t> ours = small_file("py_ours");
  const std::string ours_path = tmp_path("py_ours");
  const std::string theirs_path = tmp_path("py_theirs");
  const std::string script = tmp_path("py_script") + ".py";
  std::ofstream(script) << R"(import sys, numpy as np, gguf
r = gguf.GGUFReader(sys.argv[1])
assert r.fields['general.architecture'].contents() == 'llama', r.fields['general.architecture'].contents()
assert r.fields['tokenizer.ggml.tokens'].contents() == ['<s>', '</s>', 'a']
t = {x.name: x for x in r.tensors}
assert list(t['a.weight'].shape) == [8, 2] and t['a.weight'].tensor_type == gguf.GGMLQuantizationType.F32
assert np.all(t['a.weight'].data == 1.0)
assert t['b.weight'].tensor_type == gguf.GGMLQuantizationType.Q8_0
w = gguf.GGUFWriter(sys.argv[2], 'qwen2')
w.add_uint32('qwen2.block_count', 3)
w.add_array('tokenizer.ggml.token_type', [1, 2, 3])
w.add_tensor('w', np.arange(12, dtype=np.float32).reshape(3, 4))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
)";
  ASSERT_EQ(std::system(("python3 " + script + " " + ours_path + " " + theirs_path).c_str()), 0);
  auto r = File::open(theirs_path);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ((*r)->get_string("general.architecture"), "qwen2");
  EXPECT_EQ((*r)->get_int("qwen2.block_count"), 3);
  EXPECT_EQ((*r)->find("tokenizer.ggml.token_type")->count(), 3u);
  const gguf::TensorInfo* w = (*r)->find_tensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->ne, (std::vector<int64_t>{4, 3}));
  float v[12];
  std::memcpy(v, w->data, sizeof v);
  EXPECT_EQ(v[11], 11.0f);
}

TEST(GgufReader, RealModelIfPresent) {
  const char* env = std::getenv("SHARDLM_MODEL");
  const std::string path = env ? env : SHARDLM_DEFAULT_MODEL;
  if (!std::ifstream(path).good()) GTEST_SKIP() << "no model at " << path;
  auto r = File::open(path);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_NE((*r)->find_tensor("token_embd.weight"), nullptr);
  EXPECT_TRUE((*r)->get_string("general.architecture").has_value());
  touch_all(**r);
}

}  // namespace
