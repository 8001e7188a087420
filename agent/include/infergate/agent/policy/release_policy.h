// What a verified statement must also say before its files are trusted: the model name, a version
// no lower than the minimum (rollback), not expired (freeze), and the weight format the stage asks for.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "infergate/agent/signing/statement.h"
#include "infergate/common/clock.h"
#include "infergate/common/result.h"

namespace infergate::agent {

struct ReleasePolicy {
  std::optional<std::string> expect_name;           // --expect-name
  std::optional<int64_t> min_version;               // --min-version
  std::optional<std::string> expect_weight_format;  // --expect-weight-format
};

// Refuses: NameMismatch, VersionTooLow, ReleaseExpired (now >= expiresAt), WeightFormatMismatch;
// each with the expected and actual values as details. Unset policy fields are not checked.
Status check_release_policy(const ReleaseStatement& statement, const ReleasePolicy& policy, WallTime now);

}  // namespace infergate::agent
