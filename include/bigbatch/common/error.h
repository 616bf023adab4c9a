// Typed errors and check macros used across bigbatch.
//
// Every failure a user can cause (bad config, bad data file, ranks that
// disagree) is raised as one of the few exception types below, with a message
// naming the values involved, the rank, and a hint. Thread-safe: the macros
// only read the process-wide rank set once at start-up.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace bigbatch {

// Base of all bigbatch errors; the CLI maps it to a clean message and exit 1.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A config key, CLI flag or API argument that is not allowed.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A file that is missing, unreadable, truncated or malformed.
class IoError : public Error {
 public:
  using Error::Error;
};

// A peer that did not answer within its deadline.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A peer that went away under a collective this rank had started — an
// asynchronous communication error (NCCL's, when a remote rank is gone) —
// rather than one that kept this rank waiting past its deadline.
class PeerError : public Error {
 public:
  using Error::Error;
};

// A peer that ended its communicator normally (it said so as it closed)
// while this rank still waited on it: the ranks' sends and receives, or
// their collectives, do not match. A receive nobody will send to, left at
// the end, is the user's to fail; it need not end the job.
class PeerEndedError : public PeerError {
 public:
  using PeerError::PeerError;
};

// Ranks that disagree (sizes, dtypes, checksums).
class MismatchError : public Error {
 public:
  using Error::Error;
};

// The rank printed in error messages; set once by the communicator at start-up.
void setErrorRank(int rank);
// Overrides the rank for the calling thread only (in-process groups).
void setThreadErrorRank(int rank);
int errorRank();

namespace detail {
std::string withRank(const std::string& msg);
}  // namespace detail

}  // namespace bigbatch

// BIGBATCH_CHECK(cond, ErrorType, "format {}", args...): throws ErrorType with
// "[rank R] check failed: cond: <message>" when cond is false.
#define BIGBATCH_CHECK(cond, ErrorType, ...)                                     \
  do {                                                                           \
    if (!(cond)) {                                                               \
      throw ErrorType(::bigbatch::detail::withRank(                              \
          std::string("check failed: " #cond ": ") + ::fmt::format(__VA_ARGS__))); \
    }                                                                            \
  } while (0)

// BIGBATCH_REQUIRE(cond, ErrorType, "format {}", args...): for what a user
// controls (a flag, a file, a key): throws ErrorType with "[rank R]
// <message>" when cond is false. The message must name the problem and the
// fix on its own; the C++ condition, which means nothing to a user, is left
// out (BIGBATCH_CHECK keeps it, for invariants of the code).
#define BIGBATCH_REQUIRE(cond, ErrorType, ...)                                   \
  do {                                                                           \
    if (!(cond)) {                                                               \
      throw ErrorType(::bigbatch::detail::withRank(::fmt::format(__VA_ARGS__))); \
    }                                                                            \
  } while (0)

// BIGBATCH_THROW(ErrorType, "format {}", args...): unconditional, rank-prefixed.
#define BIGBATCH_THROW(ErrorType, ...) \
  throw ErrorType(::bigbatch::detail::withRank(::fmt::format(__VA_ARGS__)))
