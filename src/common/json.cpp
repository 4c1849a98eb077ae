#include "common/json.hpp"

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace weft {

namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Json document() {
    Json value = parse_value();
    skip_space();
    if (at_ < text_.size()) fail("trailing characters");
    return value;
  }

 private:
  std::string_view text_;
  size_t at_ = 0;
  // Nesting is bounded: each level is a stack frame here and in Json's destructor, and weft's files
  // nest a few levels.
  static constexpr int kMaxDepth = 128;
  int depth_ = 0;
  struct Nested {
    Parser& parser;
    explicit Nested(Parser& p) : parser(p) {
      if (++parser.depth_ > kMaxDepth) parser.fail("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    ~Nested() { --parser.depth_; }
  };

  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument("JSON: " + what + " at byte " + std::to_string(at_));
  }
  void skip_space() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\n' || text_[at_] == '\t' || text_[at_] == '\r')) ++at_;
  }
  char peek() {
    skip_space();
    if (at_ >= text_.size()) fail("unexpected end");
    return text_[at_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++at_;
  }
  bool literal(std::string_view word) {
    if (text_.substr(at_, word.size()) != word) return false;
    at_ += word.size();
    return true;
  }

  Json parse_value() {
    const char c = peek();
    if (c == '{') return parse_object();
    if (c == '[') return parse_array();
    if (c == '"') return Json(parse_string());
    if (literal("true")) return Json(true);
    if (literal("false")) return Json(false);
    if (literal("null")) return Json();
    return parse_number();
  }

  Json parse_object() {
    const Nested level(*this);
    expect('{');
    Json::Object object;
    if (peek() == '}') {
      ++at_;
      return Json(std::move(object));
    }
    for (;;) {
      if (peek() != '"') fail("expected a member name");
      std::string key = parse_string();
      expect(':');
      object[key] = parse_value();
      if (peek() == ',') {
        ++at_;
        continue;
      }
      expect('}');
      return Json(std::move(object));
    }
  }

  Json parse_array() {
    const Nested level(*this);
    expect('[');
    Json::Array array;
    if (peek() == ']') {
      ++at_;
      return Json(std::move(array));
    }
    for (;;) {
      array.push_back(parse_value());
      if (peek() == ',') {
        ++at_;
        continue;
      }
      expect(']');
      return Json(std::move(array));
    }
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    while (at_ < text_.size() && text_[at_] != '"') {
      char c = text_[at_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= text_.size()) fail("unfinished escape");
      c = text_[at_++];
      switch (c) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          if (at_ + 4 > text_.size()) fail("short \\u escape");
          const unsigned code = static_cast<unsigned>(std::stoul(std::string(text_.substr(at_, 4)), nullptr, 16));
          at_ += 4;
          if (code < 0x80) {
            out += static_cast<char>(code);
          } else if (code < 0x800) {
            out += static_cast<char>(0xc0 | (code >> 6));
            out += static_cast<char>(0x80 | (code & 0x3f));
          } else {
            out += static_cast<char>(0xe0 | (code >> 12));
            out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
            out += static_cast<char>(0x80 | (code & 0x3f));
          }
          break;
        }
        default: out += c;
      }
    }
    if (at_ >= text_.size()) fail("unfinished string");
    ++at_;
    return out;
  }

  Json parse_number() {
    const size_t start = at_;
    while (at_ < text_.size() && std::string_view("+-0123456789.eE").find(text_[at_]) != std::string_view::npos) ++at_;
    if (start == at_) fail("unexpected character");
    try {
      return Json(std::stod(std::string(text_.substr(start, at_ - start))));
    } catch (const std::exception&) {
      fail("bad number");
    }
  }
};

void escape(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
}

}  // namespace

Json Json::parse(std::string_view text) { return Parser(text).document(); }

const Json& Json::operator[](const std::string& key) const {
  const auto& object = members();
  auto it = object.find(key);
  if (it == object.end()) throw std::invalid_argument("JSON: missing member '" + key + "'");
  return it->second;
}

const Json::Array& Json::items() const {
  if (auto* a = std::get_if<Array>(&value_)) return *a;
  throw std::invalid_argument("JSON: expected an array");
}

const Json::Object& Json::members() const {
  if (auto* o = std::get_if<Object>(&value_)) return *o;
  throw std::invalid_argument("JSON: expected an object");
}

const std::string& Json::text() const {
  if (auto* s = std::get_if<std::string>(&value_)) return *s;
  throw std::invalid_argument("JSON: expected a string");
}

double Json::number() const {
  if (auto* d = std::get_if<double>(&value_)) return *d;
  throw std::invalid_argument("JSON: expected a number");
}

int64_t Json::integer() const {
  const double d = number();
  if (std::floor(d) != d) throw std::invalid_argument("JSON: expected an integer, got " + std::to_string(d));
  // 2^63 is exact in a double; anything at or beyond it (or NaN) has no int64 value.
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
    throw std::invalid_argument("JSON: integer " + std::to_string(d) + " is outside the 64-bit range");
  return static_cast<int64_t>(d);
}

bool Json::boolean() const {
  if (auto* b = std::get_if<bool>(&value_)) return *b;
  throw std::invalid_argument("JSON: expected true or false");
}

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
        } else if constexpr (std::is_same_v<T, double>) {
          char buf[32];
          if (std::floor(v) == v && std::fabs(v) < 1e15) std::snprintf(buf, sizeof buf, "%.0f", v);
          else std::snprintf(buf, sizeof buf, "%.6g", v);
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
