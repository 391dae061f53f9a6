// Include this instead of <doctest/doctest.h>, and before any other header, in tests that use
// LibTorch: Debian's LibTorch logs through glog, whose CHECK* macros would replace doctest's. This
// includes LibTorch's core first, drops glog's macros, then includes doctest.
#pragma once

#include <torch/types.h>

#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE

#include <doctest/doctest.h>
