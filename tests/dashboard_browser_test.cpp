// The dashboard in a real browser: headless Chromium opens the page of a live job (the real
// tandem-learner and tandem-actor on a tiny generated dataset) and of a finished run served by
// `tandem dashboard RUN_DIR`, reads the page's DOM (each chart's data-points, one table row per
// process) and saves a screenshot. Skipped (exit 77) only when chromium is not installed.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "common/file_descriptor.hpp"
#include "shm/dataset_cache.hpp"
#include "shm/segment.hpp"
#include "tests/harness.hpp"
#include "tests/tiny_cache.hpp"

namespace {

using namespace tandem;
using tandem::test::TinyCache;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string chromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (fs::exists(p)) return p;
  std::fputs("SKIPPED: no chromium (tools/dev/setup installs Debian's chromium and chromium-driver)\n", stderr);
  std::exit(77);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}


// A job of the real programs, its run dir inside a temporary directory.
struct Job {
  test::TempDir dir;
  std::string id = test::unique_name("dashjob");
  fs::path run_dir = dir / "run";
  test::Child launcher;
  Job(const TinyCache& cache, std::int64_t steps) {
    std::ofstream(dir / "job.toml") << test::tiny_job_config(
        {.job = id,
         .dataset = cache.name,
         .run_keys = fmt::format("actors = 2\nrun_dir = \"{}\"\nmetrics_interval_s = 0.2", run_dir.string()),
         .keys = fmt::format("{}supervised.steps = {}", test::kTinyKeys, steps)});
  }
  void start() {
    const FileDescriptor out(::open((dir / "out.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    launcher = test::spawn_program({test::tandem_binary(), "run", (dir / "job.toml").string()}, out.get());
  }
  std::string output() const { return slurp(dir / "out.txt"); }
};

// What a headless Chromium sees of `url` after the page has had `budget_ms` of (virtual) time.
struct PageView {
  std::string dom;
  int points(const std::string& chart) const {
    std::smatch m;
    const std::regex re("data-chart=\"" + chart + "\" data-points=\"([0-9]+)\"");
    return std::regex_search(dom, m, re) ? std::stoi(m[1]) : -1;
  }
  bool row(const std::string& process) const {
    return dom.find("data-process=\"" + process + "\"") != std::string::npos;
  }
};

std::string browser_flags(const test::TempDir& dir) {
  // Its profile in the test's directory, and no /dev/shm (which the tests must leave clean).
  return fmt::format(
      "--headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars "
      "--no-first-run --user-data-dir='{}' --virtual-time-budget=4000",
      (dir / "chromium-profile").string());
}

PageView open_page(const test::TempDir& dir, const std::string& url) {
  const auto r = test::run_command(
      fmt::format("timeout 90 '{}' {} --dump-dom '{}' 2>/dev/null", chromium(), browser_flags(dir), url));
  return {r.output};
}

// Opens the page until the curves hold points and the table lists the learner and both actors, then
// saves a screenshot; fails when either never happens.
void check_page(const test::TempDir& dir, const std::string& url, const fs::path& screenshot) {
  PageView page;
  const auto end = std::chrono::steady_clock::now() + 60s;
  do {
    page = open_page(dir, url);
    if (page.points("loss") > 0 && page.points("accuracy") > 0 && page.row("learner.0") && page.row("actor.0") &&
        page.row("actor.1"))
      break;
  } while (std::chrono::steady_clock::now() < end);
  INFO(page.dom.substr(0, 4000));
  CHECK(page.points("loss") > 0);
  CHECK(page.points("accuracy") > 0);
  CHECK(page.row("learner.0"));
  CHECK(page.row("actor.0"));
  CHECK(page.row("actor.1"));
  const auto r = test::run_command(fmt::format("timeout 90 '{}' {} --window-size=1280,900 --screenshot='{}' '{}' 2>&1",
                                               chromium(), browser_flags(dir), screenshot.string(), url));
  INFO(r.output);
  const std::string png = slurp(screenshot);
  CHECK(png.substr(0, 4) == "\x89PNG");
  CHECK(png.size() > 20000);  // curves and a table, not a blank page
}

}  // namespace

TEST_CASE("dashboard: a live job's page in Chromium shows curves with points and the learner and actors" *
          doctest::timeout(240)) {
  chromium();
  TinyCache cache("dash");
  Job job(cache, 1000000);
  job.start();
  // The launcher prints the URL and writes it where `tandem status` finds it.
  std::string url;
  for (auto end = std::chrono::steady_clock::now() + 60s; url.empty() && std::chrono::steady_clock::now() < end;
       std::this_thread::sleep_for(100ms)) {
    std::ifstream in(job.run_dir / "dashboard.url");
    std::getline(in, url);
  }
  INFO(job.output());
  REQUIRE(url.starts_with("http://127.0.0.1:"));
  CHECK(job.output().find("dashboard on " + url) != std::string::npos);
  const auto status = test::run_command(fmt::format("'{}' status {}", test::tandem_binary(), job.id));
  CHECK(status.output.find("dashboard " + url) != std::string::npos);
  const auto json = test::run_command(fmt::format("'{}' status --json {}", test::tandem_binary(), job.id));
  REQUIRE(json.status == 0);
  const auto state = nlohmann::json::parse(json.output);
  CHECK(state["dashboard"] == url);
  CHECK(state["processes"].size() == 3);

  check_page(job.dir, url, job.dir / "live.png");

  job.launcher.kill(SIGINT);
  CHECK(job.launcher.wait() == 130);
  for (const auto& s : shm::list_segments()) CHECK(s.name.find(job.id) == std::string::npos);
}

TEST_CASE("dashboard: `tandem dashboard RUN_DIR` serves a finished run's curves and processes to Chromium" *
          doctest::timeout(240)) {
  chromium();
  TinyCache cache("dash");
  Job job(cache, 120);
  job.start();
  {
    INFO(job.output());
    REQUIRE(job.launcher.wait() == 0);
  }
  const FileDescriptor out(::open((job.dir / "serve.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  test::Child server = test::spawn_program({test::tandem_binary(), "dashboard", job.run_dir.string()}, out.get());
  std::smatch m;
  std::string said;
  const std::regex re("on (http://127\\.0\\.0\\.1:[0-9]+/)");
  for (auto end = std::chrono::steady_clock::now() + 20s;
       !std::regex_search(said = slurp(job.dir / "serve.txt"), m, re) && std::chrono::steady_clock::now() < end;)
    std::this_thread::sleep_for(50ms);
  INFO(said);
  REQUIRE(!m.empty());

  check_page(job.dir, m[1].str(), job.dir / "finished.png");

  server.kill(SIGTERM);
  CHECK(server.wait() == 0);
}
