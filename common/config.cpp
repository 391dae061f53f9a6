#include "common/config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "common/error.hpp"
#include "common/toml_screen.hpp"

namespace tandem {
namespace {

std::string_view type_name(ConfigType t) {
  switch (t) {
    case ConfigType::integer: return "an integer";
    case ConfigType::real: return "a number";
    case ConfigType::boolean: return "true or false";
    case ConfigType::string: return "a string";
  }
  return "?";
}

const ConfigKey* find_key(std::span<const ConfigKey> schema, std::string_view key) {
  auto it = std::find_if(schema.begin(), schema.end(), [&](const ConfigKey& k) { return k.key == key; });
  return it == schema.end() ? nullptr : &*it;
}

// The keys of `key`'s table; when the table itself is unknown (or there is none), the tables.
std::string known_keys_near(std::span<const ConfigKey> schema, std::string_view key) {
  auto dot = key.find('.');
  std::string_view section = dot == std::string_view::npos ? std::string_view{} : key.substr(0, dot + 1);
  std::string out;
  if (!section.empty())
    for (const auto& k : schema) {
      if (!k.key.starts_with(section)) continue;
      if (!out.empty()) out += ", ";
      out += k.key;
    }
  if (!out.empty()) return out;
  std::vector<std::string_view> tables;
  for (const auto& k : schema) {
    auto table = k.key.substr(0, k.key.find('.'));
    if (std::find(tables.begin(), tables.end(), table) == tables.end()) tables.push_back(table);
  }
  for (auto t : tables) out += fmt::format("{}[{}]", out.empty() ? "tables " : ", ", t);
  return out;
}

// The foreign table `key` lies in ("" = none): a top-level table ("run") or a dotted one ("run.group").
std::string_view foreign_table_of(std::span<const std::string_view> foreign, std::string_view key) {
  for (const auto table : foreign)
    if (key == table || (key.starts_with(table) && key.size() > table.size() && key[table.size()] == '.')) return table;
  return {};
}

void flatten(const toml::table& table, const std::string& prefix,
             std::vector<std::pair<std::string, const toml::node*>>& out) {
  for (const auto& [k, v] : table) {
    std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const auto* sub = v.as_table()) flatten(*sub, key, out);
    else out.emplace_back(key, &v);
  }
}

// Converts a node to the key's type (integers are accepted for reals) or fails naming the key.
toml::table typed_value(const ConfigKey& k, const toml::node& v, std::string_view origin) {
  toml::table out;
  auto bad = [&] {
    std::ostringstream shown;
    v.visit([&](const auto& value) { shown << value; });
    fail("config {}: {} must be {}, got {}", origin, k.key, type_name(k.type), shown.str());
  };
  double number = 0;
  switch (k.type) {
    case ConfigType::integer:
      if (!v.is_integer()) bad();
      number = static_cast<double>(v.as_integer()->get());
      out.insert("v", v.as_integer()->get());
      break;
    case ConfigType::real:
      if (v.is_integer()) number = static_cast<double>(v.as_integer()->get());
      else if (v.is_floating_point()) number = v.as_floating_point()->get();
      else bad();
      if (!std::isfinite(number))
        fail("config {}: {} = {} is not a finite number: write a value in [{}, {}]", origin, k.key, number,
             k.min ? fmt::format("{}", *k.min) : "-inf", k.max ? fmt::format("{}", *k.max) : "inf");
      out.insert("v", number);
      break;
    case ConfigType::boolean:
      if (!v.is_boolean()) bad();
      out.insert("v", v.as_boolean()->get());
      break;
    case ConfigType::string: {
      if (!v.is_string()) bad();
      std::string s = v.as_string()->get();
      if (!k.choices.empty() && std::find(k.choices.begin(), k.choices.end(), s) == k.choices.end()) {
        std::string allowed;
        for (auto c : k.choices) allowed += (allowed.empty() ? "" : ", ") + std::string(c);
        fail("config {}: {} = \"{}\" is not one of: {}", origin, k.key, s, allowed);
      }
      out.insert("v", s);
      break;
    }
  }
  if (k.type == ConfigType::integer || k.type == ConfigType::real) {
    if ((k.min && number < *k.min) || (k.max && number > *k.max)) {
      fail("config {}: {} = {} is out of range [{}, {}]", origin, k.key, number,
           k.min ? fmt::format("{}", *k.min) : "-inf", k.max ? fmt::format("{}", *k.max) : "inf");
    }
  }
  return out;
}

void set_dotted(toml::table& root, std::string_view key, const toml::node& value) {
  toml::table* t = &root;
  while (true) {
    auto dot = key.find('.');
    if (dot == std::string_view::npos) break;
    auto section = key.substr(0, dot);
    if (!t->contains(section)) t->insert(section, toml::table{});
    t = (*t)[section].as_table();
    key = key.substr(dot + 1);
  }
  t->insert_or_assign(key, value);
}

}  // namespace

toml::table parse_value_literal(std::string_view literal, std::string_view origin) {
  const std::string text = fmt::format("v = {}", literal);
  bool value = true;
  try {
    check_toml_text(text, origin);
  } catch (const UserError&) {  // e.g. a non-ASCII bare word: not a TOML value
    value = false;
  }
  if (value) {
    try {
      return toml::parse(text, origin);
    } catch (const toml::parse_error&) {
    }
  }
  toml::table t;
  t.insert("v", std::string(literal));
  return t;
}

