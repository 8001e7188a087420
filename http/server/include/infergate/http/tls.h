// Serving certificates for the HTTP server: loaded from files (a mounted kubernetes.io/tls Secret, as
// cert-manager writes it) or made self-signed at start for a server that was given none.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/http/server.h"

namespace infergate::http {

// Reads a certificate chain and its private key (PEM files, at most 1 MiB each) and checks that they
// belong together. Errors name the file (reason "BadTlsConfig" for material that does not parse).
Result<TlsOptions> load_tls_files(const std::filesystem::path& cert_chain, const std::filesystem::path& key);

// A fresh EC P-256 key and a self-signed certificate for it, valid from an hour ago for `validity`,
// naming `names` as subject alternative names (IP addresses as IP entries, the rest as DNS names; the
// first is also the common name). Clients can verify it only if they trust this very certificate
// (TlsOptions::cert_chain_pem), so scrapers of such a server usually skip verification.
Result<TlsOptions> make_self_signed_tls(const std::vector<std::string>& names,
                                        std::chrono::hours validity = std::chrono::hours(24 * 365));

}  // namespace infergate::http
