#include "envs/mujoco/model.hpp"

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include "common/error.hpp"
#include "common/log.hpp"
#include "envs/mujoco/mjcf.hpp"

namespace tandem::envs::mujoco {
namespace {

std::mutex& load_mutex() {
  static std::mutex m;
  return m;
}

[[noreturn]] void on_error(const char* message) { throw MujocoError(fmt::format("MuJoCo: {}", message)); }

void on_warning(const char* message) {
  constexpr int kShown = 10;
  static std::atomic<int> count{0};
  const int n = count.fetch_add(1, std::memory_order_relaxed);
  if (n < kShown) log::warn("MuJoCo: {}", message);
  if (n == kShown - 1) log::warn("MuJoCo: further warnings of this process are not shown");
}

// MuJoCo's messages span lines ("XML Error: ...\n\nElement 'geom', line 5"): one line, no trailing space.
std::string one_line(const char* text) {
  std::string out;
  for (const char* c = text; *c != '\0'; ++c) {
    const bool space = *c == '\n' || *c == '\r' || *c == '\t' || *c == ' ';
    if (!space) out += *c;
    else if (!out.empty() && out.back() != ' ') out += ' ';
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// MuJoCo 2.2's mjVFS is a struct of fixed arrays (about 2 MB), so it lives on the heap, and the
// buffers mj_makeEmptyFileVFS allocates are freed by mj_deleteVFS.
struct VfsDeleter {
  void operator()(mjVFS* vfs) const {
    mj_deleteVFS(vfs);
    delete vfs;
  }
};

void delete_model(const mjModel* m) { mj_deleteModel(const_cast<mjModel*>(m)); }

}  // namespace

void install_error_hooks() {
  static std::once_flag once;
  std::call_once(once, [] {
    mju_user_error = on_error;
    mju_user_warning = on_warning;
  });
}

ModelPtr load_model(std::string_view name, std::string_view xml) {
  install_error_hooks();
  const std::string file(name);
  if (file.empty() || file.size() >= mjMAXVFSNAME || file.find('/') != std::string::npos)
    fail("MuJoCo model name '{}' is not a plain file name of 1 to {} characters: name it like 'hopper.xml'", file,
         mjMAXVFSNAME - 1);
  const std::lock_guard lock(load_mutex());
  std::unique_ptr<mjVFS, VfsDeleter> vfs(new mjVFS);
  mj_defaultVFS(vfs.get());
  if (mj_makeEmptyFileVFS(vfs.get(), file.c_str(), static_cast<int>(xml.size())) != 0)
    throw MujocoError(fmt::format("MuJoCo could not make the in-memory file '{}' of {} bytes", file, xml.size()));
  const int index = mj_findFileVFS(vfs.get(), file.c_str());
  if (index < 0) throw MujocoError(fmt::format("MuJoCo lost the in-memory file '{}' it just made", file));
  std::memcpy(vfs->filedata[index], xml.data(), xml.size());
  std::array<char, 1024> error{};
  mjModel* m = mj_loadXML(file.c_str(), vfs.get(), error.data(), static_cast<int>(error.size()));
  if (m == nullptr) fail("MuJoCo model '{}' does not load: {}", file, one_line(error.data()));
  return ModelPtr(m, delete_model);
}

ModelPtr shared_model(Body body) {
  struct Builtin {
    const char* file;
    const char* const* xml;
  };
  static const std::array<Builtin, 5> kBuiltin = {{{"hopper.xml", &kHopperXml},
                                                   {"walker2d.xml", &kWalker2dXml},
                                                   {"half_cheetah.xml", &kHalfCheetahXml},
                                                   {"ant.xml", &kAntXml},
                                                   {"humanoid.xml", &kHumanoidXml}}};
  static std::mutex mutex;
  static std::array<std::weak_ptr<const mjModel>, kBuiltin.size()> cache;
  const auto i = static_cast<std::size_t>(body);
  const std::lock_guard lock(mutex);
  if (ModelPtr model = cache[i].lock()) return model;
  ModelPtr model = load_model(kBuiltin[i].file, *kBuiltin[i].xml);
  cache[i] = model;
  return model;
}

DataPtr make_data(const ModelPtr& model) {
  DataPtr data(mj_makeData(model.get()));
  if (!data) throw std::bad_alloc();
  return data;
}

}  // namespace tandem::envs::mujoco
