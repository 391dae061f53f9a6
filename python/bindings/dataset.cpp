// _tandem.Dataset and _tandem.preload: the dataset cache from Python (dataset.hpp).
#include "python/bindings/dataset.hpp"

#include <torch/csrc/autograd/python_variable.h>  // before pybind11: the at::Tensor caster

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>
#include <sys/mman.h>

#include <cstring>
#include <optional>
#include <thread>

#include "common/error.hpp"
#include "python/bindings/blocking.hpp"
#include "python/bindings/module.hpp"
#include "python/bindings/tensors.hpp"
#include "datasets/preload.hpp"
#include "datasets/progress.hpp"

namespace tandem::python {
namespace {

template <std::size_t N>
std::string text(const char (&field)[N]) {
  return std::string(field, strnlen(field, N));
}

unsigned threads_or_all(unsigned threads) {
  return threads ? threads : std::max(1u, std::thread::hardware_concurrency());
}

const shm::FieldDesc& field_desc(const DatasetAttachment& a, const std::string& name) {
  (void)a.cache().field(name);  // the cache's own "has no field" error
  const auto& d = a.cache().descriptor();
  for (std::uint32_t i = 0; i < d.num_fields; ++i)
    if (text(d.fields[i].name) == name) return d.fields[i];
  fail("dataset cache '{}' has no field '{}'", a.name(), name);
}

at::Tensor field_tensor(const std::shared_ptr<DatasetAttachment>& a, const std::string& name) {
  const shm::FieldDesc& f = field_desc(*a, name);
  const at::ScalarType dtype = scalar_type_of(f.dtype,
                                              fmt::format("field '{}' of dataset cache '{}'", name, a->name()));
  std::vector<std::int64_t> shape{static_cast<std::int64_t>(a->cache().num_samples())};
  for (std::uint32_t k = 0; k < f.ndim; ++k) shape.push_back(static_cast<std::int64_t>(f.shape[k]));
  return view_of(a, a->private_base() + f.offset, std::move(shape), dtype);
}

py::dict field_info(const DatasetAttachment& a, const std::string& name) {
  const shm::FieldDesc& f = field_desc(a, name);
  py::list shape;
  for (std::uint32_t k = 0; k < f.ndim; ++k) shape.append(f.shape[k]);
  py::dict info;
  info["dtype"] = std::string(shm::dtype_name(f.dtype));
  info["sample_shape"] = py::tuple(shape);
  info["offset"] = f.offset;
  info["bytes"] = f.bytes;
  return info;
}

py::dict splits(const DatasetAttachment& a) {
  const auto& d = a.cache().descriptor();
  py::dict out;
  for (std::uint32_t i = 0; i < d.num_splits; ++i)
    out[py::str(text(d.splits[i].name))] = py::make_tuple(d.splits[i].begin, d.splits[i].end);
  return out;
}

// `tandem data verify`'s check and message.
std::uint64_t verify(const DatasetAttachment& a, unsigned threads) {
  std::uint64_t sum = 0;
  {
    py::gil_scoped_release release;
    sum = a.cache().compute_checksum(threads_or_all(threads));
  }
  const auto& d = a.cache().descriptor();
  if (sum != d.payload_checksum)
    fail(ErrorKind::corrupt_segment,
         "dataset cache '{}' is corrupt: its payload hashes to xxh3:{:016x}, it was written as xxh3:{:016x}: run "
         "`tandem data preload {} --from {} --force`",
         a.name(), sum, d.payload_checksum, a.name(), text(d.source));
  return sum;
}

// `tandem data preload`'s work, with its progress bar when stderr is a terminal; Ctrl-C cancels it and
// leaves nothing in /dev/shm (preload.hpp).
py::dict preload(const std::string& name, const std::filesystem::path& from, const std::string& format, bool force,
                 unsigned threads, bool progress) {
  data::PreloadOptions o;
  o.name = name;
  o.from = from;
  o.format = format;
  o.force = force;
  o.threads = threads;
  data::PreloadResult r;
  run_interruptible([&](const std::atomic<bool>& cancel) {
    std::optional<data::ProgressBar> bar;
    if (progress) bar.emplace("preloading " + name);
    o.progress = [&](std::uint64_t done, std::uint64_t total) {
      if (cancel.load(std::memory_order_relaxed)) fail("preloading '{}' was interrupted", name);
      if (bar) bar->update(done, total);
    };
    r = data::preload(o);
  });
  py::dict out;
  out["segment"] = r.segment;
  out["format"] = r.format;
  out["num_samples"] = r.num_samples;
  out["payload_bytes"] = r.payload_bytes;
  out["load_seconds"] = static_cast<double>(r.load_ns) / 1e9;
  out["checksum"] = r.checksum;
  return out;
}

}  // namespace

DatasetAttachment::DatasetAttachment(const std::string& name) : name_(name), cache_(shm::DatasetCache::attach(name)) {
  const shm::Segment& seg = cache_.segment();
  bytes_ = seg.size();
  void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE, seg.fd(), 0);
  if (p == MAP_FAILED) TANDEM_FAIL_SYS(errno, "mmap(MAP_PRIVATE, /dev/shm/" + seg.name() + ")");
  private_base_ = static_cast<std::byte*>(p);
}

