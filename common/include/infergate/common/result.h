// Result<T> and Status: how every infergate function reports failure, without exceptions.
// An Error carries a small code, a human message (with context added as it travels up), an
// optional stable reason word for machines ("DigestMismatch") and optional key/value details.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace infergate {

enum class ErrorCode : int {
  kInvalidArgument = 1,  // bad input from a caller, a user or a file
  kNotFound,
  kAlreadyExists,
  kPermissionDenied,
  kFailedPrecondition,  // the system is not in a state where this can run
  kOutOfRange,
  kResourceExhausted,  // a cap, a budget or a queue is full
  kDataLoss,           // data is corrupt or was tampered with
  kIo,
  kUnavailable,  // transient: retrying may succeed
  kDeadlineExceeded,
  kConflict,  // optimistic-concurrency failure (HTTP 409)
  kCancelled,
  kUnimplemented,
  kInternal,  // a broken invariant of ours
};

// "InvalidArgument", "NotFound", ...
std::string_view error_code_name(ErrorCode code);

class Error {
 public:
  using Detail = std::pair<std::string, std::string>;

  Error(ErrorCode code, std::string message, std::string reason = {})
      : code_(code), message_(std::move(message)), reason_(std::move(reason)) {}

  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // A stable CamelCase word that programs may switch on; empty when none was given.
  const std::string& reason() const { return reason_; }
  const std::vector<Detail>& details() const { return details_; }
  // The value of a detail, or empty.
  std::string_view detail(std::string_view key) const;

  // Prepends "what: " to the message: context grows as the error travels up.
  Error& context(std::string_view what) &;
  Error&& context(std::string_view what) && { return std::move(context(what)); }
  Error& with_reason(std::string reason) & {
    reason_ = std::move(reason);
    return *this;
  }
  Error&& with_reason(std::string reason) && { return std::move(with_reason(std::move(reason))); }
  Error& with_detail(std::string key, std::string value) & {
    details_.emplace_back(std::move(key), std::move(value));
    return *this;
  }
  Error&& with_detail(std::string key, std::string value) && {
    return std::move(with_detail(std::move(key), std::move(value)));
  }

  // "NotFound: reading config.json: no such file" ("DigestMismatch: ..." when a reason is set).
  std::string to_string() const;

 private:
  ErrorCode code_;
  std::string message_;
  std::string reason_;
  std::vector<Detail> details_;
};

// Shorthands for the common codes.
inline Error invalid_argument(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}
inline Error not_found(std::string message) { return Error(ErrorCode::kNotFound, std::move(message)); }
inline Error failed_precondition(std::string message) {
  return Error(ErrorCode::kFailedPrecondition, std::move(message));
}
inline Error io_error(std::string message) { return Error(ErrorCode::kIo, std::move(message)); }
inline Error data_loss(std::string message) { return Error(ErrorCode::kDataLoss, std::move(message)); }
inline Error internal_error(std::string message) { return Error(ErrorCode::kInternal, std::move(message)); }
inline Error unavailable(std::string message) { return Error(ErrorCode::kUnavailable, std::move(message)); }
inline Error resource_exhausted(std::string message) {
  return Error(ErrorCode::kResourceExhausted, std::move(message));
}
inline Error out_of_range(std::string message) { return Error(ErrorCode::kOutOfRange, std::move(message)); }
inline Error unimplemented(std::string message) {
  return Error(ErrorCode::kUnimplemented, std::move(message));
}
// An Error from errno, e.g. errno_error("open model.safetensors", ENOENT): the code follows errno.
Error errno_error(std::string_view what, int err);

template <class T>
class [[nodiscard]] Result {
  static_assert(!std::is_same_v<std::decay_t<T>, Error>, "Result<Error> is ambiguous");
  static_assert(!std::is_reference_v<T>, "Result<T&> is not supported; use a pointer");

 public:
  using value_type = T;

  Result(const T& value) : v_(std::in_place_index<0>, value) {}          // NOLINT: implicit by design
  Result(T&& value) : v_(std::in_place_index<0>, std::move(value)) {}    // NOLINT
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT
  template <class U>
  requires(std::is_constructible_v<T, U&&> && !std::is_same_v<std::decay_t<U>, T> &&
           !std::is_same_v<std::decay_t<U>, Error> && !std::is_same_v<std::decay_t<U>, Result<T>>)
      Result(U&& value)
      : v_(std::in_place_index<0>, std::forward<U>(value)) {}  // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  template <class U>
  T value_or(U&& fallback) const& {
    return ok() ? value() : static_cast<T>(std::forward<U>(fallback));
  }

  const Error& error() const& {
    assert(!ok());
    return std::get<1>(v_);
  }
  Error&& error() && {
    assert(!ok());
    return std::get<1>(std::move(v_));
  }

  // Adds context to the error, if any; a value passes through unchanged.
  Result&& context(std::string_view what) && {
    if (!ok()) std::get<1>(v_).context(what);
    return std::move(*this);
  }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  using value_type = void;

  Result() = default;
  Result(Error error) : error_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  void value() const { assert(ok()); }

  const Error& error() const& {
    assert(!ok());
    return *error_;
  }
  Error&& error() && {
    assert(!ok());
    return std::move(*error_);
  }
  Result&& context(std::string_view what) && {
    if (error_) error_->context(what);
    return std::move(*this);
  }

 private:
  std::optional<Error> error_;
};

using Status = Result<void>;

inline Status ok_status() { return {}; }

}  // namespace infergate

#define INFERGATE_CONCAT_INNER_(a, b) a##b
#define INFERGATE_CONCAT_(a, b) INFERGATE_CONCAT_INNER_(a, b)

// Returns the error of a Result/Status expression from the enclosing function. The result is held by
// value: `f().context("...")` returns a reference into f()'s temporary, which a reference would outlive.
#define INFERGATE_RETURN_IF_ERROR(expr)                                       \
  do {                                                                        \
    auto infergate_status_ = (expr);                                          \
    if (!infergate_status_.ok()) return std::move(infergate_status_).error(); \
  } while (0)

// INFERGATE_ASSIGN_OR_RETURN(auto x, f()): binds the value or returns the error.
#define INFERGATE_ASSIGN_OR_RETURN(lhs, expr) \
  INFERGATE_ASSIGN_OR_RETURN_IMPL_(INFERGATE_CONCAT_(infergate_result_, __LINE__), lhs, expr)
#define INFERGATE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                     \
  if (!tmp.ok()) return std::move(tmp).error();          \
  lhs = std::move(tmp).value()
