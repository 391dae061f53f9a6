// The dashboard page: index.html with its CSS, its script and the uPlot library from
// node_modules inlined, embedded into the binary at build time (embed.py).
#pragma once

#include <string_view>

namespace tandem::dashboard {

std::string_view page();

}  // namespace tandem::dashboard
