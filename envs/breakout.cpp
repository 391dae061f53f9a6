// Breakout on a 10 x 10 grid, after MinAtar's (Young & Tian 2019, "MinAtar: An Atari-Inspired Testbed
// for Thorough and Reproducible Reinforcement Learning Experiments"): an image-observation env for
// convolutional policies. The rules below are ours, written from MinAtar's description of the game;
// docs/ENVS.md says where they differ from its code.
//
// The grid: bricks fill rows 1-3; the paddle moves along row 9; the ball travels only along
// diagonals. Each step the paddle moves (action 0 stays, 1 left, 2 right; with probability 0.1 the
// previous action repeats, MinAtar's sticky actions), then the ball moves one cell diagonally:
//   * past the left or right wall it stays in the edge column and turns back horizontally;
//   * past the top it stays in row 0 and turns back vertically;
//   * into a brick: the brick goes (+1 reward), the ball stays in its row and turns back vertically;
//   * into row 9: onto the paddle, it stays in row 8 and turns back up; past the paddle's side (the
//     paddle under the column it comes from), it stays in row 8 and column and turns back up and
//     back the way it came; else the episode ends.
// When the last brick goes, rows 1-3 fill again. An episode also ends at 1000 steps (truncated, as
// gymnax's MinAtar port limits it). A reset puts the ball in row 3 at column 0 or 9 (a coin flip),
// heading down and away from that wall, and the paddle at column 4.
// Observation: 4 x 10 x 10 floats, channel-major, 1 where the thing is: paddle, ball, the ball's
// previous cell (its trail: the direction), bricks.
#include <algorithm>
#include <array>

#include "envs/builtin.hpp"

namespace tandem::envs {
namespace {

constexpr int kSize = 10, kChannels = 4;
constexpr int kPaddle = 0, kBall = 1, kTrail = 2, kBrick = 3;
constexpr double kStickyActions = 0.1;

// Directions: up-left, up-right, down-right, down-left.
constexpr std::array<int, 4> kDy{-1, -1, 1, 1}, kDx{-1, 1, 1, -1};
constexpr std::array<int, 4> kFlipX{1, 0, 3, 2}, kFlipY{3, 2, 1, 0};

class Breakout final : public Env {
 public:
  Breakout() {
    spec_.name = "Breakout";
    spec_.obs_dim = kChannels * kSize * kSize;
    spec_.obs_channels = kChannels;
    spec_.obs_height = kSize;
    spec_.num_actions = 3;
    spec_.max_episode_steps = 1000;
    spec_.obs_low.assign(spec_.obs_dim, 0.0f);  // every cell is 0 or 1
    spec_.obs_high.assign(spec_.obs_dim, 1.0f);
  }
  const EnvSpec& spec() const override { return spec_; }

  void reset(Rng& rng, float* obs) override {
    sticky_ = Rng(rng.next());  // the episode's own stream for sticky actions, drawn from the env's
    bricks_ = {};
    fill_bricks();
    paddle_ = 4;
    ball_y_ = 3;
    ball_x_ = rng.uniform(0.0, 1.0) < 0.5 ? 0 : kSize - 1;
    dir_ = ball_x_ == 0 ? 2 : 3;
    last_y_ = ball_y_, last_x_ = ball_x_;
    last_action_ = 0;
    observe(obs);
  }

  StepOut step(ActionRef action, float* obs) override {
    int a = action.index;
    if (sticky_.uniform(0.0, 1.0) < kStickyActions) a = last_action_;
    last_action_ = a;
    if (a == 1) paddle_ = std::max(0, paddle_ - 1);
    if (a == 2) paddle_ = std::min(kSize - 1, paddle_ + 1);

    StepOut out;
    last_y_ = ball_y_, last_x_ = ball_x_;
    int y = ball_y_ + kDy[dir_], x = ball_x_ + kDx[dir_];
    if (x < 0 || x >= kSize) {
      x = std::clamp(x, 0, kSize - 1);
      dir_ = kFlipX[dir_];
    }
    if (y < 0) {
      y = 0;
      dir_ = kFlipY[dir_];
    }
    if (bricks_[y][x]) {
      bricks_[y][x] = 0;
      out.reward = 1.0f;
      y = ball_y_;
      dir_ = kFlipY[dir_];
      if (std::all_of(bricks_.begin(), bricks_.end(), [](const auto& row) {
            return std::all_of(row.begin(), row.end(), [](int b) { return b == 0; });
          }))
        fill_bricks();
    } else if (y == kSize - 1) {
      if (x == paddle_) {
        y = ball_y_;
        dir_ = kFlipY[dir_];
      } else if (ball_x_ == paddle_) {
        y = ball_y_, x = ball_x_;
        dir_ = kFlipY[kFlipX[dir_]];
      } else {
        out.terminated = true;
      }
    }
    ball_y_ = y, ball_x_ = x;
    observe(obs);
    return out;
  }

 private:
  void fill_bricks() {
    for (int row = 1; row <= 3; ++row) bricks_[row].fill(1);
  }
  void observe(float* obs) const {
    std::fill_n(obs, spec_.obs_dim, 0.0f);
    auto at = [obs](int channel, int y, int x) -> float& { return obs[(channel * kSize + y) * kSize + x]; };
    at(kPaddle, kSize - 1, paddle_) = 1.0f;
    at(kBall, ball_y_, ball_x_) = 1.0f;
    at(kTrail, last_y_, last_x_) = 1.0f;
    for (int y = 0; y < kSize; ++y)
      for (int x = 0; x < kSize; ++x)
        if (bricks_[y][x]) at(kBrick, y, x) = 1.0f;
  }

  EnvSpec spec_;
  Rng sticky_{0};
  std::array<std::array<int, kSize>, kSize> bricks_{};
  int paddle_ = 4, ball_y_ = 3, ball_x_ = 0, dir_ = 2, last_y_ = 3, last_x_ = 0, last_action_ = 0;
};

}  // namespace

std::unique_ptr<Env> make_breakout() { return std::make_unique<Breakout>(); }

}  // namespace tandem::envs
