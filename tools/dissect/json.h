// Just enough JSON for --json: a string escaper and a writer that places the commas.
//
// Output only; no parsing. Strings are expected to be UTF-8 and are passed through except
// for the characters JSON requires escaped (quote, backslash, control characters).
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace uroce::dissect {

/// Appends `s` as a quoted JSON string.
void json_quote(std::string& out, std::string_view s);

class JsonWriter {
 public:
  void begin_object();                      // top level or array element
  void begin_object(std::string_view key);  // member of the enclosing object
  void end_object();
  void begin_array(std::string_view key);
  void end_array();

  void field(std::string_view key, std::string_view v);
  void field(std::string_view key, const char* v) { field(key, std::string_view(v)); }
  void field(std::string_view key, const std::string& v) { field(key, std::string_view(v)); }
  void field(std::string_view key, bool v);
  template <std::integral T>
  requires(!std::same_as<T, bool>) void field(std::string_view key, T v) {
    if constexpr (std::is_signed_v<T>) {
      field_signed(key, static_cast<int64_t>(v));
    } else {
      field_unsigned(key, static_cast<uint64_t>(v));
    }
  }
  /// A member whose value is already valid JSON text (e.g. "0.143511").
  void field_raw(std::string_view key, std::string_view json);

  void value(std::string_view v);  // array element
  void value(uint64_t v);

  const std::string& str() const { return out_; }
  void clear() {
    out_.clear();
    first_.clear();
  }

 private:
  void field_signed(std::string_view key, int64_t v);
  void field_unsigned(std::string_view key, uint64_t v);
  void comma();
  void key(std::string_view k);

  std::string out_;
  std::vector<bool> first_;  // per open object/array: nothing written in it yet
};

}  // namespace uroce::dissect
