// quant_tool.cc: a small CLI over tensor/quants.h for the Python cross-checks
// (tests/py/test_quants.py). Raw files are little-endian, no header:
//   quant_tool quant TYPE IN.f32 OUT.bin [N]      quantize floats as rows of N (default:
//                                                 the whole file is one row)
//   quant_tool dequant-raw TYPE IN.bin OUT.f32    dequantize raw blocks of TYPE
//   quant_tool dequant GGUF_FILE TENSOR OUT.f32   dequantize one tensor of a GGUF file
//   quant_tool list GGUF_FILE                     "name type n_elements" per tensor
// Deliberately not a user tool: no conversions between files, no imatrix.
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tensor/quants.h"
#include "tensor/types.h"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: quant_tool quant TYPE IN.f32 OUT.bin [N]\n"
               "       quant_tool dequant-raw TYPE IN.bin OUT.f32\n"
               "       quant_tool dequant GGUF_FILE TENSOR_NAME OUT.f32\n"
               "       quant_tool list GGUF_FILE\n");
  return 2;
}

bool read_file(const std::string& path, std::vector<uint8_t>* out) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) { std::fprintf(stderr, "cannot open %s\n", path.c_str()); return false; }
  out->clear();
  uint8_t buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) out->insert(out->end(), buf, buf + got);
  const bool ok = !std::ferror(f);
  std::fclose(f);
  if (!ok) std::fprintf(stderr, "cannot read %s\n", path.c_str());
  return ok;
}

bool write_file(const std::string& path, const void* data, size_t n) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) { std::fprintf(stderr, "cannot create %s\n", path.c_str()); return false; }
  const bool ok = std::fwrite(data, 1, n, f) == n && std::fclose(f) == 0;
  if (!ok) std::fprintf(stderr, "cannot write %s\n", path.c_str());
  return ok;
}

// Type by name, including the activation-only types (Q8_1, Q8_K) that type_from_name
// does not return because they are not weight types.
bool parse_type(const std::string& name, tensor::Type* t) {
  if (auto r = tensor::type_from_name(name)) { *t = *r; return true; }
  for (tensor::Type c : {tensor::Type::Q8_1, tensor::Type::Q8_K}) {
    std::string up = name;
    for (char& ch : up) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (up == tensor::type_name(c)) { *t = c; return true; }
  }
  std::fprintf(stderr, "unknown or unsupported type %s\n", name.c_str());
  return false;
}

int cmd_quant(int argc, char** argv) {
  if (argc != 5 && argc != 6) return usage();
  tensor::Type t;
  if (!parse_type(argv[2], &t)) return 1;
  std::vector<uint8_t> raw;
  if (!read_file(argv[3], &raw)) return 1;
  if (raw.size() % 4) { std::fprintf(stderr, "input size not a multiple of 4\n"); return 1; }
  const int64_t total = static_cast<int64_t>(raw.size() / 4);
  const int64_t n = argc == 6 ? std::stoll(argv[5]) : total;  // row length
  const int bs = tensor::traits(t).block_size;
  if (n <= 0 || total % n || n % bs) {
    std::fprintf(stderr, "%lld floats cannot be split in rows of %lld (block size %d)\n",
                 static_cast<long long>(total), static_cast<long long>(n), bs);
    return 1;
  }
  std::vector<float> src(static_cast<size_t>(total));  // [rows][n]
  std::memcpy(src.data(), raw.data(), raw.size());
  const size_t rb = tensor::row_bytes(t, n);
  std::vector<uint8_t> dst(rb * static_cast<size_t>(total / n));  // [rows][rb]
  for (int64_t r = 0; r < total / n; ++r)
    tensor::quantize_row(t, src.data() + r * n, dst.data() + r * rb, n);
  return write_file(argv[4], dst.data(), dst.size()) ? 0 : 1;
}

int cmd_dequant_raw(int argc, char** argv) {
  if (argc != 5) return usage();
  tensor::Type t;
  if (!parse_type(argv[2], &t)) return 1;
  std::vector<uint8_t> raw;
  if (!read_file(argv[3], &raw)) return 1;
  const tensor::TypeTraits& tr = tensor::traits(t);
  if (raw.size() % tr.block_bytes) {
    std::fprintf(stderr, "input size not a multiple of the %s block (%zu bytes)\n", tr.name,
                 tr.block_bytes);
    return 1;
  }
  const int64_t n = static_cast<int64_t>(raw.size() / tr.block_bytes) * tr.block_size;
  std::vector<float> dst(static_cast<size_t>(n));
  tensor::dequantize_row(t, raw.data(), dst.data(), n);
  return write_file(argv[4], dst.data(), dst.size() * 4) ? 0 : 1;
}

int cmd_dequant(int argc, char** argv) {
  if (argc != 5) return usage();
  auto file = gguf::File::open(argv[2]);
  if (!file) { std::fprintf(stderr, "%s\n", file.error().c_str()); return 1; }
  const gguf::TensorInfo* ti = (*file)->find_tensor(argv[3]);
  if (!ti) { std::fprintf(stderr, "no tensor named %s in %s\n", argv[3], argv[2]); return 1; }
  const tensor::TypeTraits& tr = tensor::traits(ti->type);
  if (!tr.supported && ti->type != tensor::Type::Q8_1 && ti->type != tensor::Type::Q8_K) {
    std::fprintf(stderr, "tensor %s has unsupported type %s\n", argv[3], tr.name);
    return 1;
  }
  // Rows of ne[0] elements, each row_bytes apart: [rows][ne0] floats out.
  const int64_t ne0 = ti->ne.empty() ? 1 : ti->ne[0];
  const int64_t rows = ti->rows();
  const size_t rb = tensor::row_bytes(ti->type, ne0);
  std::vector<float> dst(static_cast<size_t>(ne0 * rows));
  for (int64_t r = 0; r < rows; ++r)
    tensor::dequantize_row(ti->type, ti->data + r * rb, dst.data() + r * ne0, ne0);
  return write_file(argv[4], dst.data(), dst.size() * 4) ? 0 : 1;
}

int cmd_list(int argc, char** argv) {
  if (argc != 3) return usage();
  auto file = gguf::File::open(argv[2]);
  if (!file) { std::fprintf(stderr, "%s\n", file.error().c_str()); return 1; }
  for (const gguf::TensorInfo& ti : (*file)->tensors())
    std::printf("%s %s %lld\n", ti.name.c_str(), tensor::type_name(ti.type),
                static_cast<long long>(ti.n_elements()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string cmd = argv[1];
  if (cmd == "quant") return cmd_quant(argc, argv);
  if (cmd == "dequant-raw") return cmd_dequant_raw(argc, argv);
  if (cmd == "dequant") return cmd_dequant(argc, argv);
  if (cmd == "list") return cmd_list(argc, argv);
  return usage();
}
