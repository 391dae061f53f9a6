// TOML configuration checked against a schema. Every key a program reads is declared once in a
// ConfigKey table (type, default, bounds, one line of documentation); loading rejects unknown keys,
// wrong types and out-of-range values with a one-line UserError that names the key and what it
// accepts. `--set section.key=value` overrides are parsed as TOML values (bare words fall back to
// strings for string keys). A Config is immutable after load and may be read from any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

namespace tandem {

enum class ConfigType { integer, real, boolean, string };

struct ConfigKey {
  std::string_view key;            // dotted path, e.g. "learner.batch_size"
  ConfigType type;
  std::string_view default_value;  // a TOML literal: "256", "0.1", "true", "\"cnn\""
  std::string_view doc;            // one line, shown by `tandem run --explain` and in examples/
  std::optional<double> min = {};  // inclusive bounds for numbers
  std::optional<double> max = {};
  std::vector<std::string_view> choices = {};  // allowed values of a string key
};

class Config {
 public:
  // text: TOML document (may be empty); origin names it in errors (a path or "<default>").
  static Config parse(std::string_view text, std::string_view origin,
                      std::span<const std::string> overrides, std::span<const ConfigKey> schema);
  static Config load(const std::filesystem::path& file, std::span<const std::string> overrides,
                     std::span<const ConfigKey> schema);

  std::int64_t integer(std::string_view key) const;
  double real(std::string_view key) const;
  bool boolean(std::string_view key) const;
  std::string string(std::string_view key) const;

  // The resolved configuration (defaults filled in) as TOML, for the run directory.
  std::string to_toml() const;

 private:
  Config() = default;
  const toml::node& node(std::string_view key, ConfigType type) const;
  toml::table values_;
  std::vector<ConfigKey> schema_;
};

// The schema as a commented TOML document: one entry per key with its doc and default.
std::string describe_schema(std::span<const ConfigKey> schema);

}  // namespace tandem
