#pragma once
// Each `weft <command>` is one add_*_command() that registers a CLI11 subcommand and its callback.
// Callbacks report user errors by throwing weft::Error; main() prints the message and exits 1.

namespace CLI {
class App;
}

namespace weft::cli {

void add_bench_command(CLI::App& app);     // weft bench step ...
void add_schedule_command(CLI::App& app);  // weft schedule ...

}  // namespace weft::cli
