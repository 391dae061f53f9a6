#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/config.hpp"
#include "common/error.hpp"

using tandem::Config;
using tandem::ConfigKey;
using tandem::ConfigType;

namespace {
const std::vector<ConfigKey> kSchema = {
    {"learner.batch_size", ConfigType::integer, "256", "samples per step", 1, 65536},
    {"learner.lr", ConfigType::real, "0.1", "learning rate", 0.0, 10.0},
    {"learner.model", ConfigType::string, "\"cnn\"", "model", {}, {}, {"mlp", "cnn", "resnet18"}},
    {"job.verbose", ConfigType::boolean, "false", "chatty"},
};

std::string error_of(std::string_view text, std::vector<std::string> overrides = {}) {
  try {
    Config::parse(text, "test.toml", overrides, kSchema);
  } catch (const tandem::UserError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("config: defaults apply when the document is empty") {
  Config c = Config::parse("", "<default>", {}, kSchema);
  CHECK(c.integer("learner.batch_size") == 256);
  CHECK(c.real("learner.lr") == doctest::Approx(0.1));
  CHECK(c.string("learner.model") == "cnn");
  CHECK_FALSE(c.boolean("job.verbose"));
}

TEST_CASE("config: the file overrides defaults and --set overrides the file") {
  std::vector<std::string> set = {"learner.lr=0.5", "learner.model=mlp"};
  Config c = Config::parse("[learner]\nbatch_size = 64\nlr = 1\n", "f", set, kSchema);
  CHECK(c.integer("learner.batch_size") == 64);
  CHECK(c.real("learner.lr") == doctest::Approx(0.5));  // integers are accepted for reals
  CHECK(c.string("learner.model") == "mlp");           // a bare word is a string
}

TEST_CASE("config: bad values name the key and what it accepts, on one line") {
  struct Row {
    std::string text;
    std::vector<std::string> set;
    std::string expect;
  };
  std::vector<Row> rows = {
      {"[learner]\nbach_size = 3\n", {}, "unknown key 'learner.bach_size'"},
      {"[learner]\nbatch_size = \"big\"\n", {}, "learner.batch_size must be an integer"},
      {"[learner]\nbatch_size = 0\n", {}, "learner.batch_size = 0 is out of range [1, 65536]"},
      {"", {"learner.model=vgg"}, "learner.model = \"vgg\" is not one of: mlp, cnn, resnet18"},
      {"", {"learner.lr"}, "expected key=value"},
      {"", {"job.verbose=maybe"}, "job.verbose must be true or false"},
      {"[learner\n", {}, "test.toml:1"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.text);
    std::string message = error_of(row.text, row.set);
    CHECK(message.find(row.expect) != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
}

TEST_CASE("config: the resolved document round-trips through TOML") {
  Config c = Config::parse("", "<default>", std::vector<std::string>{"learner.batch_size=32"}, kSchema);
  Config again = Config::parse(c.to_toml(), "resolved", {}, kSchema);
  CHECK(again.integer("learner.batch_size") == 32);
  CHECK(tandem::describe_schema(kSchema).find("# samples per step [1, 65536]\nbatch_size = 256") != std::string::npos);
}
