// tandem plot RUN_DIR [-o FILE.png|FILE.svg] [--width W] [--height H]: a run's curves as an image.
#include <cairo.h>
#include <fmt/format.h>
#include <fontconfig/fontconfig.h>

#include <filesystem>

#include "common/cli_actions.hpp"
#include "tools/commands.hpp"
#include "tools/plot/draw.hpp"
#include "tools/plot/run_curves.hpp"

namespace tandem::tools {

void add_plot_commands(CLI::App& app) {
  auto* cmd = app.add_subcommand("plot", "draw a run's curves (the dashboard's charts) as a PNG or SVG file");
  static std::string run_dir, out;
  static int width = 1400, height = 0;
  cmd->add_option("run_dir", run_dir, "the run directory, e.g. runs/fmnist-3f9a")->required();
  cmd->add_option("-o,--output", out, "FILE.png or FILE.svg; default RUN_DIR/curves.png");
  cmd->add_option("--width", width, "pixels")->check(CLI::Range(200, 10000));
  cmd->add_option("--height", height, "pixels; default 320 per row of charts")->check(CLI::Range(0, 10000));
  cli::on_run(cmd, [] {
    const auto panels = plot::run_curves(run_dir);
    const std::filesystem::path file = out.empty() ? std::filesystem::path(run_dir) / "curves.png"
                                                   : std::filesystem::path(out);
    const int rows = static_cast<int>((panels.size() + 1) / 2);
    plot::draw(panels, file, width, height > 0 ? height : std::max(1, rows) * 320);
    // cairo and fontconfig keep process-wide caches; released here (the command draws once) so that
    // a leak checker sees only what we allocate.
    cairo_debug_reset_static_data();
    FcFini();
    fmt::print("{}: {} charts of {}\n", file.string(), panels.size(), run_dir);
    return 0;
  });
}

}  // namespace tandem::tools
