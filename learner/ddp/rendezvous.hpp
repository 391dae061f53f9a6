// Rendezvous of the data-parallel ranks through LibTorch's c10d TCPStore: rank 0 hosts it at
// MASTER_ADDR:MASTER_PORT, every rank (rank 0 too) connects, writes "arrived/<rank>" and waits until
// it has seen every rank's key. A rank that does not arrive within `timeout` makes every rank that
// did fail with a UserError naming the missing ranks; if rank 0 (the store) is the one missing, or
// exits first because it gave up, the others say so and name what they last saw missing. Each rank
// counts the timeout from its own start, so all started ranks exit within timeout plus a poll.
//
// Threads: main's thread, once, before any collective. The returned store is also what Gloo and NCCL
// set themselves up through; it must outlive them (rank 0's process serves it).
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <chrono>

namespace c10d {
class Store;
}

namespace tandem::ddp {

struct RankInfo;

c10::intrusive_ptr<c10d::Store> rendezvous(const RankInfo& rank, std::chrono::milliseconds timeout);

}  // namespace tandem::ddp
