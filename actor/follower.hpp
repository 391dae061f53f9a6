// Follower: an actor's model kept at the newest weights of /tandem.<job>.weights.
//
// Contract
//  * One thread (the actor's) owns a Follower; it is not thread-safe.
//  * The constructor attaches (read-only payload, see weight_slab.hpp) and checks the model
//    signature: a different architecture is a one-line UserError naming both signatures.
//  * has_new() is one acquire load of `latest`: cheap enough to call before every action.
//  * update() loads the newest version if it is newer than the one running and returns it:
//      CPU model, LoadMode::copy       lease, one memcpy (or bf16 -> float32) into the model, release
//      CPU model, LoadMode::zero_copy  the model's tensors point into the leased slot, which stays
//                                      leased until the next update, through a copy-on-write mapping
//                                      of it (shm::PrivateSlotMapping): an in-place write (BatchNorm
//                                      statistics in training mode) changes this process's copy of
//                                      the touched pages, never the slab; needs a float32 (not bf16) slab
//      CUDA model                      the slot span is cudaHostRegister'ed (read-only) once; lease, H2D
//                                      on the follower's stream, wait for it, release
//      CUDA model on a GPU with a      a device slab <slab>.cuda[.k] (shm/weight_slab.hpp) is mapped once
//        device slab of the learner's, (CUDA IPC, closed on destruction); lease, D2D (GPU to GPU over
//        or with peer access to one    NVLink where the GPUs differ) on the follower's stream, wait for
//                                      it, release: no host memory on the way. Chosen at construction:
//                                      the slab on our GPU, else one on a peer of ours; a CPU model, or
//                                      a GPU with no peer path, follows the host slab.
//                                      The learner's GPU memory dies with it: a copy counts only if the learner was
//                                      still alive after it finished; once it has exited, the follower
//                                      drops the mapping and follows the host slab (which outlives it).
//    It blocks the calling thread for that copy only; it never makes the learner wait.
//  * version() is the version the model runs (0: its own initial weights), for tagging trajectories.
//  * update() first adopts tensors the module rebound since construction (FlatParams::adopt_rebound,
//    keeping the loaded values): a model converted to another dtype or device is a UserError naming
//    the tensor, never a model that silently stops receiving versions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/cuda.hpp"
#include "common/cuda_ipc.hpp"
#include "common/torch/flat_params.hpp"
#include "shm/weight_slab.hpp"

namespace tandem::actor {

enum class LoadMode { copy, zero_copy };

struct FollowerOptions {
  LoadMode mode = LoadMode::copy;
  std::string model = "model";  // this actor's model, named in signature errors
};

class Follower {
 public:
  Follower(const std::string& slab_name, FlatParams& params, FollowerOptions options = {});

  bool has_new() const { return active().latest_version() > version_; }
  std::optional<std::uint64_t> update();

  std::uint64_t version() const { return version_; }
  std::uint64_t step() const { return step_; }
  double last_load_ms() const { return last_load_ms_; }
  const shm::WeightSlabReader& reader() const { return active(); }  // the slab versions come from
  bool via_device_slab() const { return device_reader_.has_value(); }
  int device_slab_gpu() const { return device_slab_gpu_; }  // the GPU whose device slab it reads; -1: none

 private:
  void attach_device_slab(const std::string& slab_name, int device);
  bool exporter_alive() const;
  void fall_back_to_host_slab();
  shm::WeightSlabReader& active() { return device_reader_ ? *device_reader_ : reader_; }
  const shm::WeightSlabReader& active() const { return device_reader_ ? *device_reader_ : reader_; }
  void load_copy(const shm::ReadLease& lease);
  void load_device(const shm::ReadLease& lease);

  shm::WeightSlabReader reader_;
  FlatParams& params_;
  FollowerOptions options_;
  bool bf16_ = false;
  std::uint64_t version_ = 0, step_ = 0;
  double last_load_ms_ = 0;
  shm::ReadLease held_;  // zero-copy: the slot the model runs on
  cuda::HostRegistration registration_;
  cuda::Stream stream_;
  cuda::IpcMapping mapping_;                            // the device slab's slots, on this GPU
  std::optional<shm::WeightSlabReader> device_reader_;  // set: versions come from a device slab
  int device_slab_gpu_ = -1;
};

}  // namespace tandem::actor
