// Device weight slab (/tandem.<job>.weights.cuda) without a GPU: its layout, the export record, the
// same seqlock and leases over slots that live elsewhere, and every attach refusal. Host memory stands
// in for the GPU buffer and a made-up IPC handle for the real one: this code never touches the slots.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/file_descriptor.hpp"
#include "shm/segment.hpp"
#include "shm/verify_pattern.hpp"
#include "shm/weight_slab.hpp"
#include "tests/harness.hpp"

using namespace tandem;
using shm::WeightSlabReader;
using shm::WeightSlabWriter;

namespace {

constexpr std::size_t kBytes = 3u << 20;  // stride 4 MiB: slot i at i * 4 MiB in the "device" buffer

shm::SlabSpec spec_of() {
  shm::SlabSpec spec;
  spec.model = "device-test";
  spec.model_signature = 0xfeedull;
  spec.tensors = {{"w", shm::DType::f32, {kBytes / 4}, 0, kBytes}};
  spec.slot_bytes = kBytes;
  spec.num_slots = 3;
  spec.num_leases = 4;
  return spec;
}

shm::DeviceSlabInfo fake_info(std::uint64_t buffer_bytes) {
  shm::DeviceSlabInfo info{};
  for (int i = 0; i < 64; ++i) info.ipc_handle[i] = static_cast<std::uint8_t>(i);
  for (int i = 0; i < 16; ++i) info.gpu_uuid[i] = static_cast<std::uint8_t>(0xa0 + i);
  std::strcpy(info.pci_bus_id, "0000:19:00.0");
  info.buffer_bytes = buffer_bytes;
  info.exporter_pid = static_cast<std::uint64_t>(::getpid());
  return info;
}

// Overwrites bytes of a segment in /dev/shm, as a stray or hostile process of this uid could.
void poke(const std::string& name, std::size_t offset, const void* bytes, std::size_t n) {
  const FileDescriptor fd(::open(("/dev/shm/" + name).c_str(), O_RDWR));
  REQUIRE(fd.get() >= 0);
  REQUIRE(::pwrite(fd.get(), bytes, n, static_cast<off_t>(offset)) == static_cast<ssize_t>(n));
}

constexpr std::size_t kInfoAt = shm::kDescriptorOffset + shm::kDeviceInfoOffset;

}  // namespace

TEST_CASE("device slab: the segment holds control, leases and table but no slots, and records the export") {
  const std::string name = shm::device_slab_name(test::unique_name("tandem.test-devslab"));
  CHECK(name.ends_with(".cuda"));
  std::vector<std::byte> device(WeightSlabWriter::device_slab_bytes(spec_of()));
  CHECK(device.size() == 3 * (4u << 20));
  auto w = WeightSlabWriter::create_on_device(name, spec_of(), fake_info(device.size()), device.data());
  CHECK(w.descriptor().slots_offset == 0);
  CHECK(w.descriptor().slot_stride == 4u << 20);
  CHECK(w.slot_data(2) == device.data() + 2 * (4u << 20));

  auto r = WeightSlabReader::attach_device(name, 1);
  CHECK(r.on_device());
  CHECK(r.device_info().ipc_handle[63] == 63);
  CHECK(r.device_info().gpu_uuid[0] == 0xa0);
  CHECK(std::string(r.device_info().pci_bus_id) == "0000:19:00.0");
  CHECK(r.device_info().exporter_pid == static_cast<std::uint64_t>(::getpid()));
  CHECK(shm::Segment::attach(name, shm::Kind::weights_cuda, shm::kWeightSlabLayoutVersion,
                             shm::Segment::Access::read_only, "")
            .size() < (2u << 20) + (1u << 20));
}

TEST_CASE("device slab: versions are committed and leased through the same seqlock at the bound address") {
  const std::string name = shm::device_slab_name(test::unique_name("tandem.test-devslab-rt"));
  std::vector<std::byte> device(WeightSlabWriter::device_slab_bytes(spec_of()));
  auto w = WeightSlabWriter::create_on_device(name, spec_of(), fake_info(device.size()), device.data());
  auto r = WeightSlabReader::attach_device(name, 1);
  CHECK_THROWS_AS(static_cast<void>(r.lease_latest()), std::logic_error);  // not bound yet
  r.bind_device_slots(device.data());
  std::vector<std::byte> host(kBytes);
  CHECK_THROWS_AS(static_cast<void>(r.copy_latest(host.data())), std::logic_error);  // device memory

  for (std::uint64_t v = 1; v <= 5; ++v) {
    auto slot = w.begin_write();
    REQUIRE(slot);
    shm::fill_verify_pattern(slot->data, kBytes, v);
    w.commit(*slot, v, v, kBytes, monotonic_ns());
    auto lease = r.lease_latest();
    REQUIRE(lease);
    CHECK(lease->version() == v);
    CHECK(lease->data() == device.data() + lease->slot() * (4u << 20));
    CHECK(shm::check_verify_pattern(lease->data(), lease->bytes(), v));
  }
  auto held = r.lease_latest();  // a leased slot is never the one the writer picks
  REQUIRE(held);
  for (int i = 0; i < 4; ++i) {
    auto slot = w.begin_write();
    REQUIRE(slot);
    CHECK(slot->index != held->slot());
    w.commit(*slot, 6 + i, 0, kBytes, 0);
  }
}

