// The release policy checks, in the order they are documented.
#include "infergate/agent/policy/release_policy.h"

#include "infergate/agent/reasons.h"

namespace infergate::agent {

Status check_release_policy(const ReleaseStatement& s, const ReleasePolicy& policy, WallTime now) {
  if (policy.expect_name && s.name != *policy.expect_name) {
    return refusal(Reason::kNameMismatch,
                   "the release is for model \"" + s.name + "\", not \"" + *policy.expect_name + "\"")
        .with_detail("expected", *policy.expect_name)
        .with_detail("actual", s.name);
  }
  if (policy.min_version && s.version < *policy.min_version) {
    return refusal(Reason::kVersionTooLow, "release version " + std::to_string(s.version) +
                                               " is below the minimum " +
                                               std::to_string(*policy.min_version) +
                                               " (a rollback is re-signed under a higher version)")
        .with_detail("expected", ">=" + std::to_string(*policy.min_version))
        .with_detail("actual", std::to_string(s.version));
  }
  if (s.expires_at && now >= *s.expires_at) {
    return refusal(Reason::kReleaseExpired, "the release statement expired at " +
                                                format_rfc3339(*s.expires_at) + " (now " +
                                                format_rfc3339(now) + ")")
        .with_detail("expected", "before " + format_rfc3339(*s.expires_at))
        .with_detail("actual", format_rfc3339(now));
  }
  if (policy.expect_weight_format && s.weight_format != *policy.expect_weight_format) {
    return refusal(Reason::kWeightFormatMismatch,
                   "the release holds " + s.weight_format + " weights, not " + *policy.expect_weight_format)
        .with_detail("expected", *policy.expect_weight_format)
        .with_detail("actual", s.weight_format);
  }
  return ok_status();
}

}  // namespace infergate::agent
