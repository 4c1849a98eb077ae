// A small JSON reader and writer for weft's own files (benchmark suites, results, machine profiles).
// Reads the whole grammar (objects, arrays, strings with escapes, numbers, true/false/null); errors
// throw std::invalid_argument with the byte offset.
//   Json suite = Json::parse(text); for (const Json& row : suite["rows"].items()) row["m"].integer();
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace weft {

class Json {
 public:
  using Object = std::map<std::string, Json>;
  using Array = std::vector<Json>;

  Json() = default;  // null
  Json(bool b) : value_(b) {}
  Json(double d) : value_(d) {}
  Json(int64_t i) : value_(static_cast<double>(i)) {}
  Json(int i) : value_(static_cast<double>(i)) {}
  Json(std::string s) : value_(std::move(s)) {}
  Json(const char* s) : value_(std::string(s)) {}
  Json(Array a) : value_(std::move(a)) {}
  Json(Object o) : value_(std::move(o)) {}

  static Json parse(std::string_view text);
  std::string dump(int indent = 2) const;

  bool is_null() const { return std::holds_alternative<std::monostate>(value_); }
  bool is_object() const { return std::holds_alternative<Object>(value_); }
  bool has(const std::string& key) const { return is_object() && std::get<Object>(value_).count(key) > 0; }
  // Typed access; throws std::invalid_argument naming the expected type.
  const Json& operator[](const std::string& key) const;
  const Array& items() const;
  const Object& members() const;
  const std::string& text() const;
  double number() const;
  int64_t integer() const;
  bool boolean() const;

 private:
  std::variant<std::monostate, bool, double, std::string, Array, Object> value_;
  void dump_to(std::string& out, int indent, int depth) const;
};

}  // namespace weft
