// Progress of a long command (check, simulate --check-results, bench without GPUs, tune
// --fit-simulator), on stderr so that stdout stays the table. On a terminal: one line rewritten in
// place, "weft check: 12/40 plans, 3.1 s, about 7 s left", at most a few times a second. Piped: no
// running line, one summary line at the end, "weft check: 40 plans in 9.8 s".
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace weft::cli {

class Progress {
 public:
  // `what` names the command ("weft check"), `unit` what is counted ("plans").
  Progress(std::string what, std::string unit, size_t total);
  ~Progress();  // finish() if not called
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void step(size_t count = 1);
  void finish();

 private:
  std::string what_, unit_;
  size_t total_, done_ = 0;
  bool terminal_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_shown_;
  double elapsed() const;
};

}  // namespace weft::cli
