// tls.cc: loading and checking the HTTPS certificate and key (tls.h).
#include "serve/tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#error "cpp-httplib without CPPHTTPLIB_OPENSSL_SUPPORT: link PkgConfig::HTTPLIB (its Cflags define it)"
#endif

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>

namespace serve {

namespace {

// The reason of OpenSSL's latest error on this thread, as " (reason)", or ""; clears the queue.
std::string last_openssl_error() {
  const unsigned long e = ERR_peek_last_error();
  std::string s;
  if (e) {
    const char* r = ERR_reason_error_string(e);
    s = r ? r : "error " + std::to_string(e);
  }
  ERR_clear_error();
  return s.empty() ? "" : " (" + s + ")";
}

util::Status readable(const char* option, const std::string& file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(file, ec)) return util::Status::error(std::string(option) + " " + file + ": no such file");
  if (fs::is_directory(file, ec)) return util::Status::error(std::string(option) + " " + file + " is a directory");
  if (!std::ifstream(file).good())
    return util::Status::error(std::string(option) + " " + file + ": cannot read it (permissions?)");
  return util::ok_status();
}

// A passphrase-protected key fails instead of prompting on the terminal.
int no_passphrase(char*, int, int, void*) { return 0; }

}  // namespace

util::Status setup_tls(SSL_CTX& ctx, const std::string& cert_file, const std::string& key_file) {
  if (util::Status st = readable("--tls-cert", cert_file); !st.ok()) return st;
  if (util::Status st = readable("--tls-key", key_file); !st.ok()) return st;
  ERR_clear_error();
  SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(&ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION);
  if (SSL_CTX_use_certificate_chain_file(&ctx, cert_file.c_str()) != 1)
    return util::Status::error("--tls-cert " + cert_file + " is not a PEM certificate" + last_openssl_error());
  // The key is read apart from the certificate, so that a key of another certificate is
  // told from a file that holds no key.
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_file(key_file.c_str(), "r"), BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr) : nullptr, EVP_PKEY_free);
  if (!key) {
    ERR_clear_error();
    std::ifstream in(key_file);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.find("ENCRYPTED") != std::string::npos)
      return util::Status::error("--tls-key " + key_file + " is protected by a passphrase, which a server cannot "
                                 "type: write it without one (`openssl pkey -in KEY -out PLAIN.pem`)");
    return util::Status::error("--tls-key " + key_file + " is not a PEM private key" + last_openssl_error());
  }
  if (X509_check_private_key(SSL_CTX_get0_certificate(&ctx), key.get()) != 1) {
    ERR_clear_error();
    return util::Status::error("--tls-key " + key_file + " does not belong to the certificate in --tls-cert " +
                               cert_file + " (a key of another certificate)");
  }
  if (SSL_CTX_use_PrivateKey(&ctx, key.get()) != 1 || SSL_CTX_check_private_key(&ctx) != 1)
    return util::Status::error("--tls-key " + key_file + " cannot be used with --tls-cert " + cert_file +
                               last_openssl_error());
  return util::ok_status();
}

util::Status check_tls_files(const std::string& cert_file, const std::string& key_file) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
  if (!ctx) return util::Status::error("cannot create a TLS context" + last_openssl_error());
  return setup_tls(*ctx, cert_file, key_file);
}

}  // namespace serve
