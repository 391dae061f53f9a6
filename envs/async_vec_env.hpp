// AsyncVecEnv: E envs of one spec stepped by K worker threads the way EnvPool's async mode steps them.
// send() queues a step of any envs not in flight and returns; recv() returns the first batch_size (M)
// envs whose steps finished, in the order they finished, with their ids. The workers never meet: each
// takes the next queued env as soon as it is free, so K threads stay busy while K envs are queued, and
// the caller acts on one batch while the other envs step. VecEnv (vec_env.hpp) is the synchronous
// form: every env each step, all threads meeting at its end.
//
// Per env the results are VecEnv's: same-step auto-reset (episode.hpp; vec_env.hpp's contract), drawn
// from the env's own Rng seeded env_seed(job_seed, actor_index, e), so under the same actions env e's
// trajectory is bit-identical to VecEnv's env e whatever M, K or the order steps finish in. Which envs
// share a batch is not reproducible.
//
// Threads: one owner thread constructs, makes every call and destroys; the K workers only step envs.
//
// Memory and ordering:
//  * Queue: a ring of E slots, each with a sequence number (a bounded MPMC queue after Vyukov's).
//    send() writes each env's action into the env's own row; for queue position p it waits until
//    slot p % E's sequence reads p (acquire: the slot's last reader is done with it), writes the id
//    and stores p + 1 (release); then it releases the semaphore by the count sent. A worker acquires
//    the semaphore (one env queued), claims position p with a fetch_add on the head (relaxed), waits
//    until the slot's sequence reads p + 1 (acquire: the id and the action are visible), reads the
//    id and stores p + E (release), freeing the slot for position p + E. The claim count never
//    passes the sends, so a worker waits at most for the store's visibility; the owner waits only
//    when a worker that claimed the slot E positions back has not read it yet (each env is in
//    flight at most once, so that worker holds the one env still out among the last E sent).
//  * Results: a worker steps env e into the env's own rows, then claims result r (a fetch_add on the
//    result counter), copies the rows into row r % M of batch buffer (r / M) % B and adds 1 to that
//    buffer's count (acq_rel); the worker whose add makes it M wakes the owner under the mutex.
//    recv() of batch b waits for buffer b % B's count to read M (acquire): every row of it is then
//    visible.
//  * Buffer reuse: every result was sent, and an env is sent again only after the batch holding its
//    last result was received, so with b batches received there are at most b * M + E results, in
//    batches up to b - 1 + ceil(E / M). With B = ceil(E / M) + 1 buffers, batch b - 1 (the caller's
//    until the next recv()) is not written again before recv() of batch b returns; that recv()
//    zeroes its count first, and only sends after it let results reach batch b - 1 + B. The result
//    counter's fetch_add is acq_rel so that this holds as happens-before, not only as a count: the
//    counter's modification order links a worker that claims a row of batch b - 1 + B to a worker
//    whose env was sent after that recv(), and so to the owner's reads and the zeroed count.
//  * recv() refuses (UserError) when fewer than M envs are in flight or waiting: it would wait for
//    ever. An env that throws still fills its result row (its contents undefined); recv() rethrows the
//    first such exception once its batch is complete, and every later call is refused.
//  * The destructor stops the workers: each finishes the env it is stepping; queued envs are dropped.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <semaphore>
#include <span>
#include <thread>
#include <vector>

#include "common/thread_annotations.hpp"
#include "envs/env.hpp"
#include "envs/episode.hpp"

namespace tandem::envs {

// One batch as recv() returns it: M envs' ids and their rows, as VecEnv's arrays hold all envs'
// (observations and final_observations M x obs_dim). Valid until the next recv().
struct AsyncBatch {
  std::span<const std::int32_t> env_ids;
  std::span<const float> observations, rewards, final_observations;
  std::span<const std::uint8_t> terminated, truncated;
  std::span<const double> episode_returns;
  std::span<const std::int32_t> episode_lengths;
  int buffer = 0;  // which batch buffer holds it (observe_into)
  bool done(int i) const { return terminated[i] || truncated[i]; }
};

class AsyncVecEnv {
 public:
  // All envs of one spec (else UserError); 1 <= batch_size <= E; 1 <= threads <= E. Nothing is reset
  // or stepped until reset().
  AsyncVecEnv(std::vector<std::unique_ptr<Env>> envs, int batch_size, int threads, std::uint64_t job_seed,
              std::uint32_t actor_index = 0);
  ~AsyncVecEnv();
  AsyncVecEnv(const AsyncVecEnv&) = delete;
  AsyncVecEnv& operator=(const AsyncVecEnv&) = delete;

