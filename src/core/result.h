// flint::Result<T>: expected failures as values (std::expected's member names, so it can become an
// alias once nvcc allows C++23). Error carries a code and a one-line message.
#pragma once

#include <fmt/format.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace flint {

enum class ErrorCode {
  kInvalidArgument,   // bad user input: flags, request parameters, prompt
  kInvalidFile,       // a file exists but its contents are malformed
  kNotFound,          // a file, tensor, model or route does not exist
  kUnsupported,       // well-formed but not something we implement
  kOutOfMemory,       // a memory budget cannot be met
  kIo,                // the OS said no (open, read, write, mmap)
  kUnavailable,       // busy or loading; retry later
  kNetwork,           // a remote host failed
  kPermissionDenied,  // auth failures
  kCancelled,         // the client went away
  kInternal,          // a bug surfaced as a value (prefer FLINT_CHECK)
};

const char* error_code_name(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;

  // Prefixes the message with "<context>: ", keeping the code.
  template <typename... Args>
  Error with_context(fmt::format_string<Args...> f, Args&&... args) const {
    return Error{code, fmt::format(f, std::forward<Args>(args)...) + ": " + message};
  }
};

template <typename... Args>
Error make_error(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) {
  return Error{code, fmt::format(f, std::forward<Args>(args)...)};
}

// Tag for constructing a failed Result: `return unexpected(make_error(...))` or just `return err;`.
struct Unexpected {
  Error error;
};
inline Unexpected unexpected(Error e) { return Unexpected{std::move(e)}; }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}
  Result(Unexpected u) : v_(std::in_place_index<1>, std::move(u.error)) {}
  template <typename U>
  requires(std::is_constructible_v<T, U&&> && !std::is_same_v<std::decay_t<U>, T> &&
           !std::is_same_v<std::decay_t<U>, Error> && !std::is_same_v<std::decay_t<U>, Unexpected>)
      Result(U&& value)
      : v_(std::in_place_index<0>, T(std::forward<U>(value))) {}

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  T& value() & {
    check_value();
    return std::get<0>(v_);
  }
  const T& value() const& {
    check_value();
    return std::get<0>(v_);
  }
  T&& value() && {
    check_value();
    return std::get<0>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const& {
    check_error();
    return std::get<1>(v_);
  }
  Error&& error() && {
    check_error();
    return std::get<1>(std::move(v_));
  }

 private:
  void check_value() const {
    if (v_.index() != 0) {
      fmt::print(stderr, "fatal: Result::value() on an error: {}\n", std::get<1>(v_).message);
      std::abort();
    }
  }
  void check_error() const {
    if (v_.index() != 1) {
      fmt::print(stderr, "fatal: Result::error() on a value\n");
      std::abort();
    }
  }
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)) {}
  Result(Unexpected u) : error_(std::move(u.error)) {}
  bool has_value() const { return !error_.has_value(); }
  explicit operator bool() const { return has_value(); }
  void value() const {
    if (error_) {
      fmt::print(stderr, "fatal: Result::value() on an error: {}\n", error_->message);
      std::abort();
    }
  }
  const Error& error() const {
    if (!error_) {
      fmt::print(stderr, "fatal: Result::error() on a value\n");
      std::abort();
    }
    return *error_;
  }

 private:
  std::optional<Error> error_;
};

using Status = Result<void>;
inline Status ok() { return Status(); }

}  // namespace flint

// Returns the error of `expr` (a Result) from the enclosing function.
#define FLINT_TRY(expr)                             \
  do {                                              \
    auto&& flint_try_r_ = (expr);                   \
    if (!flint_try_r_) return flint_try_r_.error(); \
  } while (0)

// Declares `var` from the value of `expr`, or returns its error.
#define FLINT_ASSIGN_OR_RETURN(var, expr) \
  FLINT_ASSIGN_OR_RETURN_IMPL_(FLINT_CONCAT_(flint_r_, __COUNTER__), var, expr)
#define FLINT_ASSIGN_OR_RETURN_IMPL_(tmp, var, expr) \
  auto tmp = (expr);                                 \
  if (!tmp) return std::move(tmp).error();           \
  var = std::move(tmp).value()
#define FLINT_CONCAT_INNER_(a, b) a##b
#define FLINT_CONCAT_(a, b) FLINT_CONCAT_INNER_(a, b)