TEST_CASE("device slab: a host reader and a device reader each refuse the other's segment with one line") {
  const std::string host_name = test::unique_name("tandem.test-devslab-kind");
  const std::string dev_name = shm::device_slab_name(host_name);
  std::vector<std::byte> device(WeightSlabWriter::device_slab_bytes(spec_of()));
  auto host = WeightSlabWriter::create(host_name, spec_of());
  auto dev = WeightSlabWriter::create_on_device(dev_name, spec_of(), fake_info(device.size()), device.data());
  CHECK_THROWS_WITH_AS(WeightSlabReader::attach_device(host_name), doctest::Contains("not a weights.cuda one"),
                       UserError);
  CHECK_THROWS_WITH_AS(WeightSlabReader::attach(dev_name), doctest::Contains("holds a weights.cuda segment"),
                       UserError);
}

TEST_CASE(
    "device slab: a corrupt export record is refused, and a writer cannot declare a buffer too small for its slots") {
  const std::string name = shm::device_slab_name(test::unique_name("tandem.test-devslab-bad"));
  std::vector<std::byte> device(WeightSlabWriter::device_slab_bytes(spec_of()));
  auto w = WeightSlabWriter::create_on_device(name, spec_of(), fake_info(device.size()), device.data());
  // The export record is part of the descriptor, which the segment's header checksum covers.
  const std::uint8_t junk = 0xff;
  poke(name, kInfoAt + 5, &junk, 1);
  CHECK_THROWS_WITH_AS(WeightSlabReader::attach_device(name), doctest::Contains("corrupt header"), UserError);
  shm::DeviceSlabInfo small = fake_info(4u << 20);  // three 4 MiB slots in a 4 MiB buffer
  CHECK_THROWS_AS(WeightSlabWriter::create_on_device(name + "x", spec_of(), small, device.data()), std::logic_error);
  CHECK_THROWS_WITH_AS(WeightSlabReader::attach_device(name + "-missing"),
                       doctest::Contains("start the learner that publishes"), UserError);
}

TEST_CASE("device slab: a segment whose exporting process has exited is refused as stale, naming `tandem shm rm`") {
  const std::string name = shm::device_slab_name(test::unique_name("tandem.test-devslab-stale"));
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  std::vector<std::byte> device(WeightSlabWriter::device_slab_bytes(spec_of()));
  shm::DeviceSlabInfo info = fake_info(device.size());
  info.exporter_pid = static_cast<std::uint64_t>(child);  // gone and reaped
  auto w = WeightSlabWriter::create_on_device(name, spec_of(), info, device.data());
  CHECK_THROWS_WITH_AS(WeightSlabReader::attach_device(name), doctest::Contains("which has exited"), UserError);
  CHECK_THROWS_WITH_AS(WeightSlabReader::attach_device(name), doctest::Contains(("tandem shm rm " + name).c_str()),
                       UserError);
}

TEST_CASE("tandem_shm.py describes a device slab's export record from FORMAT.md and never reads its slots") {
  const std::string name = shm::device_slab_name(test::unique_name("tandem.test-devslab-py"));
  std::vector<std::byte> device(WeightSlabWriter::device_slab_bytes(spec_of()));
  auto w = WeightSlabWriter::create_on_device(name, spec_of(), fake_info(device.size()), device.data());
  auto slot = w.begin_write();
  REQUIRE(slot);
  w.commit(*slot, 7, 0, kBytes, 0);
  const test::CommandResult out = test::run_command(test::python_with_numpy() + " " + test::source_root() +
                                                    "/tools/tandem_shm.py --weights " + name);
  INFO(out.output);
  REQUIRE(out.status == 0);
  CHECK(out.output.find("device slab on GPU 0000:19:00.0 (uuid a0a1a2a3a4a5a6a7a8a9aaabacadaeaf)") !=
        std::string::npos);
  CHECK(out.output.find("exported by pid " + std::to_string(::getpid()) + ", 12582912 bytes; latest version 7") !=
        std::string::npos);
}
