// weft's JSON reader and writer for its own files (benchmark suites, chunk schedules, machine
// profiles, tuning tables, recorded results).
//
// The reader is strict RFC 8259, because these files are written by hand as often as by weft and a
// lenient reader turns a typo into a silently different run: numbers only as the grammar gives them
// (no "+1", "01", ".5", "1-2"), escapes only \" \\ \/ \b \f \n \r \t \uXXXX with surrogate pairs
// matched, UTF-8 text, no raw control characters, no duplicate member names, nesting bounded.
// Every value remembers its byte offset; the accessors check type and range (no narrowing: to_int
// refuses what an int cannot hold), and an error is a JsonError at the value it concerns.
// read_json_text turns any error into "NAME: byte N: PATH: what", e.g.
//   bench/default.json: byte 312: rows[3].experts: 4294967304 is out of range for an int (1..1024)
// Use:
//   return read_json_text(text, path, [](const Json& doc) { ... doc["rows"].items() ... row["m"].integer(1, kMax) ... });
#pragma once

#include <climits>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace weft {

// An error at a byte of a JSON text. `path` is the member path when known ("rows[3].m"); errors
// raised by accessors leave it empty and read_json_text finds it from the offset.
class JsonError : public std::invalid_argument {
 public:
  JsonError(size_t offset, std::string path, const std::string& message);
  size_t offset() const { return offset_; }
  const std::string& path() const { return path_; }
  const std::string& message() const { return message_; }

 private:
  size_t offset_;
  std::string path_;
  std::string message_;
};

class Json {
 public:
  using Object = std::map<std::string, Json>;
  using Array = std::vector<Json>;

  Json() = default;  // null
  Json(bool b) : value_(b) {}
  Json(double d);
  Json(int64_t i) : value_(Number{static_cast<double>(i), i, true}) {}
  Json(int i) : Json(static_cast<int64_t>(i)) {}
  Json(std::string s) : value_(std::move(s)) {}
  Json(const char* s) : value_(std::string(s)) {}
  Json(Array a) : value_(std::move(a)) {}
  Json(Object o) : value_(std::move(o)) {}

  // Throws JsonError naming the byte, and the member path, of the first thing RFC 8259 refuses.
  static Json parse(std::string_view text);
  // The member path ("rows[3].m") of the value that starts at `offset` of `text` (a text parse
  // accepted); empty for the top level or an offset where no value starts.
  static std::string path_at(std::string_view text, size_t offset);
  // A number that is not finite is written as null (JSON has no NaN or infinity).
  std::string dump(int indent = 2) const;

  size_t offset() const { return offset_; }
  // Throws JsonError at this value: for a reader's own checks ("must be positive").
  [[noreturn]] void reject(const std::string& why) const;

  bool is_null() const { return std::holds_alternative<std::monostate>(value_); }
  bool is_object() const { return std::holds_alternative<Object>(value_); }
  bool has(const std::string& key) const { return is_object() && std::get<Object>(value_).count(key) > 0; }
  // Typed access; a wrong type throws JsonError naming the expected and the found type.
  const Json& operator[](const std::string& key) const;  // a missing member is an error
  const Json* find(const std::string& key) const;        // nullptr when absent (throws when not an object)
  const Array& items() const;
  const Object& members() const;
  // Text without control characters: weft's strings are names and notes that reach a terminal.
  const std::string& text() const;
  // `parse(text())`, any std::invalid_argument it throws (e.g. "unknown op") becoming a JsonError here.
  template <class Parse>
  auto text_as(Parse&& parse) const -> decltype(parse(std::string_view())) {
    const std::string& t = text();
    try {
      return parse(std::string_view(t));
    } catch (const JsonError&) {
      throw;
    } catch (const std::invalid_argument& e) {
      reject(e.what());
    }
  }
  double number() const;                     // finite (the parser refuses what a double cannot hold)
  double number(double lo, double hi) const;  // within [lo, hi], "outside the plausible range" otherwise
  bool boolean() const;
  // An integer (an integral number; 1e3 is 1000) within [lo, hi]; the message names the type.
  int64_t integer(int64_t lo = INT64_MIN, int64_t hi = INT64_MAX) const;
  int to_int(int lo = INT_MIN, int hi = INT_MAX) const;
  // Refuses a member not named in `known`: a misspelt optional member would otherwise be ignored.
  void only_members(std::initializer_list<std::string_view> known) const;

 private:
  struct Number {
    double value = 0;
    int64_t integer = 0;
    bool exact = false;  // `integer` holds the value exactly
  };
  std::variant<std::monostate, bool, Number, std::string, Array, Object> value_;
  size_t offset_ = 0;

  friend class JsonParser;
  const char* type_name() const;
  int64_t checked_integer(int64_t lo, int64_t hi, const char* type) const;
  void dump_to(std::string& out, int indent, int depth) const;
};

// Parses `text` and hands the document to `read`; any std::invalid_argument from the parser or from
// `read` comes out as std::invalid_argument "NAME: byte N: PATH: what" (without byte and path when
// the error has none). NAME is the file, or what the text is ("machine profile").
std::string locate_json_error(std::string_view text, const std::string& name, const JsonError& error);
template <class Read>
auto read_json_text(std::string_view text, const std::string& name, Read&& read) -> decltype(read(Json())) {
  try {
    return read(Json::parse(text));
  } catch (const JsonError& e) {
    throw std::invalid_argument(locate_json_error(text, name, e));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(name + ": " + e.what());
  }
}

}  // namespace weft
