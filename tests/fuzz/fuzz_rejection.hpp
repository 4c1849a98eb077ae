// How a fuzz target treats an input its code refuses with a reason (std::invalid_argument): under
// libFuzzer that is a correct answer to a random input; when replay_main replays a seed from a
// corpus's valid/ folder it is a failure, because those seeds are inputs weft must accept (a reader
// that starts refusing valid files would otherwise pass as a "rejection").
#pragma once

#include <stdexcept>
#include <string>

namespace weft::fuzz {

inline bool must_accept = false;  // set by replay_main for the seeds under valid/

// The error replay_main reports for a refused valid seed; not an invalid_argument, so that no
// target's handler swallows it.
struct ValidInputRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Call from the handler that swallows a rejection.
inline void rejected(const std::exception& e) {
  if (must_accept) throw ValidInputRefused(e.what());
}

}  // namespace weft::fuzz
