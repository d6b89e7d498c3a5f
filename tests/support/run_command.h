#pragma once
// Running a command line as a user would, for end-to-end tests of the `weft` binary.

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace weft::test {

struct CommandOutput {
  int rc = -1;       // exit status; 128 + signal when killed
  std::string text;  // stdout and stderr together
};

// Runs `command` through /bin/sh and waits for it.
inline CommandOutput run_command(const std::string& command) {
  CommandOutput o;
  const std::string cmd = command + " 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return o;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) o.text.append(buf, n);
  const int status = ::pclose(p);
  o.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return o;
}

}  // namespace weft::test
