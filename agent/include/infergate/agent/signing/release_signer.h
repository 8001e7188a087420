// Signing a release: checks the tree against its SHA256SUMS (never signing what verify would refuse),
// builds the release statement and writes release.dsse.json.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

#include "infergate/agent/manifest/tree_check.h"
#include "infergate/agent/signing/keys.h"
#include "infergate/agent/signing/statement.h"
#include "infergate/common/clock.h"
#include "infergate/common/result.h"

namespace infergate::agent {

struct SignOptions {
  std::filesystem::path dir;
  std::string name;
  int64_t version = 0;
  std::optional<std::chrono::seconds> expires_in;  // --expires
  // --weight-format: used when the artifact's metadata says nothing; refused (MetadataInvalid) when
  // it contradicts what the metadata says.
  std::optional<std::string> weight_format;
  const Clock* clock = nullptr;  // SystemClock when null
  TreeOptions tree;
};

struct SignedRelease {
  ReleaseStatement statement;
  std::string envelope;  // the bytes written to release.dsse.json
  TreeSummary summary;
};

// Writes DIR/release.dsse.json (atomically, replacing an older one) after checking, in order:
// name/version/format rules (UsageError), SHA256SUMS present (ManifestMissing) and valid (parser
// reasons), not empty (EmptyRelease), the tree against it (check_tree's reasons), the weight format
// (MetadataInvalid when unknown).
Result<SignedRelease> sign_release(const SignOptions& options, const PrivateKey& key);

}  // namespace infergate::agent
