#include "datasets/progress.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include <cstdio>

#include "common/units.hpp"

namespace tandem::data {

ProgressBar::ProgressBar(std::string label)
    : label_(std::move(label)), enabled_(::isatty(STDERR_FILENO) == 1), start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() {
  if (drawn_) fmt::print(stderr, "\r\033[K");
}

void ProgressBar::update(std::uint64_t done, std::uint64_t total) {
  if (!enabled_) return;
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && done < total && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  drawn_ = true;
  constexpr int kWidth = 30;
  const double frac = total ? double(done) / double(total) : 1.0;
  const int filled = static_cast<int>(frac * kWidth);
  const double secs = std::chrono::duration<double>(now - start_).count();
  fmt::print(stderr, "\r\033[K{} [{}{}] {:3.0f}%  {} / {}  {}/s", label_, std::string(filled, '#'),
             std::string(kWidth - filled, '.'), frac * 100, format_bytes(done), format_bytes(total),
             format_bytes(secs > 0 ? static_cast<std::uint64_t>(done / secs) : 0));
  std::fflush(stderr);
}

}  // namespace tandem::data
