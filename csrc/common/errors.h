// The two kinds of failure trident raises, kept apart so that a user can tell their mistake from
// ours (the split c10/util/Exception.h makes between TORCH_CHECK and TORCH_INTERNAL_ASSERT):
//   - what the caller or the environment gave that trident does not take (host IR text handed to
//     the ir_* functions, a compiler that fails, a driver that is missing): ir::ParseError,
//     ir::VerifyError, codegen::ToolchainError, std::runtime_error, each saying what was expected;
//     the bindings raise them as ValueError or RuntimeError with that message;
//   - an invariant of trident itself that broke (the lowering emitted a call the runtime cannot
//     resolve, a generated module disagrees with its IR): InternalError, raised through
//     TRD_INTERNAL_ASSERT; the bindings raise it as a RuntimeError that says it is a bug in trident
//     and how to report it.
#pragma once

#include <cstring>
#include <stdexcept>
#include <string>

namespace trident {

struct InternalError : std::logic_error {
  using std::logic_error::logic_error;
};

// Throws InternalError with `what` and where in trident's sources it was detected.
[[noreturn]] inline void internal_error(const std::string& what, const char* file, int line) {
  const char* rel = std::strstr(file, "csrc/");
  if (!rel) rel = std::strstr(file, "python/bindings/");
  throw InternalError(what + " [" + (rel ? rel : file) + ":" + std::to_string(line) + "]");
}

}  // namespace trident

// A condition that holds unless trident has a bug: otherwise an InternalError naming `what`.
#define TRD_INTERNAL_ASSERT(cond, what)                                          \
  do {                                                                           \
    if (!(cond)) ::trident::internal_error((what), __FILE__, __LINE__);          \
  } while (0)
