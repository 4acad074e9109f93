// Status: the result of an operation that can fail in an expected way.
//
// Modelled on absl::Status / leveldb::Status (interface only; our own code). A Status is
// either OK (no allocation) or carries a code and a human-readable message. Functions that
// can fail return Status or StatusOr<T>; broken invariants use CHECK (base/check.h) instead.
#pragma once

#include <memory>
#include <ostream>
#include <string>
#include <string_view>

namespace deepinfer::base {

enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// "INVALID_ARGUMENT", "NOT_FOUND", ...
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string_view message);

  static Status Ok() { return Status(); }

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  // Empty for OK.
  const std::string& message() const;
  // "OK" or "<CODE>: <message>".
  std::string ToString() const;

  // Returns a copy whose message is "<prefix>: <old message>" (OK stays OK).
  Status WithContext(std::string_view prefix) const;

  // Marks a deliberately ignored status.
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code() == b.code() && a.message() == b.message();
  }

 private:
  struct Rep {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;  // null == OK; immutable, so sharing is safe
};

std::ostream& operator<<(std::ostream& os, const Status& status);

// Constructors for each error code.
Status CancelledError(std::string_view message);
Status UnknownError(std::string_view message);
Status InvalidArgumentError(std::string_view message);
Status DeadlineExceededError(std::string_view message);
Status NotFoundError(std::string_view message);
Status AlreadyExistsError(std::string_view message);
Status PermissionDeniedError(std::string_view message);
Status ResourceExhaustedError(std::string_view message);
Status FailedPreconditionError(std::string_view message);
Status AbortedError(std::string_view message);
Status OutOfRangeError(std::string_view message);
Status UnimplementedError(std::string_view message);
Status InternalError(std::string_view message);
Status UnavailableError(std::string_view message);
Status DataLossError(std::string_view message);
Status UnauthenticatedError(std::string_view message);

}  // namespace deepinfer::base

#define DI_STATUS_CONCAT_INNER_(a, b) a##b
#define DI_STATUS_CONCAT_(a, b) DI_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define DI_RETURN_IF_ERROR(expr)                       \
  do {                                                 \
    ::deepinfer::base::Status di_status_tmp_ = (expr); \
    if (!di_status_tmp_.ok()) return di_status_tmp_;   \
  } while (0)

// DI_ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (a StatusOr<T>); on error returns its
// status, otherwise assigns/declares `lhs` from the value, e.g.
//   DI_ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
#define DI_ASSIGN_OR_RETURN(lhs, expr) \
  DI_ASSIGN_OR_RETURN_IMPL_(DI_STATUS_CONCAT_(di_statusor_, __LINE__), lhs, expr)
#define DI_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
