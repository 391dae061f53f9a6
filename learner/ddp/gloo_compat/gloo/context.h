// See gloo/rendezvous/store.h here: incomplete types are all ProcessGroupGloo.hpp needs of these.
#pragma once

namespace gloo {
class Context;
}