  const EnvSpec& spec() const { return spec_; }
  int size() const { return static_cast<int>(envs_.size()); }
  int batch_size() const { return batch_size_; }
  int threads() const { return static_cast<int>(workers_.size()); }
  int buffers() const { return static_cast<int>(buffers_.size()); }
  int in_flight() const { return in_flight_; }  // sent (or reset) and not yet received

  // Queues a reset of every env; their first observations come back through recv(), M at a time
  // (rewards 0, no flags). With `job_seed` env e's stream restarts from env_seed(job_seed,
  // actor_index, e), else the streams go on. UserError while any env is in flight.
  void reset(std::optional<std::uint64_t> job_seed = std::nullopt);

  // Queues one step of each env in `env_ids` with its action: discrete, one index per id; continuous,
  // ids.size() x action_dim floats, row-major. UserError, and nothing queued, for an id out of range,
  // in flight or given twice, actions of another count, a discrete index out of range, or a send()
  // before the first reset().
  void send(std::span<const std::int32_t> actions, std::span<const std::int32_t> env_ids);
  void send(std::span<const float> actions, std::span<const std::int32_t> env_ids);

  // Waits up to `limit` for the next batch to complete: true once it has. UserError when it never
  // could (fewer than M envs in flight).
  [[nodiscard]] bool wait_for(std::chrono::nanoseconds limit);
  // Waits for the next batch and returns it; rethrows an env's exception (then the env is unusable).
  AsyncBatch recv();

  // Buffer `buffer` writes its observations into `rows` (M x obs_dim floats, the caller's, alive until
  // the next observe_into of that buffer or the AsyncVecEnv's end) from its next batch on, so a caller
  // hands out each batch's observations uncopied (python/bindings/async_envs.cpp). Only for the
  // buffer of the batch recv() returned last, or any buffer before the first reset(); else UserError.
  void observe_into(int buffer, std::span<float> rows);

 private:
  enum class Work : std::uint8_t { step, reset };
  struct alignas(64) QueueSlot {
    std::atomic<std::uint64_t> sequence{0};  // p: free for position p; p + 1: position p's id written
    std::int32_t env = 0;
  };
  struct alignas(64) Buffer {
    std::atomic<int> filled{0};
    std::vector<std::int32_t> env_ids;
    std::vector<float> own_obs, final_obs, rewards;
    float* obs = nullptr;  // own_obs, or the caller's rows (observe_into)
    std::vector<std::uint8_t> terminated, truncated;
    std::vector<double> episode_returns;
    std::vector<std::int32_t> episode_lengths;
  };

  StepRow env_row(int e);
  void check_usable(const char* call) const;
  void check_ids(std::span<const std::int32_t> env_ids, const char* call);  // marks them in flight
  void enqueue(std::span<const std::int32_t> env_ids, Work work);
  void work();
  void run(int e);
  void publish(int e);  // copies env e's rows into the next result row

  EnvSpec spec_;
  int batch_size_;
  std::uint32_t actor_index_;
  std::vector<std::unique_ptr<Env>> envs_;
  std::vector<Rng> rngs_;
  std::vector<Episode> episodes_;
  // Env e's rows: what its last step wrote, and what it acts on next.
  std::vector<float> obs_, final_obs_, rewards_, actions_;
  std::vector<std::int32_t> action_indices_, episode_lengths_;
  std::vector<std::uint8_t> terminated_, truncated_;
  std::vector<double> episode_returns_;
  std::vector<Work> work_;

  // Owner-only.
  std::vector<std::uint8_t> in_flight_flags_;
  int in_flight_ = 0;
  std::uint64_t tail_ = 0;      // queue positions written
  std::uint64_t received_ = 0;  // batches received
  int last_buffer_ = -1;        // the buffer of the batch received last
  bool started_ = false, broken_ = false;

  std::vector<QueueSlot> queue_;
  std::atomic<std::uint64_t> head_{0};
  std::counting_semaphore<> queued_{0};
  std::atomic<std::uint64_t> results_{0};
  std::vector<std::unique_ptr<Buffer>> buffers_;
  Mutex mutex_;  // guards error_ and the owner's sleep on a batch
  std::condition_variable batch_done_;
  std::exception_ptr error_ GUARDED_BY(mutex_);
  std::atomic<bool> stopping_{false};
  std::vector<std::jthread> workers_;  // last: joined before what they use goes
};

}  // namespace tandem::envs
