// TOML configuration checked against a schema. Every key a program reads is declared once in a
// ConfigKey table (type, default, bounds, one line of documentation); loading rejects unknown keys,
// wrong types and out-of-range values with a one-line UserError that names the key and what it
// accepts. Real values must be finite (NaN and infinities pass no range check, so they are refused
// by name). `--set section.key=value` overrides are parsed as TOML values (bare words fall back to
// strings for string keys). A Config is immutable after load and may be read from any thread.
//
// The text is screened before toml++ sees it (common/toml_screen.hpp).
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

// A key's former spelling, loaded as `key` for one release with a note (Config::notes()) naming it.
struct RenamedKey {
  std::string_view old_key;
  std::string_view key;
};

struct ConfigKey {
  std::string_view key;  // dotted path, e.g. "learner.batch_size"
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
  // foreign_tables: tables that belong to another program (a child's config may hold the launcher's
  // [run]) or that their owner checks itself (the launcher's program groups, "run.group"): skipped,
  // with their --set overrides, and listed by skipped_tables(). A dotted name skips that sub-table only.
  // renamed: former spellings of schema keys; a document that gives both spellings of one key is
  // refused, naming both.
  static Config parse(std::string_view text, std::string_view origin, std::span<const std::string> overrides,
                      std::span<const ConfigKey> schema, std::span<const std::string_view> foreign_tables = {},
                      std::span<const RenamedKey> renamed = {});
  static Config load(const std::filesystem::path& file, std::span<const std::string> overrides,
                     std::span<const ConfigKey> schema, std::span<const std::string_view> foreign_tables = {},
                     std::span<const RenamedKey> renamed = {});

  // The foreign tables the document or the overrides named, in the order given.
  const std::vector<std::string>& skipped_tables() const { return skipped_; }
  // One line per former spelling used, naming the key to write instead; the loader prints them.
  const std::vector<std::string>& notes() const { return notes_; }

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
  std::vector<std::string> skipped_;
  std::vector<std::string> notes_;
};

// A TOML value literal ("3", "true", "\"x\"", "[1, 2]") as the table {v = value}; text that is no
// TOML value (a bare word) becomes a string.
toml::table parse_value_literal(std::string_view literal, std::string_view origin);

// A config file's text; a UserError naming the file when it cannot be read.
std::string read_config_text(const std::filesystem::path& file);

// The schema as a commented TOML document: one entry per key with its doc and default.
std::string describe_schema(std::span<const ConfigKey> schema);

}  // namespace tandem
