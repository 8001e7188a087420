// Signing a release: checks the tree against its SHA256SUMS (never signing what verify would refuse),
// builds the release statement and writes release.dsse.json.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

#include "infergate/agent/manifest/tree_check.h"
#include "infergate/agent/signing/keys.h"
#include "infergate/agent/signing/oms_statement.h"
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

struct OmsSignOptions {
  std::filesystem::path dir;
  std::string name;                    // the subject name; "" = DIR's last component
  std::optional<uint64_t> shard_size;  // --shard-size: the shards serialization; whole files when unset
  TreeOptions tree;
};

struct SignedOmsRelease {
  OmsStatement statement;
  std::string bundle;  // the bytes written to model.sig
  TreeSummary summary;
};

// Writes DIR/model.sig (atomically, replacing an older one): an OMS v1.0 statement over every file
// but model.sig and release.dsse.json (recorded as ignore_paths, so either format can be re-signed
// without the other), in a v0.3 Sigstore bundle whose publicKey hint is the reference tool's (SHA-256
// of the PEM public key) and whose DSSE envelope is signed with `key`. Symbolic links are refused
// (allow_symlinks false). When DIR has a SHA256SUMS and whole files are signed, each of its digests must
// be the one just computed (DigestMismatch otherwise), so the runtime's hash-while-load agrees with the
// bundle. Refuses UsageError (a bad name or shard size, a ':' in a path under shards), EmptyRelease,
// and what the walk and the hasher refuse.
Result<SignedOmsRelease> sign_oms_release(const OmsSignOptions& options, const PrivateKey& key);

}  // namespace infergate::agent
