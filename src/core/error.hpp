// shardtrain/core/error.hpp
// Owns the project's error types and check macros. Errors are thrown, never
// printed where they happen: the top level (main) prints each once, with rank,
// and ends the whole job so no rank is left waiting in a collective.
//  - InputError: the user's input is wrong (config, data file). Exit code 2.
//  - Error:      anything else (I/O failure, MPI failure, a broken invariant). Exit code 1.
//  - AgreedError: a failure every rank reaches at the same point with the same
//    message (e.g. the loss scaler's abort after too many skipped steps): printed
//    once by rank 0, exit code 1, no MPI_Abort.
#pragma once

#include <stdexcept>
#include <string>

namespace shardtrain {

// A failure caused by the user's input. `what()` is the complete message, already
// in the form "FILE:LINE:COL: message" (or "FILE: message") when a location is known.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Any other failure. `what()` carries "file:line: message".
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class AgreedError : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] void throw_error(const char* file, int line, const std::string& message);
}  // namespace detail

}  // namespace shardtrain

// Checks an invariant; on failure throws shardtrain::Error naming the source location.
#define SHARDTRAIN_CHECK(cond, msg)                                                  \
  do {                                                                               \
    if (!(cond)) ::shardtrain::detail::throw_error(__FILE__, __LINE__,               \
                                                   std::string("check failed: ") +   \
                                                       #cond + ": " + (msg));        \
  } while (0)

#define SHARDTRAIN_FAIL(msg) ::shardtrain::detail::throw_error(__FILE__, __LINE__, (msg))
