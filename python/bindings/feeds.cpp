// _tandem.HostFeed and _tandem.DeviceFeed: the learner's feeds (learner/feed/) over a tandem.Dataset.
// tandem/feeds.py turns them into per-epoch iterables (EpochIterator below is their `for x, y in feed`).
//
// One step is (epoch, index, [(x, y), ...]): a batch per consumer, each in its own allocation (on the
// CPU, views of the feed's staging slot, disjoint; on a GPU, fresh tensors).
//
// A CPU HostFeed hands out views of its ring slots and refills a slot only once every tensor of the
// step it held is gone; a caller that keeps `ring_slots` steps alive would wait for ever in C++. From
// Python that is an easy mistake (list(feed)), so next() checks first, through weak references to the
// storages it handed out, and raises instead of hanging.
//
// A step is taken by one thread (it holds every consumer's batch). take() lets go of the GIL while the
// feed works, so a second Python thread could enter it meanwhile and race the first one in C++ (two
// refills of the same batch objects, a ring slot handed out twice): OneTaker refuses that instead.
#include <torch/csrc/autograd/python_variable.h>  // before pybind11: the at::Tensor caster

#include <pybind11/stl.h>

#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "learner/ddp/rank_env.hpp"
#include "learner/feed/device_feed.hpp"
#include "learner/feed/host_feed.hpp"
#include "python/bindings/batch_reuse.hpp"
#include "python/bindings/dataset.hpp"
#include "python/bindings/module.hpp"

namespace tandem::python {
namespace {

// The epoch the next step belongs to, kept here so that a Python step costs one call into C++.
class NextEpoch {
 public:
  NextEpoch(std::uint64_t first_epoch, std::uint64_t steps_per_epoch)
      : epoch_(first_epoch), steps_per_epoch_(steps_per_epoch) {}
  void after(std::uint64_t epoch, std::uint64_t index) { epoch_ = index + 1 == steps_per_epoch_ ? epoch + 1 : epoch; }
  std::uint64_t get() const { return epoch_; }

 private:
  std::uint64_t epoch_, steps_per_epoch_;
};

// Marks a feed's take() in progress; a second take() while one is (from another Python thread) fails.
// `taking` is only read and written with the GIL held, which orders it between threads.
class OneTaker {
 public:
  OneTaker(bool& taking, const char* feed) : taking_(taking) {
    if (taking_)
      fail(
          "{}: a step was asked for from two threads at once; a feed is iterated by one thread (it hands "
          "out every consumer's batch of a step): give each thread a feed of its own",
          feed);
    taking_ = true;
  }
  ~OneTaker() { taking_ = false; }
  OneTaker(const OneTaker&) = delete;
  OneTaker& operator=(const OneTaker&) = delete;

 private:
  bool& taking_;
};

// A step as Python gets it: one (x, y) tuple of torch.Tensors per consumer.
struct PyStep {
  std::uint64_t epoch = 0, index = 0;
  std::vector<py::tuple> batches;
};

PyStep wrap(const feed::Step& step) {
  PyStep out{step.epoch, step.index, {}};
  out.batches.reserve(step.batches.size());
  for (const auto& b : step.batches) out.batches.push_back(py::make_tuple(b.x, b.y));
  return out;
}

py::list batches_to_python(const PyStep& step) {
  py::list batches;
  for (const auto& b : step.batches) batches.append(b);
  return batches;
}

py::tuple step_to_python(const PyStep& step) { return py::make_tuple(step.epoch, step.index, batches_to_python(step)); }

// `for x, y in feed`: the steps left in the feed's current epoch, each one call into C++ (the loop's
// __next__), with no Python frame of ours in between. Yields (x, y) for one consumer, else a list of
// them. Breaking out leaves the feed where it is; the next iterator goes on from there.
template <class PyFeed>
class EpochIterator {
 public:
  EpochIterator(py::object feed, bool one_consumer)
      : owner_(std::move(feed)),
        feed_(owner_.cast<PyFeed&>()),
        epoch_(feed_.next_epoch()),
        one_consumer_(one_consumer) {}

  py::object next() {
    if (feed_.next_epoch() != epoch_) throw py::stop_iteration();
    PyStep step = feed_.take();
    if (one_consumer_) return std::move(step.batches.front());
    return batches_to_python(step);
  }

