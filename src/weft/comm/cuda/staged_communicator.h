#pragma once
// The staged communicator (docs/cuda.md, "Communicators on device buffers"): a Communicator whose
// buffers are device memory, over a host communicator (MPI's, or the Local one) whose transport
// works on host memory. Every operation copies device -> pinned host, runs the host
// communicator's operation on the host copy and copies the result back. This is how several
// processes that share one GPU run tp/pp/dp together (issue #8: NCCL refuses two ranks of one
// communicator on the same device), and how ranks communicate where NCCL is missing.
//
// Collectives go through one pinned staging buffer, in chunks when a buffer is larger than it:
// all_reduce and broadcast by consecutive elements, reduce_scatter and all_gather by rows (elements
// j..j+k of every rank's block at once, so each chunk is itself a reduce_scatter/all_gather of k
// elements). A collective completes before its *_async call returns and returns a completed Work:
// overlapping the chunks of one buffer on two staging buffers, and a collective with the caller's
// computation, is a later optimization. Every rank of a group must use the same staging size (the
// chunks of one collective must match); split() hands it down.
//
// send/recv are not chunked (a message matches one message on the peer, whatever its staging
// size) and are asynchronous like the host communicator's: send copies the device buffer into a
// pinned message buffer and starts the host send, so the device buffer is free when send_async
// returns and the Work waits for the host send; recv starts the host receive into a pinned
// message buffer and its Work's wait() copies the message to the device. A pipeline schedule
// whose sends are asynchronous (runtime/pipeline_runner.cc posts a send, then blocks in a
// receive) therefore cannot deadlock here when it does not over MPI. The message buffers are
// pooled: one is reused once the Work that held it is complete and gone, so a training step
// allocates none after the first.
//
// Copies run on `stream`, so an operation reads its device buffer after the kernels the caller
// queued there before it, and its results are written before the caller's later kernels run; it
// waits for its copies before using the host copy. A caller whose kernels run on a non-blocking
// stream (the CUDA backend's: Backend::cuda_stream) must pass that stream. The default, the legacy
// default stream, is ordered after the work of blocking streams only.
//
// The pinned memory (staging buffer and message pool) is shared by the groups split from one
// communicator: each collective finishes before it returns, and weft drives MPI from one thread
// (MPI_THREAD_FUNNELED, mpi_communicator.cc), so two operations never use it at once.

#include <cstddef>
#include <memory>

#include "weft/comm/communicator.h"

struct CUstream_st;

namespace weft::comm::cuda {

// Wraps `host` (which it owns). name(), rank(), size() are host's; timeout_seconds() starts as
// host's, and a timeout set on the staged communicator is passed to host before each operation.
// `staging_bytes` (> 0) is the pinned buffer of the collectives: a reduce_scatter or all_gather
// needs room for at least size()+1 elements. Needs a CUDA device (cudaMallocHost).
inline constexpr size_t kDefaultStagingBytes = size_t{64} << 20;
std::unique_ptr<Communicator> make_staged_communicator(std::unique_ptr<Communicator> host,
                                                       size_t staging_bytes = kDefaultStagingBytes,
                                                       CUstream_st* stream = nullptr);

}  // namespace weft::comm::cuda
