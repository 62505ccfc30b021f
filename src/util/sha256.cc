// sha256.cc: OpenSSL EVP-based SHA-256.
#include "util/sha256.h"

#include <openssl/evp.h>

#include <cstdio>
#include <memory>
#include <vector>

namespace util {

namespace {
std::string to_hex(const unsigned char* d, unsigned n) {
  static const char* kHex = "0123456789abcdef";
  std::string s(n * 2, '0');
  for (unsigned i = 0; i < n; ++i) {
    s[2 * i] = kHex[d[i] >> 4];
    s[2 * i + 1] = kHex[d[i] & 15];
  }
  return s;
}
using Ctx = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;
}  // namespace

std::string sha256_hex(const void* data, size_t size) {
  Ctx ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  EVP_DigestUpdate(ctx.get(), data, size);
  EVP_DigestFinal_ex(ctx.get(), d, &n);
  return to_hex(d, n);
}

Expected<std::string> sha256_file(const std::string& path) {
  std::unique_ptr<FILE, decltype(&std::fclose)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return Status::error("cannot open '" + path + "'");
  Ctx ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  std::vector<unsigned char> buf(1 << 20);
  size_t got;
  while ((got = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) EVP_DigestUpdate(ctx.get(), buf.data(), got);
  if (std::ferror(f.get())) return Status::error("error reading '" + path + "'");
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_DigestFinal_ex(ctx.get(), d, &n);
  return to_hex(d, n);
}

}  // namespace util
