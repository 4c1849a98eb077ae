#include "common/text_file.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

namespace weft {

std::string read_text_file(const std::string& path, const std::string& what, size_t max_bytes) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (error) throw std::invalid_argument("cannot read " + what + " '" + path + "': " + error.message());
  if (!std::filesystem::is_regular_file(status))
    throw std::invalid_argument(what + " '" + path + "' is not a regular file (weft reads " + what + "s from regular files only)");
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) throw std::invalid_argument("cannot read " + what + " '" + path + "': " + std::strerror(errno));
  // Read one byte past the bound: a file that grew after the check above is refused all the same.
  std::string text(max_bytes + 1, '\0');
  const size_t got = std::fread(text.data(), 1, text.size(), file);
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) throw std::invalid_argument("cannot read " + what + " '" + path + "': a read failed");
  if (got > max_bytes)
    throw std::invalid_argument(what + " '" + path + "' is larger than the " + std::to_string(max_bytes >> 20) +
                                " MiB weft reads (weft's own files are far smaller; is it the right file?)");
  text.resize(got);
  return text;
}

void require_writable(const std::string& path, const std::string& what) {
  std::error_code error;
  const bool existed = std::filesystem::exists(path, error);
  std::FILE* file = std::fopen(path.c_str(), "a");  // "a": creates if absent, never truncates
  if (!file) throw std::invalid_argument("cannot write " + what + " '" + path + "': " + std::strerror(errno));
  std::fclose(file);
  if (!existed) std::filesystem::remove(path, error);
}

OutputFile::OutputFile(const std::string& path, const std::string& what) : path_(path), what_(what) {
  file_ = std::fopen(path.c_str(), "w");
  if (!file_) throw std::invalid_argument("cannot write " + what + " '" + path + "': " + std::strerror(errno));
  std::error_code error;
  regular_ = std::filesystem::is_regular_file(path, error);
}

OutputFile::~OutputFile() {
  if (!file_) return;
  std::fclose(file_);
  std::error_code error;
  if (regular_) std::filesystem::remove(path_, error);
}

void OutputFile::write(const std::string& text) {
  if (!file_) throw std::logic_error("OutputFile::write after close (" + path_ + ")");
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() && error_ == 0) error_ = errno ? errno : EIO;
}

void OutputFile::close() {
  if (!file_) return;
  // Writes through stream() (fprintf) leave their failure in ferror; fflush and fclose report the rest.
  if (std::ferror(file_) && error_ == 0) error_ = EIO;
  if (std::fflush(file_) != 0 && error_ == 0) error_ = errno;
  if (std::fclose(file_) != 0 && error_ == 0) error_ = errno;
  file_ = nullptr;
  if (error_ != 0) {
    std::error_code error;
    if (regular_) std::filesystem::remove(path_, error);
    throw std::runtime_error("writing " + what_ + " '" + path_ + "' failed: " + std::strerror(error_) + (regular_ ? " (the file is removed)" : ""));
  }
}

}  // namespace weft
