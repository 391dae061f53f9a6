// The job config: the input as a TOML document, then its lines as --set overrides, parsed and
// checked against `tandem run`'s schema (every [run] key and the programs' tables, former spellings
// included), then read into the programs' settings with the rules between tables. The cache and
// program checks need the world and are left out. A UserError is the one accepted failure; toml++ itself must never assert or crash
// (check_toml_text screens the inputs toml++ 3.3.0 mishandles).
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "common/config.hpp"
#include "common/error.hpp"
#include "common/settings/job.hpp"
#include "tools/run/job_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::vector<tandem::ConfigKey> schema = tandem::run::job_schema();
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const tandem::Config c = tandem::Config::parse(text, "fuzz.toml", {}, schema, {}, tandem::renamed_keys());
    tandem::Config::parse(c.to_toml(), "resolved", {}, schema);  // what the run dir records reads back
    (void)tandem::JobSettings::parse(c, {});
  } catch (const tandem::UserError&) {
  }
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  try {
    tandem::Config::parse("", "<default>", lines, schema, {}, tandem::renamed_keys());
  } catch (const tandem::UserError&) {
  }
  return 0;
}