 private:
  py::object owner_;  // keeps the feed (and through it the cache) alive while Python holds the iterator
  PyFeed& feed_;
  std::uint64_t epoch_;
  bool one_consumer_;
};

template <class PyFeed>
void bind_epoch_iterator(py::module_& m, const char* name) {
  py::class_<EpochIterator<PyFeed>>(m, name)
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &EpochIterator<PyFeed>::next);
}

feed::Placement placement_of(const std::string& name) {
  if (name == "auto") return feed::Placement::automatic;
  if (name == "cpu") return feed::Placement::cpu;
  if (name == "cuda") return feed::Placement::cuda;
  fail("HostFeed device '{}' is not a placement: use 'auto', 'cpu' or 'cuda'", name);
}

class PyHostFeed {
 public:
  PyHostFeed(const PyDataset& dataset, const feed::FeedOptions& options, std::uint64_t first_epoch)
      : attachment_(dataset.attachment()), slots_(options.ring_slots) {
    py::gil_scoped_release release;  // starts the workers; on a GPU also allocates pinned memory
    feed_.emplace(attachment_->cache(), options, first_epoch);
    next_epoch_.emplace(first_epoch, feed_->length());
  }

  py::tuple next() { return step_to_python(take()); }

  PyStep take() {
    const OneTaker one(taking_, "HostFeed");
    if (!feed_->on_gpu()) refuse_stall();
    feed::Step step;
    {
      py::gil_scoped_release release;
      step = feed_->next();
    }
    if (!feed_->on_gpu()) remember(step);
    ++taken_;
    next_epoch_->after(step.epoch, step.index);
    return wrap(step);
  }

  std::uint64_t length() const { return feed_->length(); }
  bool on_gpu() const { return feed_->on_gpu(); }
  std::uint64_t next_epoch() const { return next_epoch_->get(); }

 private:
  struct Held {
    std::uint64_t step;
    std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> storages;
    bool alive() const {
      for (const auto& s : storages)
        if (!s.expired()) return true;
      return false;
    }
  };

  void remember(const feed::Step& step) {
    Held held{taken_, {}};
    for (const auto& b : step.batches)
      for (const auto* t : {&b.x, &b.y})
        if (t->defined() && t->has_storage()) held.storages.push_back(t->storage().getWeakStorageImpl());
    held_.push_back(std::move(held));
  }

  // The next step goes to slot taken_ % slots_, last held by step taken_ - slots_.
  void refuse_stall() {
    while (!held_.empty() && (held_.front().step + slots_ < taken_ || !held_.front().alive())) held_.pop_front();
    for (const Held& h : held_)
      if (h.step + slots_ == taken_ && h.alive())
        fail(
            "HostFeed: the batches of step {} are still referenced, and the next step needs their staging slot "
            "(ring_slots = {}): keep at most {} steps alive (copy what you keep with .clone()), or pass a larger "
            "ring_slots",
            h.step, slots_, slots_ - 1);
  }

  std::shared_ptr<DatasetAttachment> attachment_;  // the cache outlives the feed
  std::uint64_t slots_;
  std::optional<feed::HostFeed> feed_;
  std::optional<NextEpoch> next_epoch_;
  std::deque<Held> held_;
  std::uint64_t taken_ = 0;
  bool taking_ = false;  // OneTaker's
};

class PyDeviceFeed {
 public:
  PyDeviceFeed(const PyDataset& dataset, const feed::FeedOptions& options, std::uint64_t first_epoch)
      : attachment_(dataset.attachment()), consumers_(options.consumers), outputs_(3 * std::size_t{options.consumers}) {
    py::gil_scoped_release release;  // copies the split to the GPU
    feed_.emplace(attachment_->cache(), options, first_epoch);
    next_epoch_.emplace(first_epoch, feed_->length());
  }

  py::tuple next() { return step_to_python(take()); }

  PyStep take() {
    const OneTaker one(taking_, "DeviceFeed");
    const std::uintptr_t stream = feed_->current_stream();
    std::vector<feed::Batch> refill = outputs_.offer(consumers_, stream);
    feed::Step step;
    {
      py::gil_scoped_release release;  // only enqueues work on the current stream
      step = feed_->next(refill);
    }
    refill.clear();  // an offered batch the feed did not take is free again for hand_out to replace
    next_epoch_->after(step.epoch, step.index);
    return {step.epoch, step.index, outputs_.hand_out(step, stream)};
  }

