// GAE and V-trace (learner/rl/returns.hpp) against tests/rl_returns_reference.py, an independent numpy
// computation of the papers' formulas as explicit sums, on random steps with terminations,
// truncations and both at once; and the tensor-op forms a GPU runs against the loops.
#include "tests/torch_doctest.hpp"

#include <torch/types.h>
#include <torch/utils.h>

#include <fstream>
#include <sstream>

#include "learner/rl/returns.hpp"
#include "tests/harness.hpp"

using namespace tandem;
using namespace tandem::test;

namespace {

struct Case {
  double gamma, lambda, rho_bar, c_bar;
  std::uint64_t seed;
};

void write_rows(std::ofstream& out, const torch::Tensor& t) {
  const torch::Tensor d = t.to(torch::kFloat64).contiguous();
  for (std::int64_t i = 0; i < d.size(0); ++i) {
    for (std::int64_t j = 0; j < d.size(1); ++j) out << (j ? " " : "") << d[i][j].item<double>();
    out << "\n";
  }
}

torch::Tensor read_block(std::istringstream& in, std::int64_t T, std::int64_t N) {
  torch::Tensor t = torch::empty({T, N}, torch::kFloat64);
  for (std::int64_t i = 0; i < T * N; ++i) in >> t.data_ptr<double>()[i];
  return t;
}

void check_against_reference(const Case& c) {
  const std::int64_t T = 16, N = 6;
  torch::manual_seed(c.seed);
  rl::EpisodeSteps s;
  s.rewards = torch::randn({T, N}, torch::kFloat64);
  s.values = torch::randn({T + 1, N}, torch::kFloat64);
  s.final_values = torch::randn({T, N}, torch::kFloat64);
  s.terminated = (torch::rand({T, N}) < 0.12).to(torch::kUInt8);
  s.truncated = (torch::rand({T, N}) < 0.12).to(torch::kUInt8);
  const torch::Tensor log_rhos = 0.7 * torch::randn({T, N}, torch::kFloat64);
  // Every kind of end, whatever the draw: both flags at once, and a truncation alone.
  s.terminated[3][0] = 1, s.truncated[3][0] = 1, s.terminated[5][1] = 0, s.truncated[5][1] = 1;
  REQUIRE((s.terminated * s.truncated).sum().item<int>() > 0);
  REQUIRE((s.truncated * (1 - s.terminated)).sum().item<int>() > 0);

  TempDir dir;
  {
    std::ofstream out(dir.file("in.txt"));
    out.precision(17);
    out << T << " " << N << " " << c.gamma << " " << c.lambda << " " << c.rho_bar << " " << c.c_bar << "\n";
    for (const auto& t : {s.rewards, s.values, s.final_values, s.terminated, s.truncated, log_rhos}) write_rows(out, t);
  }
  const CommandResult r = run_command(python_with_numpy() + " " + source_root() + "/tests/rl_returns_reference.py " +
                                      dir.file("in.txt"));
  REQUIRE_MESSAGE(r.status == 0, r.output);
  std::istringstream in(r.output);
  const torch::Tensor adv = read_block(in, T, N), ret = read_block(in, T, N), vs = read_block(in, T, N),
                      pg = read_block(in, T, N);
  REQUIRE_FALSE(in.fail());

  const rl::GaeResult g = rl::gae(s, c.gamma, c.lambda);
  const rl::VtraceResult v = rl::vtrace(s, log_rhos, c.gamma, c.rho_bar, c.c_bar);
  CHECK((g.advantages - adv).abs().max().item<double>() < 1e-6);
  CHECK((g.returns - ret).abs().max().item<double>() < 1e-6);
  CHECK((v.vs - vs).abs().max().item<double>() < 1e-6);
  CHECK((v.pg_advantages - pg).abs().max().item<double>() < 1e-6);

  // The tensor-op forms (what a GPU runs), here on the CPU, against the loops.
  const rl::GaeResult gc = rl::gae_by_columns(s, c.gamma, c.lambda);
  const rl::VtraceResult vc = rl::vtrace_by_columns(s, log_rhos, c.gamma, c.rho_bar, c.c_bar);
  CHECK((gc.advantages - g.advantages).abs().max().item<double>() < 1e-12);
  CHECK((gc.returns - g.returns).abs().max().item<double>() < 1e-12);
  CHECK((vc.vs - v.vs).abs().max().item<double>() < 1e-12);
  CHECK((vc.pg_advantages - v.pg_advantages).abs().max().item<double>() < 1e-12);
}

}  // namespace

TEST_CASE(
    "rl returns: GAE and V-trace match the papers' formulas in numpy to 1e-6, across ends of episodes, "
    "as loops and as tensor ops") {
  for (const Case& c : {Case{0.99, 0.95, 1.0, 1.0, 1}, Case{0.9, 1.0, 0.5, 2.0, 2}, Case{0.97, 0.0, 3.0, 0.3, 3},
                        Case{1.0, 0.8, 1.0, 1.0, 4}}) {
    CAPTURE(c.seed);
    check_against_reference(c);
  }
}

TEST_CASE(
    "rl returns: a terminated step bootstraps from 0, a truncated one from its final value, others from the next") {
  rl::EpisodeSteps s;
  s.rewards = torch::tensor({1.0f, 1.0f, 1.0f}).view({3, 1});
  s.values = torch::tensor({0.0f, 0.0f, 0.0f, 10.0f}).view({4, 1});
  s.final_values = torch::tensor({0.0f, 5.0f, 0.0f}).view({3, 1});
  s.terminated = torch::tensor({1, 0, 0}, torch::kUInt8).view({3, 1});
  s.truncated = torch::tensor({1, 1, 0}, torch::kUInt8).view({3, 1});  // step 0: both, termination wins
  const rl::GaeResult g = rl::gae(s, 0.5, 1.0);
  CHECK(g.advantages[0][0].item<float>() == doctest::Approx(1.0));        // 1 + 0.5 * 0
  CHECK(g.advantages[1][0].item<float>() == doctest::Approx(1.0 + 2.5));  // 1 + 0.5 * V(final) = 5
  CHECK(g.advantages[2][0].item<float>() == doctest::Approx(1.0 + 5.0));  // 1 + 0.5 * V(x_T) = 10
  CHECK((g.returns.scalar_type() == torch::kFloat32));
  // On-policy (rho = c = 1) V-trace with lambda = 1 is the n-step return: here the same targets.
  const rl::VtraceResult v = rl::vtrace(s, torch::zeros({3, 1}), 0.5, 1.0, 1.0);
  CHECK(torch::allclose(v.vs, g.returns));
  CHECK(torch::allclose(v.pg_advantages, g.advantages));
}
