// tls.h: the certificate and key of `serve --tls-cert/--tls-key` (HTTPS through
// cpp-httplib's SSLServer, which Debian's libcpp-httplib builds with OpenSSL). Each failure
// names the option, the file and what is wrong with it: missing, unreadable, not PEM, a
// key protected by a passphrase, or a key that does not belong to the certificate.
#pragma once
#include <openssl/ssl.h>

#include <string>

#include "util/status.h"

namespace serve {

// Loads the certificate chain and the private key into ctx (TLS 1.2 at least) and checks
// that they belong together.
util::Status setup_tls(SSL_CTX& ctx, const std::string& cert_file, const std::string& key_file);

// setup_tls() on a scratch context: the files' errors before the model is loaded.
util::Status check_tls_files(const std::string& cert_file, const std::string& key_file);

}  // namespace serve
