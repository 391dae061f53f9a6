// The metric vocabulary: ProcessMetrics (control_block_format.hpp) field by field, the one list of
// the metric names. Every path that names metrics iterates kMetricFields: metrics.jsonl and
// `tandem status --json` (tools/run/metrics_log.cpp), Prometheus /metrics (tools/run/job_view.cpp),
// Python's tandem.job().report(**metrics) (python/bindings/job.cpp), and the dashboard through
// metric_fields.js, which tools/dashboard/ generates from this table at build time. Code that names
// one field in a string writes metric("loss"): a name the table lacks does not compile.
// An entry is made from its member (TANDEM_METRIC), so a field's name is its member's name; the
// static_asserts below prove that the table lists every word of the record but updated_ns, once and
// in order, each with the kind of its member's type. Constants and pure functions: any thread.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "shm/control_block_format.hpp"

namespace tandem::shm {

enum class MetricKind : std::uint8_t {
  count,     // std::uint64_t, always written
  rl_count,  // std::uint64_t, left out while 0 (an RL counter: 0 in every other job)
  measure,   // double, left out while NaN (not measured)
};

struct MetricField {
  std::string_view name;  // metrics.jsonl's key, report()'s keyword, the dashboard's field
  std::size_t offset;     // of its 8-byte word in ProcessMetrics
  MetricKind kind;
  // Its Prometheus family (tandem_<...>), "counter" or "gauge", and HELP text; an empty family is not
  // exported.
  std::string_view family, type, help;
};

namespace detail {
// The kind, checked against the member's type: a mismatch is not a constant expression.
template <class Member>
consteval MetricKind checked_kind(MetricKind kind) {
  if ((kind == MetricKind::measure) != std::is_same_v<Member, double>) throw "a metric's kind does not match its type";
  return kind;
}
}  // namespace detail

// clang-format off
#define TANDEM_METRIC(member, kind, family, type, help)                                                  \
  MetricField{#member, offsetof(ProcessMetrics, member),                                                 \
              detail::checked_kind<decltype(ProcessMetrics::member)>(MetricKind::kind), family, type, help}
inline constexpr std::array kMetricFields = {
    TANDEM_METRIC(step, count, "tandem_step", "counter", "learner: optimizer steps; actor: evaluations done"),
    TANDEM_METRIC(version, count, "tandem_weight_version", "gauge", "learner: latest published weight version; actor: version evaluated last"),
    TANDEM_METRIC(samples, count, "tandem_samples_total", "counter", "learner: samples trained on; actor: samples in the last evaluation"),
    TANDEM_METRIC(epoch, count, "", "", ""),
    TANDEM_METRIC(samples_per_s, measure, "tandem_samples_per_second", "gauge", "throughput"),
    TANDEM_METRIC(loss, measure, "tandem_loss", "gauge", "learner: training loss; actor: test loss"),
    TANDEM_METRIC(accuracy, measure, "tandem_accuracy", "gauge", "learner: training accuracy; actor: test accuracy"),
    TANDEM_METRIC(seconds, measure, "tandem_step_seconds", "gauge", "learner: seconds of the last step; actor: of the last evaluation"),
    TANDEM_METRIC(lr, measure, "tandem_learning_rate", "gauge", "learner: current learning rate"),
    TANDEM_METRIC(env_steps, rl_count, "tandem_env_steps_total", "counter", "RL: environment steps (learner: trained on; actor: stepped)"),
    TANDEM_METRIC(env_steps_per_s, measure, "tandem_env_steps_per_second", "gauge", "RL: environment steps per second"),
    TANDEM_METRIC(episode_return, measure, "tandem_episode_return", "gauge", "RL: mean return of recently finished episodes"),
    TANDEM_METRIC(episode_length, measure, "tandem_episode_length", "gauge", "RL: mean length of recently finished episodes"),
    TANDEM_METRIC(policy_lag_min, measure, "", "", ""),
    TANDEM_METRIC(policy_lag_avg, measure, "tandem_policy_lag", "gauge", "RL: learner version minus behaviour version, average of the last update"),
    TANDEM_METRIC(policy_lag_max, measure, "tandem_policy_lag_max", "gauge", "RL: the largest policy lag of the last update"),
    TANDEM_METRIC(ring_full_waits, rl_count, "tandem_ring_full_waits_total", "counter", "RL actor: times its experience ring was full"),
    TANDEM_METRIC(allreduce_s, measure, "tandem_allreduce_seconds", "gauge", "data-parallel rank: all-reduce time of the last step"),
    TANDEM_METRIC(exposed_comm_s, measure, "tandem_exposed_comm_seconds", "gauge", "data-parallel rank: communication not hidden behind backward"),
    TANDEM_METRIC(env_share, measure, "tandem_env_share", "gauge", "RL actor: share of its time stepping its envs"),
    TANDEM_METRIC(compute_share, measure, "tandem_compute_share", "gauge", "RL actor: share of its time in its policy; RL learner: in its updates"),
    TANDEM_METRIC(wait_share, measure, "tandem_wait_share", "gauge", "RL actor: share of its time waiting on a full ring; RL learner: for slots"),
    TANDEM_METRIC(policy_loss, measure, "tandem_policy_loss", "gauge", "RL learner: policy loss of the last update"),
    TANDEM_METRIC(value_loss, measure, "tandem_value_loss", "gauge", "RL learner: value loss of the last update"),
    TANDEM_METRIC(entropy, measure, "tandem_policy_entropy", "gauge", "RL learner: mean policy entropy in the last update"),
    TANDEM_METRIC(approx_kl, measure, "tandem_approx_kl", "gauge", "RL learner: mean KL(behaviour || current) estimate over the last update"),
    TANDEM_METRIC(clip_frac, measure, "tandem_clip_fraction", "gauge", "PPO learner: share of samples whose ratio left the clip range"),
    TANDEM_METRIC(explained_var, measure, "tandem_explained_variance", "gauge", "RL learner: how much of the value targets' variance the values explain"),
    TANDEM_METRIC(adv_std, measure, "tandem_advantage_std", "gauge", "RL learner: std of the advantages before normalisation"),
    TANDEM_METRIC(log_std, measure, "tandem_policy_log_std", "gauge", "RL learner: mean log-std of a Gaussian policy"),
    TANDEM_METRIC(return_std, measure, "tandem_return_std", "gauge", "RL learner: running std of the value targets (rl.norm_value)"),
    TANDEM_METRIC(reward_std, measure, "tandem_reward_std", "gauge", "RL learner: running std rewards are divided by (rl.norm_reward)"),
};
#undef TANDEM_METRIC
// clang-format on

// Every word but updated_ns (word 0), once, in the record's order: entry i is word i + 1.
consteval bool covers_every_field() {
  if (offsetof(ProcessMetrics, updated_ns) != 0 || kMetricFields.size() != kMetricWords - 1) return false;
  for (std::size_t i = 0; i < kMetricFields.size(); ++i)
    if (kMetricFields[i].offset != (i + 1) * 8) return false;
  return true;
}
static_assert(covers_every_field(), "kMetricFields must list every ProcessMetrics field but updated_ns, in order");

// The field named `name`; a name the table lacks is a compile error where it is a constant.
consteval std::string_view metric(std::string_view name) {
  for (const MetricField& f : kMetricFields)
    if (f.name == name) return f.name;
  throw "no such metric in shm/metric_fields.hpp";
}
// The field named `name`, or nullptr (a name read at run time, such as report()'s keywords).
constexpr const MetricField* find_metric(std::string_view name) {
  for (const MetricField& f : kMetricFields)
    if (f.name == name) return &f;
  return nullptr;
}

// A count's integer (count, rl_count).
inline std::uint64_t count_of(const ProcessMetrics& m, const MetricField& f) {
  std::uint64_t v = 0;
  std::memcpy(&v, reinterpret_cast<const unsigned char*>(&m) + f.offset, sizeof v);
  return v;
}
// A measure's double.
inline double measure_of(const ProcessMetrics& m, const MetricField& f) {
  double v = 0;
  std::memcpy(&v, reinterpret_cast<const unsigned char*>(&m) + f.offset, sizeof v);
  return v;
}
// Whether the record has a figure for the field: a count always, an RL count above 0, a measure
// that is a finite number.
inline bool has_metric(const ProcessMetrics& m, const MetricField& f) {
  switch (f.kind) {
    case MetricKind::count: return true;
    case MetricKind::rl_count: return count_of(m, f) > 0;
    case MetricKind::measure: return std::isfinite(measure_of(m, f));
  }
  return false;
}
inline void set_count(ProcessMetrics& m, const MetricField& f, std::uint64_t v) {
  std::memcpy(reinterpret_cast<unsigned char*>(&m) + f.offset, &v, sizeof v);
}
inline void set_measure(ProcessMetrics& m, const MetricField& f, double v) {
  std::memcpy(reinterpret_cast<unsigned char*>(&m) + f.offset, &v, sizeof v);
}

}  // namespace tandem::shm
