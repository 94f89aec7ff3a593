#include "dissect/json.h"

namespace uroce::dissect {

void json_quote(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (u < 0x20) {
          out += "\\u00";
          out += kHex[u >> 4];
          out += kHex[u & 0xF];
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

void JsonWriter::comma() {
  if (first_.empty()) return;
  if (!first_.back()) out_ += ',';
  first_.back() = false;
}

void JsonWriter::key(std::string_view k) {
  comma();
  json_quote(out_, k);
  out_ += ':';
}

void JsonWriter::begin_object() {
  comma();
  out_ += '{';
  first_.push_back(true);
}

void JsonWriter::begin_object(std::string_view k) {
  key(k);
  out_ += '{';
  first_.push_back(true);
}

void JsonWriter::end_object() {
  out_ += '}';
  first_.pop_back();
}

void JsonWriter::begin_array(std::string_view k) {
  key(k);
  out_ += '[';
  first_.push_back(true);
}

void JsonWriter::end_array() {
  out_ += ']';
  first_.pop_back();
}

void JsonWriter::field(std::string_view k, std::string_view v) {
  key(k);
  json_quote(out_, v);
}

void JsonWriter::field(std::string_view k, bool v) {
  key(k);
  out_ += v ? "true" : "false";
}

void JsonWriter::field_signed(std::string_view k, int64_t v) {
  key(k);
  out_ += std::to_string(v);
}

void JsonWriter::field_unsigned(std::string_view k, uint64_t v) {
  key(k);
  out_ += std::to_string(v);
}

void JsonWriter::field_raw(std::string_view k, std::string_view json) {
  key(k);
  out_ += json;
}

void JsonWriter::value(std::string_view v) {
  comma();
  json_quote(out_, v);
}

void JsonWriter::value(uint64_t v) {
  comma();
  out_ += std::to_string(v);
}

}  // namespace uroce::dissect
