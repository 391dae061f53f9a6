#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/config.hpp"
#include "common/error.hpp"
#include "common/program.hpp"
#include "common/toml_screen.hpp"
#include "tests/harness.hpp"

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
  CHECK(c.string("learner.model") == "mlp");            // a bare word is a string
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

TEST_CASE("config: NaN and infinities are refused for real keys, from the file and from --set") {
  const std::vector<std::pair<std::string, std::vector<std::string>>> inputs = {{"[learner]\nlr = nan\n", {}},
                                                                                {"[learner]\nlr = -inf\n", {}},
                                                                                {"", {"learner.lr=nan"}},
                                                                                {"", {"learner.lr=+inf"}}};
  for (const auto& [text, set] : inputs) {
    const std::string& input = text;  // clang 14 cannot capture a structured binding (CAPTURE's lambda)
    CAPTURE(input);
    const std::string message = error_of(text, set);
    CHECK(message.find("learner.lr = ") != std::string::npos);
    CHECK(message.find("is not a finite number") != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
}

TEST_CASE("config: an unknown key of an unknown table lists the known tables") {
  const std::string message = error_of("[run]\nactors = 2\n");
  CHECK(message.find("unknown key 'run.actors' (known: tables [learner], [job])") != std::string::npos);
  CHECK(error_of("", {"learner.bach=1"}).find("known: learner.batch_size, learner.lr, learner.model") !=
        std::string::npos);
}

TEST_CASE("config: a foreign table is skipped and reported, with its --set overrides") {
  static constexpr std::string_view foreign[] = {"run"};
  const std::vector<std::string> set = {"run.actors=3"};
  Config c = Config::parse("[run]\nactors = 2\n[learner]\nlr = 1\n", "f", set, kSchema, foreign);
  CHECK(c.real("learner.lr") == doctest::Approx(1.0));
  REQUIRE(c.skipped_tables().size() == 1);
  CHECK(c.skipped_tables()[0] == "run");
  CHECK(Config::parse("", "f", {}, kSchema, foreign).skipped_tables().empty());
}

TEST_CASE("config: a former spelling loads as its key, with one note naming the new key") {
  static constexpr tandem::RenamedKey renamed[] = {{"learner.rate", "learner.lr"}};
  Config c = Config::parse("[learner]\nrate = 0.5\n", "f", {}, kSchema, {}, renamed);
  CHECK(c.real("learner.lr") == doctest::Approx(0.5));
  REQUIRE(c.notes().size() == 1);
  CHECK(c.notes()[0] ==
        "note: config f: learner.rate is now learner.lr: rename it (the old name loads until the next "
        "release)");
  CHECK(c.to_toml().find("rate") == std::string::npos);  // what children read has the new name
  const std::vector<std::string> set = {"learner.rate=2"};
  CHECK(Config::parse("[learner]\nlr = 1\n", "f", set, kSchema, {}, renamed).real("learner.lr") == doctest::Approx(2));
  try {
    (void)Config::parse("[learner]\nlr = 1\nrate = 2\n", "f", {}, kSchema, {}, renamed);
    FAIL("both spellings were accepted");
  } catch (const tandem::UserError& e) {
    CHECK(std::string(e.what()) == "config f: learner.lr and learner.rate are one key: keep learner.lr");
  }
  CHECK(Config::parse("", "f", {}, kSchema, {}, renamed).notes().empty());
}

TEST_CASE("config: a program accepts the example job configs, [run] and all") {
  for (const char* example :
       {"examples/fmnist-cnn.toml", "examples/cifar10-resnet18.toml", "examples/cartpole-ppo.toml",
        "examples/cartpole-vtrace.toml", "examples/pendulum-ppo.toml"}) {
    CAPTURE(example);
    const std::string path = tandem::test::source_root() + "/" + example;
    Config c = tandem::load_program_config(path, {});
    CHECK(c.skipped_tables() == std::vector<std::string>{"run"});
    CHECK(c.notes().empty());  // the examples use the current spellings
  }
}

// toml++ 3.3.0 aborts (assert in parse_key) or reaches __builtin_unreachable (is_non_ascii_horizontal_
// whitespace) on these; check_toml_text must refuse each with a line naming file:line first.
TEST_CASE("config: inputs that crash toml++ 3.3.0 are refused with one line naming file:line") {
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"[?x]\n", "test.toml:1: malformed table header"},
      {"a = 1\n[ ?x]\n", "test.toml:2: malformed table header"},
      {"[[[1]]]\n", "test.toml:1: malformed table header"},
      {"[[=\n", "test.toml:1: malformed table header"},
      {"\xc2\xa7 = 1\n", "test.toml:1: a non-ASCII character outside a quoted string"},
      {"[learner]\nlr = 1 \xc2\xa7\n", "test.toml:2: a non-ASCII character outside a quoted string"},
      {"s = \"\"\"\\\n\xc2\xa7\"\"\"\n", "test.toml:2: a non-ASCII character right after a line-ending backslash"},
      {"s = \"\"\"\n\n\"\"\"\nt = \"\"\"\\   \n\n  \xc2\xa7\"\"\"\n", "test.toml:6: a non-ASCII character right after"},
  };
  for (const auto& [text, expect] : rows) {
    const std::string& input = text;  // clang 14 cannot capture a structured binding (CAPTURE's lambda)
    CAPTURE(input);
    const std::string message = error_of(text);
    CHECK(message.find(expect) != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
}

TEST_CASE("config: valid TOML with non-ASCII in strings and comments, and nested arrays, passes the screen") {
  const std::vector<std::string> ok = {
      "# caf\xc3\xa9\na = \"\xc2\xa7\"\nb = '\xc2\xa7'\nc = \"\"\"\xc2\xa7\n\xc2\xa7\"\"\"\nd = '''\\\n\xc2\xa7'''\n",
      "e = \"\"\"x \\\n  y \xc2\xa7\"\"\"\n",
      "a = [\n  [1, 2],\n  [{x = 1}],\n  [ ],\n]\n[t]\n[[u]]\n[ \"q\" ]\n['r'.s]\n",
  };
  for (const auto& text : ok) {
    const std::string& input = text;  // clang 14 cannot capture a structured binding (CAPTURE's lambda)
    CAPTURE(input);
    CHECK_NOTHROW(tandem::check_toml_text(text, "ok.toml"));
  }
}

TEST_CASE("config: --set of a string key takes the text as written") {
  const std::vector<ConfigKey> schema = {{"data.std", ConfigType::string, "\"0.3\"", "std"}};
  CHECK(Config::parse("", "f", std::vector<std::string>{"data.std=0.5"}, schema).string("data.std") == "0.5");
  CHECK(Config::parse("", "f", std::vector<std::string>{"data.std=\xc2\xa7"}, schema).string("data.std") == "\xc2\xa7");
}
