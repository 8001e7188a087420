// The status every kernels/ function returns: a code and a message, no exceptions. kernels/ depends on
// nothing of ours, so this is a small local type; callers convert it at their boundary.
#pragma once

#include <string>
#include <utility>

namespace infergate::kernels {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,  // a shape, stride, pointer or parameter the op cannot accept
  kOutOfRange,       // an index (token id, page id, slot) outside its table
  kUnsupported,      // valid, but this implementation (ISA, device, shape) does not run it
  kCudaError,        // the CUDA runtime reported an error (message holds cudaGetErrorString)
  kNoDevice,         // no usable CUDA device
};

// "Ok", "InvalidArgument", ...
const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: linear: x has 7 columns, the weight 8"
  std::string to_string() const;

  // Prepends "what: " to the message of a failure (no-op on success).
  Status&& context(const std::string& what) && {
    if (!ok()) message_ = what + ": " + message_;
    return std::move(*this);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return {}; }
inline Status invalid_argument(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}
inline Status out_of_range(std::string message) {
  return Status(StatusCode::kOutOfRange, std::move(message));
}
inline Status unsupported(std::string message) {
  return Status(StatusCode::kUnsupported, std::move(message));
}

}  // namespace infergate::kernels

// Returns from the enclosing function when `expr` (a Status) is a failure.
#define INFERGATE_K_RETURN_IF_ERROR(expr)                 \
  do {                                                    \
    ::infergate::kernels::Status infergate_k_s_ = (expr); \
    if (!infergate_k_s_.ok()) return infergate_k_s_;      \
  } while (0)