DatasetAttachment::~DatasetAttachment() {
  if (private_base_) ::munmap(private_base_, bytes_);
}

const std::shared_ptr<DatasetAttachment>& PyDataset::attachment() const {
  if (!attachment_) fail("dataset '{}' is closed: attach it again with tandem.Dataset('{}')", name, name);
  return attachment_;
}

void bind_dataset(py::module_& m) {
  py::class_<PyDataset>(m, "Dataset")
      .def(py::init<const std::string&>(), py::arg("name"))
      .def_readonly("name", &PyDataset::name)
      .def_property_readonly("closed", &PyDataset::closed)
      .def_property_readonly("segment", [](const PyDataset& d) { return d.attachment()->cache().segment().name(); })
      .def_property_readonly("num_samples", [](const PyDataset& d) { return d.attachment()->cache().num_samples(); })
      .def_property_readonly("source",
                             [](const PyDataset& d) { return text(d.attachment()->cache().descriptor().source); })
      .def_property_readonly("format",
                             [](const PyDataset& d) { return text(d.attachment()->cache().descriptor().format); })
      .def_property_readonly("checksum",
                             [](const PyDataset& d) { return d.attachment()->cache().descriptor().payload_checksum; })
      .def_property_readonly("load_seconds",
                             [](const PyDataset& d) { return d.attachment()->cache().descriptor().load_ns / 1e9; })
      .def_property_readonly("nbytes", [](const PyDataset& d) { return d.attachment()->cache().segment().size(); })
      .def(
          "field_names",
          [](const PyDataset& d) {
    const auto& desc = d.attachment()->cache().descriptor();
    std::vector<std::string> names;
    for (std::uint32_t i = 0; i < desc.num_fields; ++i) names.push_back(text(desc.fields[i].name));
    return names;
          })
      .def(
          "field", [](const PyDataset& d, const std::string& name) { return field_tensor(d.attachment(), name); },
          py::arg("name"))
      .def(
          "field_info", [](const PyDataset& d, const std::string& name) { return field_info(*d.attachment(), name); },
          py::arg("name"))
      .def("splits", [](const PyDataset& d) { return splits(*d.attachment()); })
      .def(
          "verify", [](const PyDataset& d, unsigned threads) { return verify(*d.attachment(), threads); },
          py::arg("threads") = 0)
      .def("close", &PyDataset::close);

  m.def("preload", &preload, py::arg("name"), py::arg("from_path"), py::arg("format") = "", py::arg("force") = false,
        py::arg("threads") = 0, py::arg("progress") = true);
  m.def(
      "remove_dataset",
      [](const std::string& name) {
    const auto r = shm::Segment::remove(shm::dataset_segment_name(name));
    if (r.result == shm::Segment::Removal::absent)
      fail(ErrorKind::segment_not_found,
           "shared-memory segment '/{}' does not exist: `tandem data ls` lists the caches",
           shm::dataset_segment_name(name));
    if (r.result == shm::Segment::Removal::denied)
      fail(ErrorKind::owner, "cannot remove dataset cache '{}': it is owned by uid {}, not by this user ({})", name,
           r.owner_uid, std::strerror(r.error));
      },
      py::arg("name"));
}

}  // namespace tandem::python
