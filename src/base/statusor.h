// StatusOr<T>: either a value of type T or a non-OK Status.
//
// Accessing value() of an error aborts (CHECK): test ok() first or use
// DI_ASSIGN_OR_RETURN from base/status.h.
#pragma once

#include <optional>
#include <type_traits>
#include <utility>

#include "base/check.h"
#include "base/status.h"

namespace deepinfer::base {

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  // An error. CHECKs that `status` is not OK.
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    CHECK(!status_.ok()) << "StatusOr constructed from an OK status without a value";
  }
  StatusOr(const T& value) : value_(value) {}        // NOLINT(google-explicit-constructor)
  StatusOr(T&& value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  template <typename U>
  requires(std::is_constructible_v<T, U&&> && !std::is_same_v<std::decay_t<U>, T> &&
           !std::is_same_v<std::decay_t<U>, Status> &&
           !std::is_same_v<std::decay_t<U>, StatusOr<T>>) StatusOr(U&& value)
      : value_(std::in_place, std::forward<U>(value)) {}  // NOLINT

  bool ok() const { return status_.ok(); }
  const Status& status() const& { return status_; }
  Status status() && { return std::move(status_); }

  const T& value() const& {
    CheckOk();
    return *value_;
  }
  T& value() & {
    CheckOk();
    return *value_;
  }
  T&& value() && {
    CheckOk();
    return std::move(*value_);
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  template <typename U>
  T value_or(U&& fallback) const& {
    return ok() ? *value_ : static_cast<T>(std::forward<U>(fallback));
  }

 private:
  void CheckOk() const { CHECK(ok()) << "StatusOr::value() on error: " << status_.ToString(); }

  Status status_;
  std::optional<T> value_;
};

}  // namespace deepinfer::base
