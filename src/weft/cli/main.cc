// weft: train GPT models across processes, and plan such runs. Each subcommand lives in its own
// *_command.cc; this file only wires them and turns errors into a message and exit code 1.

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "weft/cli/commands.h"
#include "weft/core/check.h"
#include "weft/core/stop_signals.h"

int main(int argc, char** argv) {
  weft::route_stop_signals();  // before any thread: see core/stop_signals.h
  CLI::App app{"weft: train GPT models with tensor, pipeline and data parallelism"};
  app.require_subcommand(1);
  weft::cli::add_bench_command(app);
  weft::cli::add_schedule_command(app);
  weft::cli::add_tokenizer_command(app);
  weft::cli::add_preprocess_command(app);
  weft::cli::add_train_command(app);
  weft::cli::add_generate_command(app);
  weft::cli::add_plot_command(app);
  weft::cli::add_plan_command(app);
  weft::cli::add_simulate_command(app);
  weft::cli::add_calibrate_command(app);
  weft::cli::add_ckpt_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const weft::cli::ExitQuietly& e) {
    return e.code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weft: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
