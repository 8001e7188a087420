// NcclGroup over a dlopen'ed libnccl (nccl_group.h). Only the four entry points tensor parallelism
// needs are resolved; their signatures are NCCL 2's stable C API.
#include "nccl_group.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace infergate::runtime::engine::cuda_detail {
namespace {

// NCCL 2's enums as the C API defines them (nccl.h: ncclSuccess = 0, ncclFloat32 = 7, ncclSum = 0).
// Declared here rather than included so that the backend builds where nccl.h is absent.
using NcclResult = int;
constexpr int kNcclFloat32 = 7;
constexpr int kNcclSum = 0;

struct Api {
  void* lib = nullptr;
  std::string error;
  NcclResult (*comm_init_all)(void** comms, int ndev, const int* devlist) = nullptr;
  NcclResult (*all_reduce)(const void* send, void* recv, size_t count, int dtype, int op, void* comm,
                           CUstream_st* stream) = nullptr;
  NcclResult (*comm_destroy)(void* comm) = nullptr;
  const char* (*error_string)(NcclResult r) = nullptr;
  NcclResult (*get_version)(int* version) = nullptr;
};

const Api& api() {
  static Api a;
  static std::once_flag once;
  std::call_once(once, [] {
    for (const char* name : {"libnccl.so.2", "libnccl.so"}) {
      a.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (a.lib) break;
    }
    if (!a.lib) {
      const char* e = dlerror();
      a.error = std::string("cannot load libnccl.so.2: ") + (e ? e : "not found") +
                " (tensor parallelism needs NCCL on the library path)";
      return;
    }
    auto sym = [](const char* n) { return dlsym(a.lib, n); };
    a.comm_init_all = reinterpret_cast<decltype(a.comm_init_all)>(sym("ncclCommInitAll"));
    a.all_reduce = reinterpret_cast<decltype(a.all_reduce)>(sym("ncclAllReduce"));
    a.comm_destroy = reinterpret_cast<decltype(a.comm_destroy)>(sym("ncclCommDestroy"));
    a.error_string = reinterpret_cast<decltype(a.error_string)>(sym("ncclGetErrorString"));
    a.get_version = reinterpret_cast<decltype(a.get_version)>(sym("ncclGetVersion"));
    if (!a.comm_init_all || !a.all_reduce || !a.comm_destroy || !a.error_string || !a.get_version) {
      a.error = "libnccl.so.2 lacks ncclCommInitAll / ncclAllReduce / ncclCommDestroy / ncclGetErrorString";
      a.comm_init_all = nullptr;
    }
  });
  return a;
}

Error nccl_error(NcclResult r, std::string_view what) {
  const Api& a = api();
  return internal_error(std::string(what) + ": " + (a.error_string ? a.error_string(r) : "NCCL error") +
                        " (code " + std::to_string(r) + ")")
      .with_reason("NcclError");
}

}  // namespace

std::string NcclGroup::version() {
  const Api& a = api();
  if (!a.comm_init_all) return a.error;
  int v = 0;
  if (a.get_version(&v) != 0) return "unknown";
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

Result<std::unique_ptr<NcclGroup>> NcclGroup::create(const std::vector<int>& devices) {
  const Api& a = api();
  if (!a.comm_init_all) return unavailable(a.error).with_reason("NcclUnavailable");
  std::unique_ptr<NcclGroup> g(new NcclGroup());
  g->comms_.assign(devices.size(), nullptr);
  const NcclResult r = a.comm_init_all(g->comms_.data(), static_cast<int>(devices.size()), devices.data());
  if (r != 0) {
    g->comms_.clear();
    return nccl_error(r, "ncclCommInitAll over " + std::to_string(devices.size()) + " GPUs")
        .with_reason("NcclUnavailable");
  }
  return g;
}

NcclGroup::~NcclGroup() {
  const Api& a = api();
  for (void* c : comms_) {
    if (c && a.comm_destroy) (void)a.comm_destroy(c);
  }
}

Status NcclGroup::all_reduce_sum(int rank, float* data, size_t count, CUstream_st* stream) {
  if (rank < 0 || rank >= size()) return internal_error("all_reduce_sum: rank out of range");
  const NcclResult r =
      api().all_reduce(data, data, count, kNcclFloat32, kNcclSum, comms_[static_cast<size_t>(rank)], stream);
  if (r != 0) return nccl_error(r, "ncclAllReduce");
  return ok_status();
}

}  // namespace infergate::runtime::engine::cuda_detail
