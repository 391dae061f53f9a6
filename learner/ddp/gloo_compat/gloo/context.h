// See gloo/rendezvous/store.h here. ProcessGroupGloo.hpp of LibTorch 1.13 needs Context only as an
// incomplete type; LibTorch 2.x's calls context->setTimeout() in an inline member, so the one member
// is declared here as Gloo declares it (defined in LibTorch's library; we never call it ourselves).
#pragma once

#include <chrono>

namespace gloo {
class Context {
 public:
  void setTimeout(std::chrono::milliseconds timeout);
};
}  // namespace gloo
