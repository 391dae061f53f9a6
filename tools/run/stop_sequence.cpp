#include "tools/run/stop_sequence.hpp"

#include <algorithm>

namespace tandem::run {

std::uint64_t ns_from_s(double s) { return static_cast<std::uint64_t>(s * 1e9); }

bool StopSequence::begin(std::uint64_t now_ns, double grace_s) {
  if (!stopping_) {
    stopping_ = true;
    term_at_ns_ = now_ns + ns_from_s(grace_s);
    kill_at_ns_ = term_at_ns_ + ns_from_s(kill_timeout_s_);
    return true;
  }
  term_at_ns_ = std::min(term_at_ns_, now_ns + ns_from_s(grace_s));
  kill_at_ns_ = std::min(kill_at_ns_, term_at_ns_ + ns_from_s(kill_timeout_s_));
  return false;
}

void StopSequence::terminate_now(std::uint64_t now_ns) {
  term_at_ns_ = now_ns;
  kill_at_ns_ = std::min(kill_at_ns_, now_ns + ns_from_s(kill_timeout_s_));
}

void StopSequence::kill_now(std::uint64_t now_ns) { kill_at_ns_ = now_ns; }

StopSequence::Due StopSequence::due(std::uint64_t now_ns) {
  Due d;
  if (!term_sent_ && now_ns >= term_at_ns_) d.term = term_sent_ = true;
  if (!kill_sent_ && now_ns >= kill_at_ns_) d.kill = kill_sent_ = true;
  return d;
}

}  // namespace tandem::run
