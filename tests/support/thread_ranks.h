#pragma once
// Runs `world` ranks as threads of this process over thread communicators
// (support/thread_communicator.h): rank r returns fn(its world communicator). A rank that throws is
// one test failure naming the rank, `what` and its message; its result is then default-made.

#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "support/thread_communicator.h"

namespace weft::test {

template <typename Result, typename Fn>
std::vector<Result> run_thread_ranks(int world, const std::string& what, Fn fn) {
  auto worlds = comm::make_thread_communicators(world);
  std::vector<Result> out(world);
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        out[r] = fn(*worlds[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int r = 0; r < world; ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": rank " << r << ": " << e.what();
    }
  }
  return out;
}

}  // namespace weft::test
