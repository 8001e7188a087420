// NcclGroup for the emulated CUDA backend (runtime_cuda_emu_tests): the all-reduce of tensor
// parallelism done in process over emulated devices, in place of NCCL. Every rank's host thread
// enqueues its sum as it would with NCCL; the emulated streams are synchronous, so a call blocks
// until every rank has arrived, then each rank's buffer gets the sum over ranks, added in rank order
// (deterministic). A rank that never arrives (another failed first) makes the others fail after a
// timeout instead of hanging, with a message that names the missing ranks.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include <cstdio>

#include "nccl_group.h"

namespace infergate::runtime::engine::cuda_detail {
namespace {

struct InProcessGroup {
  explicit InProcessGroup(int n) : ranks(n), buffers(static_cast<size_t>(n), nullptr) {}
  const int ranks;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<float*> buffers;  // this round's, by rank
  size_t count = 0;
  int arrived = 0;
  uint64_t round = 0;
  std::string round_error;
};

constexpr auto kTimeout = std::chrono::seconds(120);

}  // namespace

std::string NcclGroup::version() { return "in-process all-reduce (emulated devices)"; }

Result<std::unique_ptr<NcclGroup>> NcclGroup::create(const std::vector<int>& devices) {
  if (devices.size() < 2) return invalid_argument("NcclGroup: tensor parallelism needs two or more devices");
  std::unique_ptr<NcclGroup> g(new NcclGroup());
  // Every rank's handle is the one shared group (NCCL's are one communicator per rank).
  auto* shared = new InProcessGroup(static_cast<int>(devices.size()));
  g->comms_.assign(devices.size(), shared);
  return g;
}

NcclGroup::~NcclGroup() {
  if (!comms_.empty()) delete static_cast<InProcessGroup*>(comms_[0]);
}

Status NcclGroup::all_reduce_sum(int rank, float* data, size_t count, CUstream_st* stream) {
  if (rank < 0 || rank >= size()) return invalid_argument("all_reduce_sum: rank " + std::to_string(rank));
  auto& g = *static_cast<InProcessGroup*>(comms_[static_cast<size_t>(rank)]);
  if (stream != nullptr && stream->capturing) {  // a graph node, as NCCL's collectives are under capture
    stream->captured.push_back({[this, rank, data, count] {
      const Status s = all_reduce_sum(rank, data, count, nullptr);
      if (!s.ok())
        std::fprintf(stderr, "emulated all-reduce in a graph: %s\n", s.error().to_string().c_str());
    }});
    return ok_status();
  }
  std::unique_lock<std::mutex> lock(g.mu);
  const uint64_t my_round = g.round;
  if (g.arrived == 0) {
    g.count = count;
    g.round_error.clear();
  } else if (count != g.count) {
    g.round_error = "all_reduce_sum: rank " + std::to_string(rank) + " sums " + std::to_string(count) +
                    " values, another rank " + std::to_string(g.count);
  }
  g.buffers[static_cast<size_t>(rank)] = data;
  if (++g.arrived == g.ranks) {
    if (g.round_error.empty()) {
      std::vector<float> sum(count, 0.0f);
      for (float* b : g.buffers) {
        for (size_t i = 0; i < count; ++i) sum[i] += b[i];
      }
      for (float* b : g.buffers) std::copy(sum.begin(), sum.end(), b);
    }
    g.arrived = 0;
    ++g.round;
    g.cv.notify_all();
    if (!g.round_error.empty()) return internal_error(g.round_error);
    return ok_status();
  }
  if (!g.cv.wait_for(lock, kTimeout, [&] { return g.round != my_round; })) {
    std::string missing;
    for (int r = 0; r < g.ranks; ++r) {
      if (g.buffers[static_cast<size_t>(r)] == nullptr) missing += " " + std::to_string(r);
    }
    return unavailable("all_reduce_sum: rank " + std::to_string(rank) + " waited " +
                       std::to_string(kTimeout.count()) + " s for ranks that never arrived:" + missing);
  }
  if (!g.round_error.empty()) return internal_error(g.round_error);
  return ok_status();
}

}  // namespace infergate::runtime::engine::cuda_detail
