#include "common/toml_screen.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace tandem {
namespace {

bool is_key_start(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
         c == '"' || c == '\'';
}

}  // namespace

void check_toml_text(std::string_view text, std::string_view origin) {
  enum class In { code, comment, basic, literal, ml_basic, ml_literal } in = In::code;
  std::size_t line = 1;
  bool line_start = true;  // only whitespace so far on this line (outside strings)
  int value_depth = 0;     // open [ and { of a value: a line starting with '[' inside one is no header
  bool header = false;     // on a table header line: its brackets are not a value's
  const std::size_t n = text.size();
  auto at = [&](std::size_t i) { return i < n ? text[i] : '\0'; };
  auto starts = [&](std::size_t i, std::string_view s) { return text.substr(std::min(i, n), s.size()) == s; };
  for (std::size_t i = 0; i < n; ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      line_start = true;
      header = false;
      if (in != In::ml_basic && in != In::ml_literal) in = In::code;
      continue;
    }
    switch (in) {
      case In::comment: break;
      case In::basic:
        if (c == '\\' && at(i + 1) != '\n') ++i;
        else if (c == '"') in = In::code;
        break;
      case In::literal:
        if (c == '\'') in = In::code;
        break;
      case In::ml_literal:
        if (starts(i, "'''")) in = In::code, i += 2;
        break;
      case In::ml_basic:
        if (starts(i, "\"\"\"")) {
          in = In::code, i += 2;
        } else if (c == '\\') {
          std::size_t j = i + 1;
          while (at(j) == ' ' || at(j) == '\t' || at(j) == '\r') ++j;
          if (at(j) != '\n') {  // an escape: skip the escaped character
            ++i;
            break;
          }
          for (; j < n && (at(j) == ' ' || at(j) == '\t' || at(j) == '\r' || at(j) == '\n'); ++j) line += at(j) == '\n';
          if (static_cast<unsigned char>(at(j)) >= 0x80)
            fail(
                "config {}:{}: a non-ASCII character right after a line-ending backslash in a multi-line string: "
                "put it on the backslash's line or drop the backslash",
                origin, line);
          i = j - 1;
        }
        break;
      case In::code:
        if (c == ' ' || c == '\t' || c == '\r') break;
        if (static_cast<unsigned char>(c) >= 0x80)
          fail("config {}:{}: a non-ASCII character outside a quoted string or comment: quote the key or value", origin,
               line);
        if (c == '#') {
          in = In::comment;
        } else if (c == '"') {
          in = starts(i, "\"\"\"") ? In::ml_basic : In::basic;
          if (in == In::ml_basic) i += 2;
        } else if (c == '\'') {
          in = starts(i, "'''") ? In::ml_literal : In::literal;
          if (in == In::ml_literal) i += 2;
        } else if (c == '[' && line_start && value_depth == 0) {
          header = true;
          std::size_t j = i + 1 + (at(i + 1) == '[');
          while (at(j) == ' ' || at(j) == '\t') ++j;
          if (!is_key_start(at(j)))
            fail("config {}:{}: malformed table header: write [table] or [[table]] with a bare or quoted name", origin,
                 line);
          i = j - 1;
        } else if ((c == '[' || c == '{') && !header) {
          ++value_depth;
        } else if ((c == ']' || c == '}') && !header && value_depth > 0) {
          --value_depth;
        }
        line_start = false;
        break;
    }
  }
}

}  // namespace tandem