  std::uint64_t length() const { return feed_->length(); }
  std::uint64_t next_epoch() const { return next_epoch_->get(); }

 private:
  std::shared_ptr<DatasetAttachment> attachment_;
  std::size_t consumers_;
  // Three batches per consumer: the one the loop holds while it takes the next, that next one, and
  // one to spare for a loop that keeps two.
  ReusedBatches outputs_;
  std::optional<feed::DeviceFeed> feed_;
  std::optional<NextEpoch> next_epoch_;
  bool taking_ = false;  // OneTaker's
};

py::dict rank_from_env() {
  const ddp::RankInfo r = ddp::rank_from_env();
  py::dict out;
  out["rank"] = r.rank;
  out["world_size"] = r.world_size;
  out["local_rank"] = r.local_rank;
  out["local_world_size"] = r.local_world_size;
  out["source"] = r.source;
  return out;
}

}  // namespace

void bind_feeds(py::module_& m) {
  py::class_<feed::FeedOptions>(m, "FeedOptions")
      .def(py::init<>())
      .def_readwrite("split", &feed::FeedOptions::split)
      .def_readwrite("batch_size", &feed::FeedOptions::batch_size)
      .def_readwrite("consumers", &feed::FeedOptions::consumers)
      .def_readwrite("rank", &feed::FeedOptions::rank)
      .def_readwrite("world_size", &feed::FeedOptions::world_size)
      .def_readwrite("seed", &feed::FeedOptions::seed)
      .def_readwrite("device_index", &feed::FeedOptions::device_index)
      .def_readwrite("drop_last", &feed::FeedOptions::drop_last)
      .def_readwrite("mean", &feed::FeedOptions::mean)
      .def_readwrite("std", &feed::FeedOptions::stddev)
      .def_property(
          "placement",
          [](const feed::FeedOptions& o) {
    return o.placement == feed::Placement::cpu ? "cpu" : o.placement == feed::Placement::cuda ? "cuda" : "auto";
          },
          [](feed::FeedOptions& o, const std::string& p) { o.placement = placement_of(p); })
      .def_readwrite("workers", &feed::FeedOptions::workers)
      .def_readwrite("ring_slots", &feed::FeedOptions::ring_slots);

  py::class_<PyHostFeed>(m, "HostFeed")
      .def(py::init<const PyDataset&, const feed::FeedOptions&, std::uint64_t>(), py::arg("dataset"),
           py::arg("options"), py::arg("first_epoch") = 0)
      .def("next", &PyHostFeed::next)
      .def(
          "epoch",
          [](py::object self, bool one_consumer) { return EpochIterator<PyHostFeed>(std::move(self), one_consumer); },
          py::arg("one_consumer"))
      .def_property_readonly("length", &PyHostFeed::length)
      .def_property_readonly("next_epoch", &PyHostFeed::next_epoch)
      .def_property_readonly("on_gpu", &PyHostFeed::on_gpu);

  py::class_<PyDeviceFeed>(m, "DeviceFeed")
      .def(py::init<const PyDataset&, const feed::FeedOptions&, std::uint64_t>(), py::arg("dataset"),
           py::arg("options"), py::arg("first_epoch") = 0)
      .def("next", &PyDeviceFeed::next)
      .def(
          "epoch",
          [](py::object self, bool one_consumer) { return EpochIterator<PyDeviceFeed>(std::move(self), one_consumer); },
          py::arg("one_consumer"))
      .def_property_readonly("length", &PyDeviceFeed::length)
      .def_property_readonly("next_epoch", &PyDeviceFeed::next_epoch);

  bind_epoch_iterator<PyHostFeed>(m, "HostFeedEpoch");
  bind_epoch_iterator<PyDeviceFeed>(m, "DeviceFeedEpoch");

  m.def("rank_from_env", &rank_from_env, "torchrun's (or Slurm's) RANK/WORLD_SIZE, as tandem-learner reads them");
}

}  // namespace tandem::python
