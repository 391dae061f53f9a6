// A one-line progress bar on stderr, drawn only when stderr is a terminal (nothing otherwise, so
// logs and pipes stay clean). update() may be called from many threads at once: it redraws at most
// every 100 ms and never blocks a caller (a thread that finds another drawing just returns).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace tandem::data {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label);
  ~ProgressBar();  // erases the bar
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(std::uint64_t done, std::uint64_t total);
  bool visible() const { return enabled_; }

 private:
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
  std::mutex mutex_;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace tandem::data
