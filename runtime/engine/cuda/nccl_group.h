// All-reduce across the GPUs of one process for tensor parallelism, through NCCL loaded with dlopen
// (libnccl.so.2), so that binaries without tensor parallelism never need NCCL installed and the
// static GPU-test binaries carry no NCCL link. Private to the CUDA backend.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "infergate/common/result.h"

struct CUstream_st;

namespace infergate::runtime::engine::cuda_detail {

// One communicator per device (rank r on devices[r]), made with ncclCommInitAll.
// Thread-safety: all_reduce_sum for different ranks may run concurrently (one host thread per rank,
// as NCCL requires for one process driving several GPUs); one rank is driven by one thread.
class NcclGroup {
 public:
  // Refuses with Unavailable, reason "NcclUnavailable", when libnccl cannot be loaded or initialised.
  static Result<std::unique_ptr<NcclGroup>> create(const std::vector<int>& devices);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int size() const { return static_cast<int>(comms_.size()); }
  // data[0..count) summed in place over all ranks, enqueued on `stream` (rank's device current).
  Status all_reduce_sum(int rank, float* data, size_t count, CUstream_st* stream);
  // NCCL's version ("2.21.5"), or why it cannot be loaded.
  static std::string version();

 private:
  NcclGroup() = default;
  std::vector<void*> comms_;  // ncclComm_t
};

}  // namespace infergate::runtime::engine::cuda_detail
