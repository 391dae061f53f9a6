// Draws panels (run_curves.hpp) into one image with cairo: a grid of line charts, two per row, each
// with its title, axes, ticks and a legend. One drawing for both surfaces: PNG (image surface) and
// SVG (vector surface), chosen by the file's extension. Each curve is one stroked path of line
// segments, kCurveWidth wide, through its points in order (a test reads them back from the SVG).
#pragma once

#include <filesystem>
#include <vector>

#include "tools/plot/run_curves.hpp"

namespace tandem::plot {

inline constexpr double kCurveWidth = 1.75;

// Throws UserError naming `out` when its extension is neither .png nor .svg, when there is nothing
// to draw, or when it cannot be written.
void draw(const std::vector<Panel>& panels, const std::filesystem::path& out, int width, int height);

}  // namespace tandem::plot
