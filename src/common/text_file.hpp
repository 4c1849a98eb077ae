// Reading and writing weft's small files (suites, schedules, profiles, tables, results, traces)
// with the checks a command line needs: an input must be a regular file of bounded size (so that
// /dev/zero or a mistyped multi-gigabyte path is refused at once instead of filling memory), and an
// output is opened before the work that fills it and checked after the last byte.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>

namespace weft {

// 64 MiB: weft's largest files (recorded results) are tens of kilobytes; a suite of 100k rows is
// under 10 MiB.
inline constexpr size_t kMaxInputFileBytes = size_t{64} << 20;

// The whole file. Throws std::invalid_argument naming `what` and the path when it cannot be opened,
// is not a regular file, is larger than max_bytes, or a read fails.
std::string read_text_file(const std::string& path, const std::string& what, size_t max_bytes = kMaxInputFileBytes);

// Checks, before long work, that `path` can be written, without truncating an existing file or
// leaving a new one behind (for writers that open the file themselves at the end). Throws
// std::invalid_argument naming `what`, the path and the system's reason.
void require_writable(const std::string& path, const std::string& what);

// A file opened for writing, before the work: the constructor throws std::invalid_argument naming
// `what`, the path and the system's reason when it cannot be created. close() flushes and throws
// std::runtime_error when any write or the flush failed (a full disk, a closed pipe); a file never
// closed is removed by the destructor, so that an error leaves no half-written file behind.
class OutputFile {
 public:
  OutputFile(const std::string& path, const std::string& what);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  std::FILE* stream() { return file_; }
  void write(const std::string& text);
  void close();
  const std::string& path() const { return path_; }

 private:
  std::string path_, what_;
  std::FILE* file_ = nullptr;
  int error_ = 0;  // errno of the first failed write
  bool regular_ = false;  // only a regular file is removed on error (never a device like /dev/stdout)
};

}  // namespace weft
