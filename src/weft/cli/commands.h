#pragma once
// Each `weft <command>` is one add_*_command() that registers a CLI11 subcommand and its callback.
// Callbacks report user errors by throwing weft::Error; main() prints the message and exits 1.

namespace CLI {
class App;
}

namespace weft::cli {

void add_bench_command(CLI::App& app);       // weft bench step ...
void add_schedule_command(CLI::App& app);    // weft schedule ...
void add_tokenizer_command(CLI::App& app);   // weft tokenizer train|encode|decode ...
void add_preprocess_command(CLI::App& app);  // weft preprocess --input --tokenizer --output
void add_train_command(CLI::App& app);       // weft train RUN.toml [--set k=v]... [--resume [DIR]]
void add_generate_command(CLI::App& app);    // weft generate --checkpoint DIR --prompt ...
void add_plot_command(CLI::App& app);        // weft plot METRICS.jsonl -o loss.svg

}  // namespace weft::cli
