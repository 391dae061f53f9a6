// The names of Tandem's segments (segment.hpp; docs/FORMAT.md, at its top): each spelled in one place.
#include <fmt/format.h>

#include <cctype>
#include <stdexcept>
#include <string>
#include <string_view>

#include "common/error.hpp"
#include "common/quote.hpp"
#include "shm/segment.hpp"

namespace tandem::shm {

std::string_view kind_name(Kind kind) {
  switch (kind) {
    case Kind::dataset: return "dataset";
    case Kind::weights: return "weights";
    case Kind::experience: return "exp";
    case Kind::control: return "ctl";
    case Kind::weights_cuda: return "weights.cuda";
    case Kind::reduce: return "reduce";
  }
  return "unknown";
}

void check_name_part(std::string_view what, std::string_view value) {
  bool ok = !value.empty() && value.size() <= 64;
  for (char c : value) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-');
  if (!ok) fail("{} {} is not a valid name: use 1-64 letters, digits, '_' or '-'", what, quote_escaped(value));
}

std::string dataset_segment_name(std::string_view dataset) {
  check_name_part("dataset name", dataset);
  return fmt::format("tandem.data.{}", dataset);
}

std::string job_segment_prefix(std::string_view job) {
  check_name_part("job name", job);
  if (job == "data") fail("job name 'data' is reserved for dataset caches: choose another job name");
  return fmt::format("tandem.{}.", job);
}

std::string job_segment_name(std::string_view job, Kind kind) {
  if (kind == Kind::dataset || kind == Kind::reduce)
    throw std::logic_error(fmt::format("job_segment_name: a {} segment is named by its own function", kind_name(kind)));
  return job_segment_prefix(job) + std::string(kind_name(kind));
}

std::string reduce_segment_name(std::string_view job, std::uint32_t rank0_pid, bool slots) {
  return fmt::format("{}{}-{}{}", job_segment_prefix(job), kind_name(Kind::reduce), rank0_pid, slots ? "-slots" : "");
}

}  // namespace tandem::shm
