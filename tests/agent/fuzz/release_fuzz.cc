// Fuzzes the DSSE envelope and release statement parsers with the same bytes: they must never crash,
// and what they accept must read back the same after being written.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "infergate/agent/signing/dsse.h"
#include "infergate/agent/signing/statement.h"

using namespace infergate::agent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto env = parse_envelope(text); env.ok()) {
    auto again = parse_envelope(serialize_envelope(*env));
    if (!again.ok() || again->payload != env->payload || again->payload_type != env->payload_type ||
        again->signatures.size() != env->signatures.size()) {
      std::abort();
    }
    for (size_t i = 0; i < env->signatures.size(); ++i) {
      if (again->signatures[i].sig != env->signatures[i].sig ||
          again->signatures[i].keyid != env->signatures[i].keyid) {
        std::abort();
      }
    }
    // The payload is what a verifier parses next.
    (void)parse_statement(env->payload);
  }
  if (auto s = parse_statement(text); s.ok()) {
    std::string written = serialize_statement(*s);
    auto again = parse_statement(written);
    if (!again.ok() || again->name != s->name || again->version != s->version ||
        again->weight_format != s->weight_format || again->manifest_digest != s->manifest_digest ||
        again->created_at != s->created_at || again->expires_at != s->expires_at ||
        again->file_sizes != s->file_sizes || serialize_statement(*again) != written) {
      std::abort();
    }
  }
  return 0;
}
