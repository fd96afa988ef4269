// Invariant checks: a failed FLINT_CHECK is a bug, so it logs file:line and aborts.
// Expected failures use flint::Result instead (core/result.h).
#pragma once

#include <fmt/format.h>

#include <cstdlib>

namespace flint::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond,
                               const std::string& msg);
}  // namespace flint::detail

#ifdef __CUDACC__
// nvcc 13 cannot evaluate fmt 9's consteval format-string checks: CUDA sources format at run time.
namespace flint::detail {
template <typename... Args>
std::string runtime_format(const char* f, Args&&... args) {
  return ::fmt::format(::fmt::runtime(f), std::forward<Args>(args)...);
}
}  // namespace flint::detail
#define FLINT_FORMAT_(...) ::flint::detail::runtime_format(__VA_ARGS__)
#else
#define FLINT_FORMAT_(...) ::fmt::format(__VA_ARGS__)
#endif

#define FLINT_CHECK(cond, ...)                                                              \
  do {                                                                                      \
    if (!(cond)) [[unlikely]] {                                                             \
      ::flint::detail::check_failed(__FILE__, __LINE__, #cond, FLINT_FORMAT_(__VA_ARGS__)); \
    }                                                                                       \
  } while (0)

#define FLINT_FAIL(...) \
  ::flint::detail::check_failed(__FILE__, __LINE__, nullptr, FLINT_FORMAT_(__VA_ARGS__))
