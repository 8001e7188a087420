// Fuzzes what an OMS release brings from outside: the Sigstore bundle (JSON, its DSSE envelope, its
// log entries and their checkpoints), the OMS statement, the certificates, and a trusted root. None may
// crash; what parses must read back the same after being written.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "infergate/agent/policy/certificates.h"
#include "infergate/agent/policy/sigstore_trust.h"
#include "infergate/agent/policy/transparency_log.h"
#include "infergate/agent/signing/oms_statement.h"
#include "infergate/agent/signing/sigstore_bundle.h"

using namespace infergate;
using namespace infergate::agent;

namespace {

const TransparencyLog& test_log() {
  static const TransparencyLog log = [] {
    PrivateKey k = *PrivateKey::generate(KeyType::kEcdsaP256);
    return TransparencyLog{std::string(32, '\x01'), k.public_key(), std::nullopt, std::nullopt, ""};
  }();
  return log;
}

void statement_round_trip(std::string_view text) {
  auto s = parse_oms_statement(text);
  if (!s.ok()) return;
  auto again = parse_oms_statement(serialize_oms_statement(*s));
  if (!again.ok() || again->model_name != s->model_name || again->root_digest != s->root_digest ||
      again->resources.size() != s->resources.size() ||
      again->serialization.ignore_paths != s->serialization.ignore_paths) {
    std::abort();
  }
  for (size_t i = 0; i < s->resources.size(); ++i) {
    if (again->resources[i].path != s->resources[i].path ||
        again->resources[i].start != s->resources[i].start ||
        again->resources[i].end != s->resources[i].end ||
        again->resources[i].digest != s->resources[i].digest) {
      std::abort();
    }
    (void)oms_ignored(s->resources[i].path, s->serialization.ignore_paths);
  }
}

void certificate(std::string_view der) {
  auto c = Certificate::from_der(der, "fuzz");
  if (!c.ok()) return;
  (void)c->identities();
  (void)c->oidc_issuer();
  (void)c->subject();
  (void)c->public_key();
  (void)check_signing_usage(*c, true, "fuzz");
}

void bundle(std::string_view text) {
  auto b = parse_bundle(text);
  if (!b.ok()) return;
  auto again = parse_bundle(serialize_bundle(*b));
  if (!again.ok() || again->envelope.payload != b->envelope.payload ||
      again->certificates != b->certificates || again->tlog_entries.size() != b->tlog_entries.size()) {
    std::abort();
  }
  statement_round_trip(b->envelope.payload);
  for (const auto& c : b->certificates) certificate(c);
  for (const auto& e : b->tlog_entries) {
    (void)set_payload(e);
    if (e.inclusion_proof) {
      const InclusionProof& p = *e.inclusion_proof;
      (void)root_from_inclusion_proof(rfc6962_leaf_hash(e.canonicalized_body), p.log_index, p.tree_size,
                                      p.hashes);
      (void)verify_checkpoint(p.checkpoint, test_log(), p.tree_size, p.root_hash);
    }
    (void)check_tlog_body(e, b->envelope, b->certificates.empty() ? "" : b->certificates.front());
    (void)verify_tlog_entry(e, b->envelope, "", {test_log()}, false);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  bundle(text);
  statement_round_trip(text);
  certificate(text);
  (void)Certificate::from_pem(text, "fuzz");
  (void)parse_trusted_root(text, "fuzz");
  (void)verify_checkpoint(text, test_log(), 1, std::string(32, '\0'));
  return 0;
}
