// metric_fields_js OUT: writes metric_fields.js, the metric names of shm/metric_fields.hpp for the
// dashboard page (dashboard.js reads them as METRIC), so that the page and the C++ paths spell each
// name once: in the table. Run at build time (tools/dashboard/meson.build).
#include <fstream>
#include <iostream>

#include "shm/metric_fields.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: metric_fields_js OUT\n";
    return 2;
  }
  std::ofstream out(argv[1]);
  out << "// Generated from shm/metric_fields.hpp by tools/dashboard/metric_fields_js.cpp: the metric names.\n"
      << "const METRIC_NAMES = [";
  for (const auto& f : tandem::shm::kMetricFields)
    out << (&f == tandem::shm::kMetricFields.data() ? "" : ", ") << '"' << f.name << '"';
  out << "];\n";
  return out ? 0 : 1;
}
