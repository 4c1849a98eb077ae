#include "progress.hpp"

#include <cstdio>
#include <unistd.h>

namespace weft::cli {

Progress::Progress(std::string what, std::string unit, size_t total)
    : what_(std::move(what)), unit_(std::move(unit)), total_(total), terminal_(isatty(fileno(stderr)) != 0),
      start_(std::chrono::steady_clock::now()), last_shown_(start_) {}

Progress::~Progress() { finish(); }

double Progress::elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

void Progress::step(size_t count) {
  done_ += count;
  if (!terminal_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_shown_ < std::chrono::milliseconds(250) && done_ < total_) return;
  last_shown_ = now;
  const double seconds = elapsed();
  // The estimate assumes the rest goes at the pace so far: rough, but it tells minutes from hours.
  const double left = done_ > 0 && total_ > done_ ? seconds / static_cast<double>(done_) * static_cast<double>(total_ - done_) : 0;
  std::fprintf(stderr, "\r%s: %zu/%zu %s, %.1f s, about %.0f s left\033[K", what_.c_str(), done_, total_, unit_.c_str(), seconds, left);
  std::fflush(stderr);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (terminal_) std::fprintf(stderr, "\r\033[K");
  std::fprintf(stderr, "%s: %zu/%zu %s in %.1f s\n", what_.c_str(), done_, total_, unit_.c_str(), elapsed());
}

}  // namespace weft::cli
