#include "envs/async_vec_env.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace tandem::envs {

AsyncVecEnv::AsyncVecEnv(std::vector<std::unique_ptr<Env>> envs, int batch_size, int threads, std::uint64_t job_seed,
                         std::uint32_t actor_index)
    : batch_size_(batch_size), actor_index_(actor_index), envs_(std::move(envs)), queue_(envs_.size()) {
  if (envs_.empty()) fail("an async vectorised env needs at least one env: set num_envs >= 1");
  if (batch_size < 1 || batch_size > size())
    fail("batch_size={} is out of range for {} envs: use 1..{}", batch_size, size(), size());
  if (threads < 1 || threads > size())
    fail("an async vectorised env of {} envs steps them on 1 to {} threads, not {}", size(), size(), threads);
  spec_ = envs_[0]->spec();
  for (const auto& env : envs_) require_spaces(env->spec(), spec_);
  const std::size_t n = envs_.size(), dim = static_cast<std::size_t>(spec_.obs_dim);
  const std::size_t m = static_cast<std::size_t>(batch_size);
  for (std::size_t e = 0; e < n; ++e) rngs_.emplace_back(env_seed(job_seed, actor_index, e));
  episodes_.assign(n, Episode{});
  obs_.assign(n * dim, 0.0f);
  final_obs_.assign(n * dim, 0.0f);
  rewards_.assign(n, 0.0f);
  actions_.assign(n * static_cast<std::size_t>(std::max(spec_.action_dim, 0)), 0.0f);
  action_indices_.assign(n, 0);
  episode_lengths_.assign(n, 0);
  terminated_.assign(n, 0);
  truncated_.assign(n, 0);
  episode_returns_.assign(n, 0.0);
  work_.assign(n, Work::step);
  for (std::size_t p = 0; p < n; ++p) queue_[p].sequence.store(p, std::memory_order_relaxed);
  in_flight_flags_.assign(n, 0);
  const std::size_t buffers = (n + m - 1) / m + 1;  // ceil(E / M) + 1: the header's reuse argument
  for (std::size_t b = 0; b < buffers; ++b) {
    auto buffer = std::make_unique<Buffer>();
    buffer->env_ids.assign(m, 0);
    buffer->own_obs.assign(m * dim, 0.0f);
    buffer->obs = buffer->own_obs.data();
    buffer->final_obs.assign(m * dim, 0.0f);
    buffer->rewards.assign(m, 0.0f);
    buffer->terminated.assign(m, 0);
    buffer->truncated.assign(m, 0);
    buffer->episode_returns.assign(m, 0.0);
    buffer->episode_lengths.assign(m, 0);
    buffers_.push_back(std::move(buffer));
  }
  workers_.reserve(static_cast<std::size_t>(threads));
  try {
    for (int k = 0; k < threads; ++k) workers_.emplace_back([this] { work(); });
  } catch (...) {
    stopping_.store(true, std::memory_order_release);
    queued_.release(static_cast<std::ptrdiff_t>(workers_.size()));
    workers_.clear();
    throw;
  }
}

AsyncVecEnv::~AsyncVecEnv() {
  stopping_.store(true, std::memory_order_release);
  queued_.release(static_cast<std::ptrdiff_t>(workers_.size()));
  workers_.clear();  // joins
}

// --- the owner's calls

void AsyncVecEnv::reset(std::optional<std::uint64_t> job_seed) {
  check_usable("reset()");
  if (in_flight_ > 0)
    fail("reset() with {} envs still stepping: recv() their batches first ({} envs, batch_size {})", in_flight_, size(),
         batch_size_);
  if (job_seed)
    for (int e = 0; e < size(); ++e) rngs_[e] = Rng(env_seed(*job_seed, actor_index_, e));
  std::vector<std::int32_t> all(envs_.size());
  for (int e = 0; e < size(); ++e) all[e] = e;
  started_ = true;
  check_ids(all, "reset()");
  enqueue(all, Work::reset);
}

