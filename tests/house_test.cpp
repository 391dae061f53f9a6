// tools/dev/check-house: the arrows docs/ARCHITECTURE.md draws, the 400-line limit, the homes of config
// keys and rules and the docs' references, checked on this tree and shown to catch each kind of
// violation in a scratch tree.
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include "tests/harness.hpp"

using namespace tandem::test;

namespace {

std::string check_house(const std::string& root) { return source_root() + "/tools/dev/check-house " + root; }

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

TEST_CASE("house: each forbidden include, a stray benchmark and an overlong file are reported by name") {
  TempDir tree;
  write(tree, "shm/a.hpp", "#include <torch/torch.h>\n");
  write(tree, "common/b.cpp", "#include \"shm/segment.hpp\"\n");
  write(tree, "common/torch/ok.cpp", "#include <torch/torch.h>\n");
  write(tree, "learner/c.cpp", "#include \"actor/follower.hpp\"\n");
  write(tree, "actor/d.cpp", "  #  include \"learner/trainer.hpp\"\n");
  write(tree, "tools/e.cpp", "#include \"learner/feed/host_feed.hpp\"\n");
  write(tree, "tools/ok.cpp", "#include \"datasets/preload.hpp\"\n");
  write(tree, "bench/ok.cpp", "#include \"learner/feed/host_feed.hpp\"\n");
  write(tree, "bench/i.cpp", "#include \"tools/run/exit_policy.hpp\"\n");
  write(tree, "python/j.cpp", "#include \"tools/data/preload.hpp\"\n");
  write(tree, "tests/ok_test.cpp", "#include \"tools/run/exit_policy.hpp\"\n");
  write(tree, "envs/f.cpp", "#include <ATen/ATen.h>\n#include \"actor/follower.hpp\"\n");
  write(tree, "common/torch/builtin_nets/k.cpp", "#include \"common/torch/models.hpp\"\n");
  write(tree, "common/torch/builtin_nets/ok.cpp", "#include \"common/torch/model_spec.hpp\"\n");
  write(tree, "common/torch/l.cpp", "#include \"common/torch/builtin_nets/networks.hpp\"\n");
  write(tree, "examples/python/bench_m.py", "\n");
  write(tree, "tests/long_test.cpp", std::string(401, '\n'));
  write(tree, "learner/g.cpp", "const int n = config.integer(\"learner.threads\");\n");
  write(tree, "common/settings/ok.cpp", "const int n = config.integer(\"learner.threads\");\n");
  write(tree, "actor/h.cpp", "  if (x) fail(\"config: actor.role = \\\"rollout\\\" needs ...\");\n");
  write(tree, "shm/dataset_check.cpp", "fail(\"config: data.name ...\");\n");
  const CommandResult r = run_command(check_house(tree.path().string()));
  INFO(r.output);
  CHECK(r.status == 1);
  for (const char* expected :
       {"shm/ includes LibTorch: shm/a.hpp", "common/ includes shm/: common/b.cpp",
        "learner/ includes actor/: learner/c.cpp", "actor/ includes learner/: actor/d.cpp",
        "tools/ includes learner/: tools/e.cpp", "bench/ includes tools/: bench/i.cpp",
        "python/ includes tools/: python/j.cpp", "envs/ includes LibTorch: envs/f.cpp",
        "envs/ includes actor/: envs/f.cpp",
        "builtin_nets/ includes common/torch/ beyond model_spec.hpp: common/torch/builtin_nets/k.cpp",
        "includes builtin_nets/: common/torch/l.cpp", "a benchmark outside bench/: examples/python/bench_m.py",
        "tests/long_test.cpp has 401 lines", "config key read by name outside its settings parser: learner/g.cpp:1:",
        "config rule checked outside the settings' checks: actor/h.cpp:1:", "15 violation(s)"}) {
    INFO(expected);
    CHECK(r.output.find(expected) != std::string::npos);
  }
  for (const char* allowed : {"common/torch/ok.cpp", "tools/ok.cpp", "bench/ok.cpp", "tests/ok_test.cpp",
                              "builtin_nets/ok.cpp", "common/settings/ok.cpp", "shm/dataset_check.cpp"}) {
    INFO(allowed);
    CHECK(r.output.find(allowed) == std::string::npos);
  }
}

TEST_CASE("house: a link to a missing file or heading and a named section that no heading begins with are reported") {
  TempDir tree;
  write(tree, "README.md", "# Tandem\n[ok](docs/A.md#real-heading) [gone](docs/B.md) [anchor](docs/A.md#nope)\n");
  write(tree, "docs/A.md", "# Real heading\n\n```\n# not a heading\n```\n**A bold lead.** text\n");
  write(tree, "docs/C.md", "[fenced](A.md#not-a-heading) and A.md, \"A bold lead\" and A.md, \"Real\"\n");
  write(tree, "shm/x.hpp", "// docs/A.md, \"Real heading\"; docs/A.md, \"Not\n// there\"\n");
  const CommandResult r = run_command(check_house(tree.path().string()));
  INFO(r.output);
  CHECK(r.status == 1);
  for (const char* expected :
       {"README.md:2: link to docs/B.md: no docs/B.md",
        "README.md:2: link to docs/A.md#nope: docs/A.md has no heading #nope",
        "docs/C.md:1: link to A.md#not-a-heading", "shm/x.hpp:1: docs/A.md, \"Not there\"", "4 violation(s)"}) {
    INFO(expected);
    CHECK(r.output.find(expected) != std::string::npos);
  }
}
