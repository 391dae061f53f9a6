// A user-given text as a one-line message shows it. Torch-free, any thread.
#pragma once

#include <string>
#include <string_view>

namespace tandem {

// `text` in single quotes, with every byte a terminal would not print (NUL, control characters, DEL,
// bytes >= 0x80) and the backslash written as \xNN. Unescaped, a name with a NUL byte is cut at the
// NUL (an exception's what() is a C string) and a newline breaks the one-line rule.
std::string quote_escaped(std::string_view text);

}  // namespace tandem
