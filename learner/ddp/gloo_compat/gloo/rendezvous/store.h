// Declarations standing in for Gloo's headers, which Debian ships only in libgloo-dev (not installed
// with libtorch-dev): LibTorch's ProcessGroupGloo.hpp includes them to declare members we never
// touch. Only gloo::rendezvous::Store must be complete (ProcessGroupGloo::GlooStore derives from it,
// inline, but is constructed only inside LibTorch). Used only where <gloo/context.h> is absent.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace gloo::rendezvous {

class Store {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::seconds(30);
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<char>& data) = 0;
  virtual std::vector<char> get(const std::string& key) = 0;
  virtual void wait(const std::vector<std::string>& keys) = 0;
  virtual void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) { wait(keys); }
};

}  // namespace gloo::rendezvous
