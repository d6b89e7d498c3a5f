#pragma once
// A Communicator that makes a missing Work::wait() or Work::order() fail deterministically on the
// host. On a GPU the communicator runs on its own stream, concurrently with the compute stream
// (docs/cuda.md, "Streams and events"): a runtime that reads a collective's result before waiting
// or ordering its Work, writes an op's input or output buffer while the op is in flight, or drops
// a Work without finishing it races on the device, and on a host communicator (where the ops are
// in effect complete when they return) it usually works by luck. Wrapped in this checker, every
// such mistake shows on the host:
//  - each *_async op copies the caller's input into private buffers and runs the wrapped
//    communicator's op on them, so the op's data never reaches the caller's buffers before the
//    Work is finished;
//  - the caller's output range is poisoned with 0xFF bytes (NaN for floating point, -1 for
//    integers), so a kernel that reads the result early computes with NaN and the losses show it;
//  - wait() and order() (the same here: the checker needs the result on the host) wait the wrapped
//    op, throw weft::Error if the caller wrote the op's input or output in the meantime, and only
//    then copy the result into the caller's output;
//  - a Work destroyed unfinished is recorded (a destructor cannot throw), and the next op, barrier
//    or wait on any communicator of the checker's family (it and its splits) throws with the op's
//    name; check_ordering() throws the same at the end of a run. A Work dropped while an exception
//    is propagating is not recorded: the run is failing already, and its Works cannot be finished.
// Every violation is kept: once one is recorded, every later op of the family throws.
//
// For tests and debugging only: it costs one private copy of every op's buffers while the op is in
// flight, and host memcpys around every op. Host buffers only (it reads and writes them).

#include <memory>

#include "weft/comm/communicator.h"

namespace weft::comm {

// rank(), size() and name() are inner's; the timeout starts as inner's, and one set on the checker
// is passed to inner before each op and split. split() returns a checker over inner's split that
// shares this one's record of violations.
std::unique_ptr<Communicator> make_ordering_checker(std::unique_ptr<Communicator> inner);

// Throws weft::Error listing the violations recorded so far by `checker`'s family; returns when
// there are none. `checker` must come from make_ordering_checker (or a split of one).
void check_ordering(const Communicator& checker);

}  // namespace weft::comm
