// Include this instead of <doctest/doctest.h>, and before any other header, in tests that use
// LibTorch: Debian's LibTorch logs through glog, whose CHECK* macros would replace doctest's. This
// includes LibTorch's core first, drops glog's macros, then includes doctest. Only before doctest: in a
// unity build several tests share one file, and GCC may read this header again for a later one (its
// #pragma once is not always kept across unity sources), when the macros are doctest's.
#pragma once

#include <torch/types.h>

#ifndef DOCTEST_LIBRARY_INCLUDED
#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE
#endif

#include <doctest/doctest.h>
