#include "tools/plot/draw.hpp"

#include <cairo-svg.h>
#include <cairo.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "common/error.hpp"

namespace tandem::plot {
namespace {

struct Rgb {
  double r, g, b;
};
// The dashboard's colours (dashboard.js), so that a curve looks the same on the page and the image.
constexpr Rgb kColors[] = {{0.145, 0.388, 0.922}, {0.863, 0.149, 0.149}, {0.086, 0.639, 0.290}, {0.576, 0.200, 0.918},
                           {0.918, 0.345, 0.047}, {0.031, 0.569, 0.698}, {0.302, 0.486, 0.059}, {0.745, 0.094, 0.365}};

using Surface = std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)>;
using Context = std::unique_ptr<cairo_t, decltype(&cairo_destroy)>;

struct Range {
  double lo = 0, hi = 1;
};

Range range_of(const Panel& p, bool x) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& s : p.series)
    for (const auto& [px, py] : s.points) {
      lo = std::min(lo, x ? px : py);
      hi = std::max(hi, x ? px : py);
    }
  if (lo == hi) return {lo - 1, hi + 1};
  if (x) return {lo, hi};
  const double pad = (hi - lo) * 0.05;  // the extreme values stay off the frame
  return {lo - pad, hi + pad};
}

// About five round tick values covering r.
std::vector<double> ticks(Range r) {
  const double raw = (r.hi - r.lo) / 5;
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  const double step = magnitude * (raw / magnitude >= 5 ? 10 : raw / magnitude >= 2 ? 5 : raw / magnitude >= 1 ? 2 : 1);
  std::vector<double> out;
  for (double t = std::ceil(r.lo / step) * step; t <= r.hi + step * 1e-9 && out.size() < 20; t += step)
    out.push_back(t);
  return out;
}

std::string tick_text(double v) {
  const double a = std::abs(v);
  if (a >= 1e6) return fmt::format("{:.3g}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:.3g}k", v / 1e3);
  return fmt::format("{:.4g}", std::abs(v) < 1e-12 ? 0.0 : v);
}

void text(cairo_t* cr, double x, double y, const std::string& s, double size, double align = 0) {
  cairo_set_font_size(cr, size);
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  cairo_move_to(cr, x - e.x_advance * align, y);
  cairo_show_text(cr, s.c_str());
}

double text_width(cairo_t* cr, const std::string& s, double size) {
  cairo_set_font_size(cr, size);
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  return e.x_advance;
}

// Legend entries (a colour square, then the label): right of the title when they fit there, else in
// rows under it. Returns the y below the legend.
double draw_legend(cairo_t* cr, const Panel& p, double x0, double y0, double w, double title_w) {
  constexpr double kGap = 24, kSize = 11;
  double total = 0;
  for (const auto& s : p.series) total += text_width(cr, s.label, kSize) + kGap;
  const bool beside = total <= w - title_w - 40;
  double x = beside ? x0 + w - 16 - total + kGap : x0 + 26, y = y0 + (beside ? 20 : 40);
  for (std::size_t i = 0; i < p.series.size(); ++i) {
    const double label_w = text_width(cr, p.series[i].label, kSize);
    if (!beside && x + label_w > x0 + w - 16 && x > x0 + 26) x = x0 + 26, y += 16;
    const Rgb c = kColors[i % std::size(kColors)];
    cairo_set_source_rgb(cr, c.r, c.g, c.b);
    cairo_rectangle(cr, x - 14, y - 8, 10, 10);
    cairo_fill(cr);
    text(cr, x, y, p.series[i].label, kSize);
    x += label_w + kGap;
  }
  return beside ? y0 + 34 : y + 12;
}

