// weft: train GPT models across processes, and plan such runs. Each subcommand lives in its own
// *_command.cc; this file only wires them and turns errors into a message and exit code 1.

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "weft/cli/commands.h"
#include "weft/core/stop_signals.h"
#include "weft/core/suggest.h"
#include "weft_version.h"  // generated: version.cmake

int main(int argc, char** argv) {
  weft::route_stop_signals();  // before any thread: see core/stop_signals.h
  CLI::App app{"weft: train GPT models with tensor, pipeline and data parallelism"};
  app.require_subcommand(1);
  app.set_version_flag("--version",
                       std::string("weft ") + WEFT_VERSION + " (commit " + WEFT_COMMIT + ")");
  // Every option bound to a variable shows its default in --help (subcommands inherit this).
  app.option_defaults()->always_capture_default();
  using namespace weft::cli;
  for (auto add :
       {add_bench_command, add_schedule_command, add_tokenizer_command, add_preprocess_command,
        add_train_command, add_generate_command, add_plot_command, add_plan_command,
        add_simulate_command, add_calibrate_command, add_ckpt_command, add_tune_command}) {
    add(app);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // `weft trian ...`: CLI11 only says the argument was not expected; name the commands.
    if (app.get_subcommands().empty() && argc > 1 && argv[1][0] != '-') {
      std::vector<std::string> names;
      for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
      std::string list;
      for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
      std::fprintf(stderr, "weft: error: unknown command '%s'%s\ncommands: %s (weft --help)\n",
                   argv[1], weft::did_you_mean(argv[1], names).c_str(), list.c_str());
      return static_cast<int>(CLI::ExitCodes::ExtrasError);
    }
    return app.exit(e);
  } catch (const weft::cli::ExitQuietly& e) {
    return e.code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weft: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
