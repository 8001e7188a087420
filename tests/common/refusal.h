// Checking a refusal in tests: not only that a call failed, but why — the stable reason word programs
// switch on, and the words (a field path, a file, a number) that tell a person what was wrong.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>

namespace infergate::testing {

// Success when `r` failed with reason word `reason` ("" accepts any) and its message contains every
// string in `mentions`; otherwise a failure that prints what the call really answered. `r` is a
// Result or Status (error().reason(), error().message()) or a kernels Status (message(), no reason).
template <class R>
::testing::AssertionResult refused(const R& r, std::string_view reason,
                                   std::initializer_list<std::string_view> mentions = {}) {
  if (r.ok()) return ::testing::AssertionFailure() << "succeeded; expected a refusal";
  std::string why, message, shown;
  if constexpr (requires { r.error().reason(); }) {
    why = r.error().reason();
    message = r.error().message();
    shown = r.error().to_string();
  } else {
    message = std::string(r.message());
    shown = message;
  }
  if (!reason.empty() && why != reason)
    return ::testing::AssertionFailure() << "reason \"" << why << "\", expected " << reason << ": " << shown;
  for (std::string_view m : mentions) {
    if (message.find(m) == std::string::npos)
      return ::testing::AssertionFailure() << "the message does not mention \"" << m << "\": " << shown;
  }
  return ::testing::AssertionSuccess() << shown;
}

}  // namespace infergate::testing
