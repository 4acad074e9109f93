#include "base/status.h"

namespace deepinfer::base {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kCancelled:
      return "CANCELLED";
    case StatusCode::kUnknown:
      return "UNKNOWN";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kAlreadyExists:
      return "ALREADY_EXISTS";
    case StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case StatusCode::kAborted:
      return "ABORTED";
    case StatusCode::kOutOfRange:
      return "OUT_OF_RANGE";
    case StatusCode::kUnimplemented:
      return "UNIMPLEMENTED";
    case StatusCode::kInternal:
      return "INTERNAL";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kDataLoss:
      return "DATA_LOSS";
    case StatusCode::kUnauthenticated:
      return "UNAUTHENTICATED";
  }
  return "UNKNOWN_CODE";
}

Status::Status(StatusCode code, std::string_view message) {
  if (code != StatusCode::kOk) {
    rep_ = std::make_shared<const Rep>(Rep{code, std::string(message)});
  }
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return rep_ ? rep_->message : kEmpty;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(StatusCodeName(code()));
  out += ": ";
  out += message();
  return out;
}

Status Status::WithContext(std::string_view prefix) const {
  if (ok()) return *this;
  std::string msg(prefix);
  msg += ": ";
  msg += message();
  return Status(code(), msg);
}

std::ostream& operator<<(std::ostream& os, const Status& status) { return os << status.ToString(); }

#define DI_DEFINE_ERROR_CTOR(Name, Code) \
  Status Name(std::string_view message) { return Status(StatusCode::Code, message); }
DI_DEFINE_ERROR_CTOR(CancelledError, kCancelled)
DI_DEFINE_ERROR_CTOR(UnknownError, kUnknown)
DI_DEFINE_ERROR_CTOR(InvalidArgumentError, kInvalidArgument)
DI_DEFINE_ERROR_CTOR(DeadlineExceededError, kDeadlineExceeded)
DI_DEFINE_ERROR_CTOR(NotFoundError, kNotFound)
DI_DEFINE_ERROR_CTOR(AlreadyExistsError, kAlreadyExists)
DI_DEFINE_ERROR_CTOR(PermissionDeniedError, kPermissionDenied)
DI_DEFINE_ERROR_CTOR(ResourceExhaustedError, kResourceExhausted)
DI_DEFINE_ERROR_CTOR(FailedPreconditionError, kFailedPrecondition)
DI_DEFINE_ERROR_CTOR(AbortedError, kAborted)
DI_DEFINE_ERROR_CTOR(OutOfRangeError, kOutOfRange)
DI_DEFINE_ERROR_CTOR(UnimplementedError, kUnimplemented)
DI_DEFINE_ERROR_CTOR(InternalError, kInternal)
DI_DEFINE_ERROR_CTOR(UnavailableError, kUnavailable)
DI_DEFINE_ERROR_CTOR(DataLossError, kDataLoss)
DI_DEFINE_ERROR_CTOR(UnauthenticatedError, kUnauthenticated)
#undef DI_DEFINE_ERROR_CTOR

}  // namespace deepinfer::base
