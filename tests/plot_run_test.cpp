// `tandem plot RUN_DIR`: a run dir's metrics.jsonl and eval.jsonl drawn as PNG and SVG. The SVG's
// curves are read back and compared point by point with the rows that were written.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <vector>

#include "tests/harness.hpp"

using namespace tandem;
using namespace tandem::test;

namespace {

struct Point {
  double x, y;
};

// A finished run: learner.0 reports a loss at uneven steps, two evaluators each version's accuracy.
struct RunDir {
  TempDir dir;
  std::vector<Point> losses = {{10, 2.3}, {20, 1.7}, {45, 1.1}, {50, 0.9}, {80, 0.6}, {130, 0.42}, {200, 0.35}};
  RunDir() {
    std::ofstream m(dir / "metrics.jsonl");
    m << R"({"time_s":0.001,"job":"j-1","event":"spawn","process":"learner.0","pid":7,"restarts":0})"
      << "\n";
    for (std::size_t i = 0; i < losses.size(); ++i)
      m << fmt::format(R"({{"time_s":{},"job":"j-1","process":"learner.0","role":"learner","step":{},"version":{},)"
                       R"("samples":0,"epoch":0,"samples_per_s":{},"loss":{},"accuracy":{},"restarts":0}})",
                       i + 1.0, losses[i].x, i + 1, 1000 + 10 * i, losses[i].y, 0.5 + 0.05 * i)
        << "\n";
    m << R"({"time_s":9,"job":"j-1","process":"learner.0","role":"learner","step":210,"loss":)";  // torn by a kill
    std::ofstream e(dir / "eval.jsonl");
    for (int v = 1; v <= 3; ++v)
      for (int actor = 0; actor < 2; ++actor)
        e << fmt::format(R"({{"job":"j-1","actor":{},"version":{},"step":{},"accuracy":{},"loss":{}}})", actor, v,
                         v * 60, 0.6 + 0.1 * v, 1.5 - 0.3 * v)
          << "\n";
  }
};

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The curves of a cairo SVG: every stroked path kCurveWidth (1.75) wide, as its points.
std::vector<std::vector<Point>> curves(const std::string& svg) {
  std::vector<std::vector<Point>> out;
  const std::string path = "<path style=\"fill:none;stroke-width:1.75;";
  for (auto at = svg.find(path); at != std::string::npos; at = svg.find(path, at + 1)) {
    const auto d = svg.find(" d=\"", at);
    REQUIRE(d != std::string::npos);
    std::istringstream ops(svg.substr(d + 4, svg.find('"', d + 4) - (d + 4)));
    std::vector<Point> points;
    for (std::string op; ops >> op;) {
      Point p{};
      if ((op == "M" || op == "L") && ops >> p.x >> p.y) points.push_back(p);
    }
    out.push_back(points);
  }
  return out;
}

// Where p lies between the extremes of `all`, per axis, in [0, 1].
Point normalized(const std::vector<Point>& all, Point p, bool flip_y) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const auto& q : all)
    x0 = std::min(x0, q.x), x1 = std::max(x1, q.x), y0 = std::min(y0, q.y), y1 = std::max(y1, q.y);
  const double y = (p.y - y0) / (y1 - y0);
  return {(p.x - x0) / (x1 - x0), flip_y ? 1 - y : y};
}

}  // namespace

TEST_CASE("tandem plot: the SVG's loss curve passes through every loss of metrics.jsonl, in step order") {
  RunDir run;
  const auto r = run_command(
      fmt::format("'{}' plot '{}' -o '{}'", tandem_binary(), run.dir.path().string(), run.dir.file("c.svg")));
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto drawn = curves(slurp(run.dir / "c.svg"));
  // Loss (train, eval), accuracy (train, eval), throughput: five curves.
  REQUIRE(drawn.size() == 5);
  const std::vector<Point>* loss = nullptr;
  for (const auto& c : drawn)
    if (c.size() == run.losses.size() && !loss) loss = &c;
  REQUIRE(loss != nullptr);
  for (std::size_t i = 0; i < run.losses.size(); ++i) {
    // On the image y grows downwards: the highest loss is at the top.
    const Point want = normalized(run.losses, run.losses[i], false);
    const Point got = normalized(*loss, (*loss)[i], true);
    CAPTURE(i);
    CHECK(got.x == doctest::Approx(want.x).epsilon(0.002));
    CHECK(got.y == doctest::Approx(want.y).epsilon(0.002));
  }
  // Two evaluators of one version are one point: three versions, three points.
  std::size_t three = 0;
  for (const auto& c : drawn) three += c.size() == 3;
  CHECK(three == 2);  // eval loss and eval accuracy
}

TEST_CASE("tandem plot: the PNG has the size asked for and is not blank") {
  RunDir run;
  const auto r = run_command(fmt::format("'{}' plot '{}' -o '{}' --width 900 --height 700", tandem_binary(),
                                         run.dir.path().string(), run.dir.file("c.png")));
  INFO(r.output);
  REQUIRE(r.status == 0);
  const std::string png = slurp(run.dir / "c.png");
  REQUIRE(png.size() > 24);
  CHECK(png.substr(1, 3) == "PNG");
  auto be32 = [&](std::size_t at) {
    return (std::uint32_t(std::uint8_t(png[at])) << 24) | (std::uint32_t(std::uint8_t(png[at + 1])) << 16) |
           (std::uint32_t(std::uint8_t(png[at + 2])) << 8) | std::uint32_t(std::uint8_t(png[at + 3]));
  };
  CHECK(be32(16) == 900);  // IHDR: width, then height
  CHECK(be32(20) == 700);
  CHECK(png.size() > 10000);  // a white 900x700 image compresses to about 3 KB; curves, text and grid do not
}

TEST_CASE("tandem plot: a directory without metrics.jsonl or an unknown image type is one line, and no file") {
  TempDir empty;
  auto r = run_command(fmt::format("'{}' plot '{}'", tandem_binary(), empty.path().string()));
  CHECK(r.status == 1);
  CHECK(r.output.find("has no metrics.jsonl") != std::string::npos);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  CHECK(!std::filesystem::exists(empty / "curves.png"));

  RunDir run;
  r = run_command(
      fmt::format("'{}' plot '{}' -o '{}'", tandem_binary(), run.dir.path().string(), run.dir.file("c.jpg")));
  CHECK(r.status == 1);
  CHECK(r.output.find("use .png or .svg") != std::string::npos);
  CHECK(!std::filesystem::exists(run.dir / "c.jpg"));
}
