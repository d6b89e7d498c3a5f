#pragma once
// What every fuzz target holds a parser to: any input is either accepted, and then the result is
// usable (checked by the target), or rejected with a Status error or a weft::Error. Anything else
// (a crash, a sanitizer report, another exception, a hang) fails the run. WEFT_FUZZ_EXPECT states a
// property of an accepted result; its failure aborts, so libFuzzer records the input.

#include <cstdio>
#include <cstdlib>

#define WEFT_FUZZ_EXPECT(cond)                                                               \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: accepted input breaks: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)
