// The planner's one error shape for bad input: reason "InvalidPlanInput" and a "field" detail.
#pragma once

#include <string>

#include "infergate/common/result.h"

namespace infergate::runtime::planner {

inline Error input_error(const std::string& field, const std::string& message) {
  Error e(ErrorCode::kInvalidArgument, field + ": " + message, "InvalidPlanInput");
  e.with_detail("field", field);
  return e;
}

}  // namespace infergate::runtime::planner
