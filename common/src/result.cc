// Error formatting and errno mapping for Result<T>.
#include "infergate/common/result.h"

#include <cerrno>
#include <cstring>

namespace infergate {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "InvalidArgument";
    case ErrorCode::kNotFound: return "NotFound";
    case ErrorCode::kAlreadyExists: return "AlreadyExists";
    case ErrorCode::kPermissionDenied: return "PermissionDenied";
    case ErrorCode::kFailedPrecondition: return "FailedPrecondition";
    case ErrorCode::kOutOfRange: return "OutOfRange";
    case ErrorCode::kResourceExhausted: return "ResourceExhausted";
    case ErrorCode::kDataLoss: return "DataLoss";
    case ErrorCode::kIo: return "Io";
    case ErrorCode::kUnavailable: return "Unavailable";
    case ErrorCode::kDeadlineExceeded: return "DeadlineExceeded";
    case ErrorCode::kConflict: return "Conflict";
    case ErrorCode::kCancelled: return "Cancelled";
    case ErrorCode::kUnimplemented: return "Unimplemented";
    case ErrorCode::kInternal: return "Internal";
  }
  return "Unknown";
}

std::string_view Error::detail(std::string_view key) const {
  for (const auto& [k, v] : details_) {
    if (k == key) return v;
  }
  return {};
}

Error& Error::context(std::string_view what) & {
  std::string m;
  m.reserve(what.size() + 2 + message_.size());
  m.append(what).append(": ").append(message_);
  message_ = std::move(m);
  return *this;
}

std::string Error::to_string() const {
  std::string out(reason_.empty() ? error_code_name(code_) : std::string_view(reason_));
  out.append(": ").append(message_);
  return out;
}

Error errno_error(std::string_view what, int err) {
  ErrorCode code = ErrorCode::kIo;
  switch (err) {
    case ENOENT:
    case ENOTDIR: code = ErrorCode::kNotFound; break;
    case EACCES:
    case EPERM:
    case EROFS: code = ErrorCode::kPermissionDenied; break;
    case EEXIST:
    case ENOTEMPTY: code = ErrorCode::kAlreadyExists; break;
    case EINVAL:
    case ELOOP:
    case ENAMETOOLONG: code = ErrorCode::kInvalidArgument; break;
    case ENOSPC:
    case EDQUOT:
    case ENOMEM:
    case EMFILE:
    case ENFILE: code = ErrorCode::kResourceExhausted; break;
    case EAGAIN:
    case EINTR: code = ErrorCode::kUnavailable; break;
    case ETIMEDOUT: code = ErrorCode::kDeadlineExceeded; break;
    default: break;
  }
  std::string m(what);
  m.append(": ").append(std::strerror(err));
  return Error(code, std::move(m));
}

}  // namespace infergate
