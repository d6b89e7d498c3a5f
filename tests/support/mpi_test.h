#pragma once
// For tests built with weft_add_mpi_test(): the shared main (mpi_test_main.cc) starts MPI once
// and runs every test on every rank; a test reaches the world through test_world().
//
// Every rank runs the same tests in the same order, so a test may use collectives freely. The
// verdict of each test is agreed: it fails if it fails on any rank, and the failures print with
// "[rank r]". A test that may leave an operation unmatched (a timeout, an assertion that returns
// early on one rank) should run it on a communicator split from the world for that test, so the
// next tests start clean.

#include "weft/comm/mpi_communicator.h"

namespace weft::test {

// MPI_COMM_WORLD as a Communicator named "world".
comm::Communicator& test_world();

}  // namespace weft::test
