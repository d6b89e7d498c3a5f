#pragma once
// The NCCL communicator (DESIGN.md §4; docs/cuda.md, "Communicators on device buffers"): a
// Communicator whose buffers are device memory on one GPU, one rank per GPU. Built when CMake
// finds NCCL (cmake/WeftCuda.cmake); otherwise make_nccl_communicator throws and have_nccl() is
// false.
//
// Every operation is enqueued on the communicator's stream and returns a Work whose order() makes
// the compute stream wait for a CUDA event recorded after it, without a host wait
// (cudaStreamWaitEvent), and whose wait() waits for that event on the host: it polls the event (and
// NCCL's asynchronous error state) and, after timeout_seconds(), aborts the NCCL communicator
// (ncclCommAbort) and throws weft::Error naming the op and the group, so no rank hangs forever on a
// peer that died (DESIGN.md §5). The communicator is NCCL's nonblocking kind
// (ncclConfig_t::blocking = 0), so initialization, split and the host side of each call (which may
// wait for peers in NCCL's own code) are bounded by the same timeout. After an abort every
// operation on the communicator throws. The ordered operations are waited the same way by
// wait_ordered(), which the runtime calls once per step: a peer that died mid-step surfaces there,
// not as a stream that never finishes.
//
// The streams: the operations run on a non-blocking stream the communicator owns; `compute` is
// the stream of the caller's kernels (the CUDA backend's: Backend::cuda_stream), else the legacy
// default stream. Each operation starts after the work queued on `compute` (an event), so a buffer
// the caller's kernels wrote is complete when NCCL reads it, and order() queues `compute`'s later
// work behind it: the operation overlaps the kernels in between. The legacy default stream
// follows blocking streams only: the CUDA backend's stream is non-blocking, so the trainer passes
// it as `compute` (cli/device.cc). Results may be used once the Work's wait() returns (or by work
// ordered after it). A Work that is dropped does not stop its operation: the buffers must live
// until the stream has passed it. Groups split from this one get a stream of their own and share
// its compute stream.
//
// Differences from the MPI communicator that callers must know:
//   - send/recv ignore `tag`: NCCL matches point-to-point messages between two ranks by their
//     order alone, so the n-th send to a peer meets that peer's n-th receive from this rank. A
//     caller relying on tags to match messages out of order gets the wrong data (or a deadlock).
//     A send to oneself is rejected (NCCL would need it grouped with its receive).
//   - A single ncclSend/ncclRecv blocks its stream until the peer posts the matching call, so two
//     ranks that both send first on one stream deadlock on the GPU (until the timeout).
//   Both break the communication model of weft's pipeline runner (docs/schedules.md: eager sends,
//   receives matched by tag), whose interleaved and 1F1B programs send and receive in either
//   order: pipeline parallelism over NCCL needs the runner to group each exchange
//   (ncclGroupStart/End) or to send on a stream of its own, and to post messages in matching
//   order. Until then pp runs over the staged communicator, whose sends are eager.
//   - reduce_scatter in place is NCCL's form, out == in + rank*n (MPI's is out == in); other
//     overlapping buffers are rejected. all_gather in place is in == out + rank*n, as for MPI.
//   - split() with a negative color returns nullptr (NCCL_SPLIT_NOCOLOR: the rank takes part in
//     the split and joins no group); the other backends reject a negative color.
//   - U8 cannot be reduced (as for MPI), although NCCL could.

#include <memory>
#include <string>

#include "weft/comm/communicator.h"

struct CUstream_st;

namespace weft::comm::cuda {

// Whether weft_comm_cuda was built with NCCL.
bool have_nccl();

// A communicator over the ranks of `bootstrap` (a host communicator, MPI's or the Local one) on
// GPU `device` of this process: rank 0 makes NCCL's unique id (ncclGetUniqueId), bootstrap
// broadcasts it, and every rank joins (ncclCommInitRankConfig) with its bootstrap rank. Collective
// over bootstrap; rank, size and timeout are bootstrap's. NCCL refuses two ranks on one device.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device,
                                                     const std::string& name,
                                                     CUstream_st* compute = nullptr);

}  // namespace weft::comm::cuda