void draw_panel(cairo_t* cr, const Panel& p, double x0, double y0, double w, double h) {
  cairo_set_source_rgb(cr, 0.13, 0.13, 0.13);
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
  text(cr, x0 + 12, y0 + 20, p.title, 14);
  const double title_w = text_width(cr, p.title, 14);
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  const double left = x0 + 64, right = x0 + w - 16, bottom = y0 + h - 40;
  const double top = std::min(draw_legend(cr, p, x0, y0, w, title_w), bottom - 20);
  const Range xr = range_of(p, true), yr = range_of(p, false);
  auto px = [&](double v) { return left + (v - xr.lo) / (xr.hi - xr.lo) * (right - left); };
  auto py = [&](double v) { return bottom - (v - yr.lo) / (yr.hi - yr.lo) * (bottom - top); };
  // Grid and ticks.
  cairo_set_line_width(cr, 1);
  for (double t : ticks(yr)) {
    cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
    cairo_move_to(cr, left, py(t));
    cairo_line_to(cr, right, py(t));
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
    text(cr, left - 6, py(t) + 4, tick_text(t), 11, 1);
  }
  for (double t : ticks(xr)) {
    cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
    text(cr, px(t), bottom + 16, tick_text(t), 11, 0.5);
  }
  text(cr, (left + right) / 2, bottom + 32, "step", 11, 0.5);
  cairo_set_source_rgb(cr, 0.6, 0.6, 0.6);
  cairo_rectangle(cr, left, top, right - left, bottom - top);
  cairo_stroke(cr);
  // The curves, the first series on top.
  for (std::size_t i = p.series.size(); i-- > 0;) {
    const Series& s = p.series[i];
    const Rgb c = kColors[i % std::size(kColors)];
    cairo_set_source_rgb(cr, c.r, c.g, c.b);
    cairo_set_line_width(cr, kCurveWidth);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    for (std::size_t k = 0; k < s.points.size(); ++k)
      (k == 0 ? cairo_move_to : cairo_line_to)(cr, px(s.points[k].first), py(s.points[k].second));
    if (s.points.size() == 1) cairo_rel_line_to(cr, 0.01, 0);  // one point still shows
    cairo_stroke(cr);
  }
}

}  // namespace

void draw(const std::vector<Panel>& panels, const std::filesystem::path& out, int width, int height) {
  const std::string ext = out.extension().string();
  if (ext != ".png" && ext != ".svg")
    fail("{}: the image type comes from the extension: use .png or .svg", out.string());
  if (panels.empty()) fail("nothing to plot: the run dir's metrics.jsonl has no learner metrics yet");
  Surface surface(ext == ".svg" ? cairo_svg_surface_create(out.c_str(), width, height)
                                : cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height),
                  cairo_surface_destroy);
  if (cairo_surface_status(surface.get()) != CAIRO_STATUS_SUCCESS)
    fail("cannot write {}: {}", out.string(), cairo_status_to_string(cairo_surface_status(surface.get())));
  {
    Context cr(cairo_create(surface.get()), cairo_destroy);
    cairo_set_source_rgb(cr.get(), 1, 1, 1);
    cairo_paint(cr.get());
    const int columns = panels.size() > 1 ? 2 : 1;
    const int rows = static_cast<int>((panels.size() + columns - 1) / columns);
    const double w = static_cast<double>(width) / columns, h = static_cast<double>(height) / rows;
    for (std::size_t i = 0; i < panels.size(); ++i) {
      const std::size_t column = i % columns, row = i / columns;
      draw_panel(cr.get(), panels[i], static_cast<double>(column) * w, static_cast<double>(row) * h, w, h);
    }
  }
  cairo_surface_flush(surface.get());
  cairo_status_t status = ext == ".png" ? cairo_surface_write_to_png(surface.get(), out.c_str()) : CAIRO_STATUS_SUCCESS;
  cairo_surface_finish(surface.get());  // an SVG is written out here
  if (status == CAIRO_STATUS_SUCCESS) status = cairo_surface_status(surface.get());
  if (status != CAIRO_STATUS_SUCCESS) fail("cannot write {}: {}", out.string(), cairo_status_to_string(status));
}

}  // namespace tandem::plot
