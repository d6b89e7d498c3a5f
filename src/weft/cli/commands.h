#pragma once
// Each `weft <command>` is one add_*_command() that registers a CLI11 subcommand and its callback.
// Callbacks report user errors by throwing weft::Error; main() prints the message and exits 1.

namespace CLI {
class App;
}

namespace weft::cli {

// Thrown to end the process with `code` and no message: another rank already reported the
// problem every rank found (weft train under mpirun).
struct ExitQuietly {
  int code = 1;
};

void add_bench_command(CLI::App& app);       // weft bench step ...
void add_schedule_command(CLI::App& app);    // weft schedule ...
void add_tokenizer_command(CLI::App& app);   // weft tokenizer train|encode|decode ...
void add_preprocess_command(CLI::App& app);  // weft preprocess --input --tokenizer --output
void add_train_command(CLI::App& app);       // weft train RUN.toml [--set k=v]... [--resume [DIR]]
void add_generate_command(CLI::App& app);    // weft generate --checkpoint DIR --prompt ...
void add_plot_command(CLI::App& app);        // weft plot METRICS.jsonl -o loss.svg
void add_plan_command(CLI::App& app);        // weft plan --model --cluster --gpus ... | --check
void add_simulate_command(CLI::App& app);    // weft simulate --model --cluster --gpus --config
void add_calibrate_command(CLI::App& app);   // weft calibrate [-o this-machine.toml]
void add_ckpt_command(CLI::App& app);        // weft ckpt inspect|export-hf|import-hf ...
void add_tune_command(CLI::App& app);        // weft tune RUN.toml [--budget-minutes M] ...

}  // namespace weft::cli