Config Config::parse(std::string_view text, std::string_view origin, std::span<const std::string> overrides,
                     std::span<const ConfigKey> schema, std::span<const std::string_view> foreign_tables,
                     std::span<const RenamedKey> renamed) {
  check_toml_text(text, origin);
  Config config;
  // The key a former spelling stands for, noted once per spelling.
  auto current = [&](std::string key, std::string_view where) {
    auto it = std::find_if(renamed.begin(), renamed.end(), [&](const RenamedKey& r) { return r.old_key == key; });
    if (it == renamed.end()) return key;
    std::string note = fmt::format(
        "note: config {}: {} is now {}: rename it (the old name loads until the next release)", where, it->old_key,
        it->key);
    if (std::find(config.notes_.begin(), config.notes_.end(), note) == config.notes_.end())
      config.notes_.push_back(std::move(note));
    return std::string(it->key);
  };
  auto skip = [&](std::string_view key) {
    const std::string table(foreign_table_of(foreign_tables, key));
    if (table.empty()) return false;
    if (std::find(config.skipped_.begin(), config.skipped_.end(), table) == config.skipped_.end())
      config.skipped_.push_back(table);
    return true;
  };
  toml::table doc;
  try {
    doc = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    fail("config {}:{}: {}", origin, e.source().begin.line, e.description());
  }

  std::map<std::string, toml::table> chosen;  // key -> table {v = typed value}
  for (const auto& k : schema) {
    toml::table literal = parse_value_literal(k.default_value, "<default>");
    chosen[std::string(k.key)] = typed_value(k, *literal.get("v"), "<default>");
  }

  std::vector<std::pair<std::string, const toml::node*>> given;
  flatten(doc, "", given);
  std::map<std::string, std::string> spelled;  // key -> how the document spelled it
  for (auto& [key, node] : given) {
    const std::string as_given = key;
    key = current(key, origin);
    if (auto [it, fresh] = spelled.emplace(key, as_given); !fresh)
      fail("config {}: {} and {} are one key: keep {}", origin, it->second, as_given, key);
  }
  for (const auto& [key, node] : given) {
    if (skip(key)) continue;
    const ConfigKey* k = find_key(schema, key);
    if (k == nullptr) fail("config {}: unknown key '{}' (known: {})", origin, key, known_keys_near(schema, key));
    chosen[key] = typed_value(*k, *node, origin);
  }
  for (const auto& assignment : overrides) {
    auto eq = assignment.find('=');
    if (eq == std::string::npos) fail("--set {}: expected key=value, e.g. --set supervised.steps=100", assignment);
    std::string key = current(assignment.substr(0, eq), "--set");
    if (skip(key)) continue;
    const ConfigKey* k = find_key(schema, key);
    if (k == nullptr) fail("--set: unknown key '{}' (known: {})", key, known_keys_near(schema, key));
    const std::string_view literal = std::string_view(assignment).substr(eq + 1);
    toml::table parsed = parse_value_literal(literal, "--set");
    // A string key takes the text as written: --set data.std=0.5 means "0.5", not the number.
    if (k->type == ConfigType::string && !parsed.get("v")->is_string())
      parsed.insert_or_assign("v", std::string(literal));
    chosen[key] = typed_value(*k, *parsed.get("v"), "--set");
  }

  config.schema_.assign(schema.begin(), schema.end());
  for (auto& [key, value] : chosen) set_dotted(config.values_, key, *value.get("v"));
  return config;
}

Config Config::load(const std::filesystem::path& file, std::span<const std::string> overrides,
                    std::span<const ConfigKey> schema, std::span<const std::string_view> foreign_tables,
                    std::span<const RenamedKey> renamed) {
  return parse(read_config_text(file), file.string(), overrides, schema, foreign_tables, renamed);
}

std::string read_config_text(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) fail("config {}: cannot be read (does the file exist?)", file.string());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

const toml::node& Config::node(std::string_view key, ConfigType type) const {
  const ConfigKey* k = find_key(schema_, key);
  if (k == nullptr || k->type != type)
    throw std::logic_error(fmt::format("config key '{}' read as {} but not declared so", key, type_name(type)));
  return *values_.at_path(key).node();
}

std::int64_t Config::integer(std::string_view key) const { return node(key, ConfigType::integer).as_integer()->get(); }
double Config::real(std::string_view key) const { return node(key, ConfigType::real).as_floating_point()->get(); }
bool Config::boolean(std::string_view key) const { return node(key, ConfigType::boolean).as_boolean()->get(); }
std::string Config::string(std::string_view key) const { return node(key, ConfigType::string).as_string()->get(); }

std::string Config::to_toml() const {
  std::ostringstream out;
  out << values_;
  return out.str() + "\n";
}

std::string describe_schema(std::span<const ConfigKey> schema) {
  std::string out;
  std::string_view section;
  for (const auto& k : schema) {
    auto dot = k.key.rfind('.');
    auto sec = dot == std::string_view::npos ? std::string_view{} : k.key.substr(0, dot);
    if (sec != section) {
      out += fmt::format("\n[{}]\n", sec);
      section = sec;
    }
    std::string bounds;
    if (k.min || k.max)
      bounds = fmt::format(" [{}, {}]", k.min ? fmt::format("{}", *k.min) : "", k.max ? fmt::format("{}", *k.max) : "");
    if (!k.choices.empty()) {
      bounds = " (";
      for (auto c : k.choices) bounds += std::string(c) + (c == k.choices.back() ? ")" : " | ");
    }
    out += fmt::format("# {}{}\n{} = {}\n", k.doc, bounds,
                       dot == std::string_view::npos ? k.key : k.key.substr(dot + 1), k.default_value);
  }
  return out;
}

}  // namespace tandem
