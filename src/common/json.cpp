#include "common/json.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace weft {

namespace {

// A byte for a message: printable ASCII as itself, anything else as its code, so that a file's
// control characters never reach the terminal.
std::string show_byte(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return std::string("'") + c + "'";
  char buf[16];
  std::snprintf(buf, sizeof buf, "byte 0x%02x", u);
  return buf;
}

// The shortest of %.6g, %.15g and %.17g that reads back as `d` (1e+11, 1e-300, 0.95).
std::string show_number(double d) {
  char buf[32];
  for (const char* format : {"%.6g", "%.15g", "%.17g"}) {
    std::snprintf(buf, sizeof buf, format, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  return buf;
}

void append_utf8(std::string& out, uint32_t code) {
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else if (code < 0x800) {
    out += static_cast<char>(0xc0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3f));
  } else if (code < 0x10000) {
    out += static_cast<char>(0xe0 | (code >> 12));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (code & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (code >> 18));
    out += static_cast<char>(0x80 | ((code >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (code & 0x3f));
  }
}

}  // namespace

JsonError::JsonError(size_t offset, std::string path, const std::string& message)
    : std::invalid_argument("byte " + std::to_string(offset) + ": " + (path.empty() ? "" : path + ": ") + message),
      offset_(offset),
      path_(std::move(path)),
      message_(message) {}

// Recursive descent over RFC 8259. It keeps the member path of where it is, for its own errors and
// for path_at (which parses again and notes the path of the value at an offset).
class JsonParser {
 public:
  explicit JsonParser(std::string_view text, size_t target = SIZE_MAX) : text_(text), target_(target) {}

  Json document() {
    Json value = parse_value();
    skip_space();
    if (at_ < text_.size()) fail("unexpected " + show_byte(text_[at_]) + " after the document's value");
    return value;
  }

  std::string found_path;  // path_at's answer

 private:
  std::string_view text_;
  size_t at_ = 0;
  size_t target_;
  std::vector<std::string> path_;  // ".name" or "[3]" per level
  // Nesting is bounded: each level is a stack frame here and in Json's destructor, and weft's files
  // nest a few levels.
  static constexpr int kMaxDepth = 128;
  int depth_ = 0;
  struct Nested {
    JsonParser& parser;
    explicit Nested(JsonParser& p) : parser(p) {
      if (++parser.depth_ > kMaxDepth) parser.fail("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    ~Nested() { --parser.depth_; }
  };

  std::string path() const {
    std::string out;
    for (const std::string& p : path_) out += p;
    return out.starts_with('.') ? out.substr(1) : out;
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(at_, what); }
  [[noreturn]] void fail_at(size_t at, const std::string& what) const { throw JsonError(at, path(), what); }

  void skip_space() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\n' || text_[at_] == '\t' || text_[at_] == '\r')) ++at_;
  }
  char peek() {
    skip_space();
    if (at_ >= text_.size()) fail("unexpected end of the text");
    return text_[at_];
  }
  void expect(char c, const char* what) {
    const char found = peek();
    if (found != c) fail(std::string("expected ") + what + ", found " + show_byte(found));
    ++at_;
  }
  bool literal(std::string_view word) {
    if (text_.substr(at_, word.size()) != word) return false;
    at_ += word.size();
    return true;
  }

  Json parse_value() {
    const char c = peek();
    const size_t start = at_;
    if (start == target_) found_path = path();
    Json value;
    if (c == '{') value = parse_object();
    else if (c == '[') value = parse_array();
    else if (c == '"') value = Json(parse_string());
    else if (literal("true")) value = Json(true);
    else if (literal("false")) value = Json(false);
    else if (literal("null")) value = Json();
    else if (c == '-' || (c >= '0' && c <= '9')) value = parse_number();
    else fail("expected a value, found " + show_byte(c));
    value.offset_ = start;
    return value;
  }

  Json parse_object() {
    const Nested level(*this);
    expect('{', "'{'");
    Json::Object object;
    if (peek() == '}') {
      ++at_;
      return Json(std::move(object));
    }
    for (;;) {
      if (peek() != '"') fail("expected a member name in double quotes, found " + show_byte(text_[at_]));
      const size_t key_at = at_;
      std::string key = parse_string();
      if (object.count(key)) fail_at(key_at, "member '" + key + "' is given twice");
      expect(':', "':' after a member name");
      path_.push_back("." + key);
      Json value = parse_value();
      path_.pop_back();
      object.emplace(std::move(key), std::move(value));
      if (peek() == ',') {
        ++at_;
        continue;
      }
      expect('}', "',' or '}' after a member");
      return Json(std::move(object));
    }
  }

  Json parse_array() {
    const Nested level(*this);
    expect('[', "'['");
    Json::Array array;
    if (peek() == ']') {
      ++at_;
      return Json(std::move(array));
    }
    for (;;) {
      path_.push_back("[" + std::to_string(array.size()) + "]");
      array.push_back(parse_value());
      path_.pop_back();
      if (peek() == ',') {
        ++at_;
        continue;
      }
      expect(']', "',' or ']' after an element");
      return Json(std::move(array));
    }
  }

  uint32_t hex4() {
    if (at_ + 4 > text_.size()) fail("\\u needs four hex digits");
    uint32_t code = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = text_[at_ + static_cast<size_t>(i)];
      code <<= 4;
      if (h >= '0' && h <= '9') code |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f') code |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') code |= static_cast<uint32_t>(h - 'A' + 10);
      else fail("\\u needs four hex digits, found " + show_byte(h));
    }
    at_ += 4;
    return code;
  }

  // One UTF-8 sequence starting at at_ (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF).
  void copy_utf8(std::string& out) {
    const auto b0 = static_cast<unsigned char>(text_[at_]);
    int length = 0;
    uint32_t code = 0, least = 0;
    if (b0 >= 0xc2 && b0 <= 0xdf) length = 2, code = b0 & 0x1fu, least = 0x80;
    else if (b0 >= 0xe0 && b0 <= 0xef) length = 3, code = b0 & 0x0fu, least = 0x800;
    else if (b0 >= 0xf0 && b0 <= 0xf4) length = 4, code = b0 & 0x07u, least = 0x10000;
    else fail("text is not UTF-8 (" + show_byte(static_cast<char>(b0)) + ")");
    if (at_ + static_cast<size_t>(length) > text_.size()) fail("text is not UTF-8 (a sequence is cut short)");
    for (int i = 1; i < length; ++i) {
      const auto b = static_cast<unsigned char>(text_[at_ + static_cast<size_t>(i)]);
      if ((b & 0xc0) != 0x80) fail("text is not UTF-8 (" + show_byte(static_cast<char>(b)) + " where a continuation byte belongs)");
      code = (code << 6) | (b & 0x3fu);
    }
    if (code < least || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) fail("text is not UTF-8 (an overlong form or an invalid code point)");
    out.append(text_.substr(at_, static_cast<size_t>(length)));
    at_ += static_cast<size_t>(length);
  }

  std::string parse_string() {
    expect('"', "'\"'");
    std::string out;
    for (;;) {
      if (at_ >= text_.size()) fail("unfinished string");
      const char c = text_[at_];
      if (c == '"') {
        ++at_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("raw control character (" + show_byte(c) + ") in a string; write it as an escape");
      if (static_cast<unsigned char>(c) >= 0x80) {
        copy_utf8(out);
        continue;
      }
      ++at_;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= text_.size()) fail("unfinished escape");
      const char e = text_[at_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          const size_t escape_at = at_ - 2;
          uint32_t code = hex4();
          if (code >= 0xdc00 && code <= 0xdfff) fail_at(escape_at, "a low surrogate \\u escape without a high one before it");
          if (code >= 0xd800 && code <= 0xdbff) {
            if (!literal("\\u")) fail_at(escape_at, "a high surrogate \\u escape without a low one after it");
            const uint32_t low = hex4();
            if (low < 0xdc00 || low > 0xdfff) fail_at(escape_at, "a high surrogate \\u escape without a low one after it");
            code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
          }
          append_utf8(out, code);
          break;
        }
        default: fail_at(at_ - 2, "unknown escape \\" + (static_cast<unsigned char>(e) >= 0x20 && static_cast<unsigned char>(e) < 0x7f ? std::string(1, e) : show_byte(e)) +
                                      " (JSON has \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
      }
    }
  }

  // RFC 8259: -? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?
  Json parse_number() {
    const size_t start = at_;
    auto digits = [&] {
      const size_t from = at_;
      while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') ++at_;
      return at_ - from;
    };
    auto bad = [&](const char* why) { fail_at(start, std::string("malformed number: ") + why); };
    if (text_[at_] == '-') ++at_;
    if (at_ < text_.size() && text_[at_] == '0') {
      ++at_;
      if (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') bad("a leading zero");
    } else if (digits() == 0) {
      bad("no digits");
    }
    bool integral = true;
    if (at_ < text_.size() && text_[at_] == '.') {
      ++at_;
      integral = false;
      if (digits() == 0) bad("no digits after the decimal point");
    }
    if (at_ < text_.size() && (text_[at_] == 'e' || text_[at_] == 'E')) {
      ++at_;
      integral = false;
      if (at_ < text_.size() && (text_[at_] == '+' || text_[at_] == '-')) ++at_;
      if (digits() == 0) bad("no digits in the exponent");
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + at_;
    Json::Number n;
    if (integral) {
      int64_t i = 0;
      const auto [end, error] = std::from_chars(first, last, i);
      if (error == std::errc() && end == last) n = {static_cast<double>(i), i, true};
    }
    if (!n.exact) {
      const auto [end, error] = std::from_chars(first, last, n.value);
      if (error != std::errc() || end != last || !std::isfinite(n.value))
        fail_at(start, std::string(first, last) + " cannot be held by a double (too large or too small)");
    }
    Json value;
    value.value_ = n;
    return value;
  }
};

Json::Json(double d) {
  Number n{d, 0, false};
  // An integral double that an int64 holds is an integer as exactly as Json(int64_t) makes one.
  if (std::isfinite(d) && std::floor(d) == d && d >= -9223372036854775808.0 && d < 9223372036854775808.0) n = {d, static_cast<int64_t>(d), true};
  value_ = n;
}

Json Json::parse(std::string_view text) { return JsonParser(text).document(); }

std::string Json::path_at(std::string_view text, size_t offset) {
  JsonParser parser(text, offset);
  try {
    parser.document();
  } catch (const JsonError&) {
  }
  return parser.found_path;
}

std::string locate_json_error(std::string_view text, const std::string& name, const JsonError& error) {
  const std::string path = error.path().empty() ? Json::path_at(text, error.offset()) : error.path();
  return name + ": byte " + std::to_string(error.offset()) + ": " + (path.empty() ? "" : path + ": ") + error.message();
}

void Json::reject(const std::string& why) const { throw JsonError(offset_, "", why); }

const char* Json::type_name() const {
  switch (value_.index()) {
    case 0: return "null";
    case 1: return "true or false";
    case 2: return "a number";
    case 3: return "a string";
    case 4: return "an array";
    default: return "an object";
  }
}

const Json& Json::operator[](const std::string& key) const {
  const Json* found = find(key);
  if (!found) reject("missing member '" + key + "'");
  return *found;
}

const Json* Json::find(const std::string& key) const {
  const auto& object = members();
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &it->second;
}

const Json::Array& Json::items() const {
  if (auto* a = std::get_if<Array>(&value_)) return *a;
  reject(std::string("expected an array, found ") + type_name());
}

const Json::Object& Json::members() const {
  if (auto* o = std::get_if<Object>(&value_)) return *o;
  reject(std::string("expected an object, found ") + type_name());
}

const std::string& Json::text() const {
  const auto* s = std::get_if<std::string>(&value_);
  if (!s) reject(std::string("expected a string, found ") + type_name());
  for (char c : *s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      reject("control character " + show_byte(c) + " in a string (weft's names and notes are plain text)");
  return *s;
}

double Json::number() const {
  if (auto* n = std::get_if<Number>(&value_)) return n->value;
  reject(std::string("expected a number, found ") + type_name());
}

double Json::number(double lo, double hi) const {
  const double d = number();
  if (!(d >= lo && d <= hi)) reject(show_number(d) + " is outside the plausible range " + show_number(lo) + " .. " + show_number(hi));
  return d;
}

int64_t Json::checked_integer(int64_t lo, int64_t hi, const char* type) const {
  const auto* n = std::get_if<Number>(&value_);
  if (!n) reject(std::string("expected an integer, found ") + type_name());
  const std::string range = " (" + std::to_string(lo) + ".." + std::to_string(hi) + ")";
  if (std::floor(n->value) != n->value) reject("expected an integer, found " + show_number(n->value));
  // 1e3 is 1000; an integral double beyond int64 (1e300) has no integer value.
  const bool fits = n->exact || (n->value >= -9223372036854775808.0 && n->value < 9223372036854775808.0);
  const int64_t value = n->exact ? n->integer : fits ? static_cast<int64_t>(n->value) : 0;
  if (!fits || value < lo || value > hi) reject((n->exact ? std::to_string(value) : show_number(n->value)) + " is out of range for " + type + range);
  return value;
}

int64_t Json::integer(int64_t lo, int64_t hi) const { return checked_integer(lo, hi, "a 64-bit integer"); }

int Json::to_int(int lo, int hi) const { return static_cast<int>(checked_integer(lo, hi, "an int")); }

bool Json::boolean() const {
  if (auto* b = std::get_if<bool>(&value_)) return *b;
  reject(std::string("expected true or false, found ") + type_name());
}

void Json::only_members(std::initializer_list<std::string_view> known) const {
  for (const auto& [key, value] : members()) {
    bool listed = false;
    for (std::string_view k : known) listed = listed || k == key;
    if (listed) continue;
    std::string names;
    for (std::string_view k : known) names += (names.empty() ? "" : ", ") + std::string(k);
    value.reject("unknown member '" + key + "' (known here: " + names + ")");
  }
}

namespace {

void escape(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
}

}  // namespace

std::string Json::dump(int indent) const {
  std::string out;
  dump_to(out, indent, 0);
  return out;
}

void Json::dump_to(std::string& out, int indent, int depth) const {
  const std::string pad = indent > 0 ? "\n" + std::string(static_cast<size_t>(indent * (depth + 1)), ' ') : "";
  const std::string close = indent > 0 ? "\n" + std::string(static_cast<size_t>(indent * depth), ' ') : "";
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          out += "null";
        } else if constexpr (std::is_same_v<T, bool>) {
          out += v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, Number>) {
          // JSON has no NaN or infinity: null says "no value" and stays a file every reader parses
          // (weft's readers then refuse it where a number is required). Throwing here would lose a
          // long measurement over one derived figure (a ratio of equal times).
          if (!std::isfinite(v.value)) {
            out += "null";
            return;
          }
          char buf[32];
          if (v.exact && std::fabs(v.value) < 1e15) std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v.integer));
          else std::snprintf(buf, sizeof buf, "%.6g", v.value);
          out += buf;
        } else if constexpr (std::is_same_v<T, std::string>) {
          escape(out, v);
        } else if constexpr (std::is_same_v<T, Array>) {
          out += '[';
          for (size_t i = 0; i < v.size(); ++i) {
            out += (i ? "," : "") + pad;
            v[i].dump_to(out, indent, depth + 1);
          }
          out += (v.empty() ? "" : close) + "]";
        } else {
          out += '{';
          size_t i = 0;
          for (const auto& [key, value] : v) {
            out += (i++ ? "," : "") + pad;
            escape(out, key);
            out += indent > 0 ? ": " : ":";
            value.dump_to(out, indent, depth + 1);
          }
          out += (v.empty() ? "" : close) + "}";
        }
      },
      value_);
}

}  // namespace weft