void AsyncVecEnv::send(std::span<const std::int32_t> actions, std::span<const std::int32_t> env_ids) {
  check_usable("send()");
  if (!spec_.discrete())
    fail("send(): env '{}' takes {} continuous action values an env, not an index", spec_.name, spec_.action_dim);
  if (actions.size() != env_ids.size())
    fail("send(): {} actions for {} env ids: pass one action an env", actions.size(), env_ids.size());
  for (std::int32_t a : actions)
    if (a < 0 || a >= spec_.num_actions)
      fail("send(): action {} is out of range for env '{}': use 0..{}", a, spec_.name, spec_.num_actions - 1);
  check_ids(env_ids, "send()");
  for (std::size_t i = 0; i < env_ids.size(); ++i) action_indices_[env_ids[i]] = actions[i];
  enqueue(env_ids, Work::step);
}

void AsyncVecEnv::send(std::span<const float> actions, std::span<const std::int32_t> env_ids) {
  check_usable("send()");
  const std::size_t dim = static_cast<std::size_t>(spec_.action_dim);
  if (spec_.discrete()) fail("send(): env '{}' takes an action index an env, not values", spec_.name);
  if (actions.size() != env_ids.size() * dim)
    fail("send(): {} action values for {} env ids of {} each: pass {}", actions.size(), env_ids.size(), dim,
         env_ids.size() * dim);
  check_ids(env_ids, "send()");
  for (std::size_t i = 0; i < env_ids.size(); ++i)
    std::copy_n(&actions[i * dim], dim, &actions_[static_cast<std::size_t>(env_ids[i]) * dim]);
  enqueue(env_ids, Work::step);
}

bool AsyncVecEnv::wait_for(std::chrono::nanoseconds limit) {
  check_usable("recv()");
  if (in_flight_ < batch_size_)
    fail("recv() would wait for ever: {} envs are stepping, fewer than batch_size {}: send() more first", in_flight_,
         batch_size_);
  Buffer& next = *buffers_[received_ % buffers_.size()];
  MutexLock lock(mutex_);
  return lock.wait_for(batch_done_, limit, [&] { return next.filled.load(std::memory_order_acquire) == batch_size_; });
}

AsyncBatch AsyncVecEnv::recv() {
  while (!wait_for(std::chrono::seconds(1))) {
  }
  const int index = static_cast<int>(received_ % buffers_.size());
  Buffer& buffer = *buffers_[static_cast<std::size_t>(index)];
  if (last_buffer_ >= 0) buffers_[static_cast<std::size_t>(last_buffer_)]->filled.store(0, std::memory_order_relaxed);
  last_buffer_ = index;
  ++received_;
  in_flight_ -= batch_size_;
  for (std::int32_t e : buffer.env_ids) in_flight_flags_[e] = 0;
  {
    MutexLock lock(mutex_);
    if (error_) {
      broken_ = true;
      std::rethrow_exception(error_);
    }
  }
  const std::size_t rows = buffer.env_ids.size() * static_cast<std::size_t>(spec_.obs_dim);
  return AsyncBatch{buffer.env_ids,         {buffer.obs, rows},     buffer.rewards,
                    buffer.final_obs,       buffer.terminated,      buffer.truncated,
                    buffer.episode_returns, buffer.episode_lengths, index};
}

void AsyncVecEnv::observe_into(int buffer, std::span<float> rows) {
  if (buffer < 0 || buffer >= buffers())
    fail("observe_into: buffer {} is out of range: use 0..{}", buffer, buffers() - 1);
  if (started_ && buffer != last_buffer_)
    fail("observe_into: buffer {} may be in use: pass the buffer of the batch recv() returned last ({})", buffer,
         last_buffer_);
  const std::size_t want = static_cast<std::size_t>(batch_size_) * static_cast<std::size_t>(spec_.obs_dim);
  if (rows.size() != want)
    fail("observe_into: {} floats for a batch of {} observations of {}: pass {}", rows.size(), batch_size_,
         spec_.obs_dim, want);
  buffers_[static_cast<std::size_t>(buffer)]->obs = rows.data();
}

void AsyncVecEnv::check_usable(const char* call) const {
  if (broken_) fail("{}: an env raised in an earlier step and this env cannot step again: make a new one", call);
}

