// tools/check-house: the arrows docs/ARCHITECTURE.md draws, the 400-line limit and the homes of config
// keys and rules, checked on this tree and shown to catch each kind of violation in a scratch tree.
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include "tests/harness.hpp"

using namespace tandem::test;

namespace {

std::string check_house(const std::string& root) { return source_root() + "/tools/check-house " + root; }

void write(const TempDir& dir, const std::string& relative, const std::string& text) {
  std::filesystem::create_directories((dir.path() / relative).parent_path());
  std::ofstream(dir / relative) << text;
}

}  // namespace

TEST_CASE("house: this tree's arrows point one way and no source file is over 400 lines") {
  const CommandResult r = run_command(check_house(source_root()));
  INFO(r.output);
  CHECK(r.status == 0);
}

TEST_CASE("house: each forbidden include and an overlong file is reported by name") {
  TempDir tree;
  write(tree, "shm/a.hpp", "#include <torch/torch.h>\n");
  write(tree, "common/b.cpp", "#include \"shm/segment.hpp\"\n");
  write(tree, "common/torch/ok.cpp", "#include <torch/torch.h>\n");
  write(tree, "learner/c.cpp", "#include \"actor/follower.hpp\"\n");
  write(tree, "actor/d.cpp", "  #  include \"learner/trainer.hpp\"\n");
  write(tree, "tools/e.cpp", "#include \"learner/feed/host_feed.hpp\"\n");
  write(tree, "tools/bench/ok.cpp", "#include \"learner/feed/host_feed.hpp\"\n");
  write(tree, "envs/f.cpp", "#include <ATen/ATen.h>\n#include \"actor/follower.hpp\"\n");
  write(tree, "tests/long_test.cpp", std::string(401, '\n'));
  write(tree, "learner/g.cpp", "const int n = config.integer(\"learner.threads\");\n");
  write(tree, "common/settings/ok.cpp", "const int n = config.integer(\"learner.threads\");\n");
  write(tree, "actor/h.cpp", "  if (x) fail(\"config: actor.role = \\\"rollout\\\" needs ...\");\n");
  write(tree, "shm/dataset_check.cpp", "fail(\"config: data.name ...\");\n");
  const CommandResult r = run_command(check_house(tree.path().string()));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("shm/ includes LibTorch: shm/a.hpp") != std::string::npos);
  CHECK(r.output.find("common/ includes another part: common/b.cpp") != std::string::npos);
  CHECK(r.output.find("learner/ includes actor/: learner/c.cpp") != std::string::npos);
  CHECK(r.output.find("actor/ includes learner/: actor/d.cpp") != std::string::npos);
  CHECK(r.output.find("includes learner/ or actor/: tools/e.cpp") != std::string::npos);
  CHECK(r.output.find("envs/ includes LibTorch: envs/f.cpp") != std::string::npos);
  CHECK(r.output.find("envs/ includes a part other than common/: envs/f.cpp") != std::string::npos);
  CHECK(r.output.find("tests/long_test.cpp has 401 lines") != std::string::npos);
  CHECK(r.output.find("common/torch/ok.cpp") == std::string::npos);
  CHECK(r.output.find("tools/bench/ok.cpp") == std::string::npos);
  CHECK(r.output.find("config key read by name outside its settings parser: learner/g.cpp:1:") != std::string::npos);
  CHECK(r.output.find("config rule checked outside the settings' checks: actor/h.cpp:1:") != std::string::npos);
  CHECK(r.output.find("common/settings/ok.cpp") == std::string::npos);
  CHECK(r.output.find("shm/dataset_check.cpp") == std::string::npos);
  CHECK(r.output.find("10 violation(s)") != std::string::npos);
}
