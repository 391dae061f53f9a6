// The LibTorch headers nearly every torch-facing file needs (tensors and their ops, NoGradGuard and
// manual_seed, nn::Module), compiled once per build directory into a GCC precompiled header and
// force-included (-include) into the targets that list torch_pch among their dependencies
// (meson.build beside this file says how and when). Measured on a 2-core Debian machine, the
// developers' and CI's (CPU seconds): a file of tensor code compiles in 4 s with this header
// precompiled, 9 s with all of <torch/torch.h> precompiled (a 630 MB file that each compile loads),
// 16+ s with no precompiled header. So files
// include the headers they use, never <torch/torch.h> or <torch/nn.h> (parsing all of nn costs 6 s):
// a module's own header (<torch/nn/modules/linear.h>, <torch/optim/sgd.h>) adds well under 1 s.
// Each file still includes what it uses: the build is the same without the precompiled header.
// No #pragma once: only ever force-included, and GCC warns about it in a header compiled as the main file.

#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>
