// MuJoCo models and data as RAII handles, loaded from MJCF text in memory.
//
// Errors: a model that does not compile is a UserError of one line naming the model and quoting
// MuJoCo's own message. MuJoCo's fatal-error hook (mju_user_error), which would otherwise exit() the
// process, and its warning hook (mju_user_warning), which would otherwise write MUJOCO_LOG.TXT into
// the working directory, are replaced the first time a model loads: a fatal error becomes a
// MujocoError exception thrown from inside the MuJoCo call (the mjData it was working on is then in
// an unknown state: its env must not be stepped again), and a warning becomes one log line (the
// first 10 per process; MuJoCo itself reports each kind of warning once per mjData until a reset).
//
// Threads: load_model() and shared_model() from any thread (loads are serialised: MuJoCo's compiler is
// not documented as thread-safe). A const mjModel is read-only and may be shared by envs on any
// threads; an mjData belongs to one thread at a time.
#pragma once

#include <mujoco/mujoco.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tandem::envs::mujoco {

// What mju_user_error was called with, thrown out of the MuJoCo call that failed.
class MujocoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct DataDeleter {
  void operator()(mjData* d) const { mj_deleteData(d); }
};
using ModelPtr = std::shared_ptr<const mjModel>;  // deleted with mj_deleteModel by the last owner
using DataPtr = std::unique_ptr<mjData, DataDeleter>;

// Compiles MJCF `xml` as the file `name` (what errors call it; MuJoCo sees it in a virtual file
// system holding only this file, so a model that includes other files fails to load).
ModelPtr load_model(std::string_view name, std::string_view xml);

// The model of a built-in body, compiled once and shared while any env holds it.
enum class Body { hopper, walker2d, half_cheetah, ant, humanoid };
ModelPtr shared_model(Body body);

DataPtr make_data(const ModelPtr& model);

// Installs the hooks described above; load_model() calls it. Idempotent, any thread.
void install_error_hooks();

}  // namespace tandem::envs::mujoco