void AsyncVecEnv::check_ids(std::span<const std::int32_t> env_ids, const char* call) {
  if (!started_) fail("{} before reset(): call reset() first and recv() its batches", call);
  for (std::size_t i = 0; i < env_ids.size(); ++i) {
    const std::int32_t e = env_ids[i];
    const char* why = e < 0 || e >= size() ? "is out of range" : in_flight_flags_[e] ? "is still in flight" : nullptr;
    if (why == nullptr) {
      in_flight_flags_[e] = 1;
      continue;
    }
    for (std::size_t j = 0; j < i; ++j) in_flight_flags_[env_ids[j]] = 0;  // nothing is queued after all
    fail("{}: env id {} {}: send each env of 0..{} once, then again after recv() returns it", call, e, why, size() - 1);
  }
}

void AsyncVecEnv::enqueue(std::span<const std::int32_t> env_ids, Work work) {
  for (std::int32_t e : env_ids) {
    work_[e] = work;
    QueueSlot& slot = queue_[tail_ % queue_.size()];
    while (slot.sequence.load(std::memory_order_acquire) != tail_) std::this_thread::yield();  // read
    slot.env = e;
    slot.sequence.store(tail_ + 1, std::memory_order_release);
    ++tail_;
  }
  in_flight_ += static_cast<int>(env_ids.size());
  queued_.release(static_cast<std::ptrdiff_t>(env_ids.size()));
}

// --- the workers

void AsyncVecEnv::work() {
  for (;;) {
    queued_.acquire();
    if (stopping_.load(std::memory_order_acquire)) return;
    const std::uint64_t position = head_.fetch_add(1, std::memory_order_relaxed);
    QueueSlot& slot = queue_[position % queue_.size()];
    while (slot.sequence.load(std::memory_order_acquire) != position + 1) std::this_thread::yield();
    const int e = slot.env;
    slot.sequence.store(position + queue_.size(), std::memory_order_release);  // free for position + E
    run(e);
  }
}

StepRow AsyncVecEnv::env_row(int e) {
  const std::size_t dim = static_cast<std::size_t>(spec_.obs_dim);
  return {&obs_[e * dim], &final_obs_[e * dim], &rewards_[e],        &terminated_[e],
          &truncated_[e], &episode_returns_[e], &episode_lengths_[e]};
}

void AsyncVecEnv::run(int e) {
  try {
    if (work_[e] == Work::reset) {
      reset_row(*envs_[e], rngs_[e], episodes_[e], env_row(e));
    } else {
      const ActionRef action{action_indices_[e], spec_.discrete() ? nullptr : &actions_[e * spec_.action_dim]};
      step_with_autoreset(*envs_[e], rngs_[e], spec_.max_episode_steps, episodes_[e], action, env_row(e));
    }
  } catch (...) {
    MutexLock lock(mutex_);
    if (!error_) error_ = std::current_exception();
  }
  publish(e);
}

void AsyncVecEnv::publish(int e) {
  const std::uint64_t result = results_.fetch_add(1, std::memory_order_acq_rel);  // the header says why
  const auto m = static_cast<std::uint64_t>(batch_size_);
  Buffer& buffer = *buffers_[(result / m) % buffers_.size()];
  const auto row = static_cast<std::size_t>(result % m);
  const std::size_t dim = static_cast<std::size_t>(spec_.obs_dim);
  const std::size_t env = static_cast<std::size_t>(e);
  buffer.env_ids[row] = e;
  std::copy_n(&obs_[env * dim], dim, buffer.obs + row * dim);
  buffer.rewards[row] = rewards_[env];
  buffer.terminated[row] = terminated_[env];
  buffer.truncated[row] = truncated_[env];
  if (terminated_[env] || truncated_[env]) {
    std::copy_n(&final_obs_[env * dim], dim, &buffer.final_obs[row * dim]);
    buffer.episode_returns[row] = episode_returns_[env];
    buffer.episode_lengths[row] = episode_lengths_[env];
  }
  if (buffer.filled.fetch_add(1, std::memory_order_acq_rel) + 1 == batch_size_) {
    MutexLock lock(mutex_);  // the owner checks the count under it before it sleeps
    batch_done_.notify_one();
  }
}

}  // namespace tandem::envs
