// weft plot METRICS.jsonl -o loss.svg: training and validation loss against the step, as an SVG
// (plot/plot.h), written atomically.

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <filesystem>
#include <memory>

#include "weft/cli/commands.h"
#include "weft/plot/plot.h"

namespace weft::cli {

void add_plot_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("plot", "Plot the loss curves of a metrics file as SVG");
  struct Options {
    std::string metrics, output, title;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("METRICS", o->metrics, "metrics.jsonl written by weft train")->required();
  cmd->add_option("-o,--output", o->output, "SVG to write (default: loss.svg next to METRICS)");
  cmd->add_option("--title", o->title, "chart title (default: the run directory's name)");
  cmd->callback([o] {
    std::string out = o->output;
    if (out.empty()) out = (std::filesystem::path(o->metrics).parent_path() / "loss.svg").string();
    plot::write_loss_plot(o->metrics, out, o->title).throw_if_error("cannot plot");
    fmt::print(stderr, "weft plot: wrote {}\n", out);
  });
}

}  // namespace weft::cli
