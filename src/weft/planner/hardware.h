#pragma once
// A cluster preset (configs/clusters/*.toml): one device's peak rates and memory, the GEMM
// efficiency model's constants, and the links between devices inside a package, inside a node and
// across nodes. docs/planner.md §2 explains every field; each preset cites the source of its
// numbers in comments.
//
//   Result<Cluster> c = load_cluster("configs/clusters/dgx-a100.toml");

#include <string>

#include "weft/core/status.h"
#include "weft/model/memory.h"

namespace weft::planner {

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;  // bytes

// Number formats a device has a peak rate for. bf16 and fp16 run on tensor cores (GPU); fp32 is
// what weft's CPU trainer computes in.
enum class NumberFormat { BF16, FP16, TF32, FP32 };
std::string_view number_format_name(NumberFormat f);

// One kind of link, as one device sees it: alpha (latency per message) and beta (1/bandwidth).
// `bandwidth` is the achievable one-direction rate per device in bytes/s (what a large ring
// collective's bus bandwidth reaches), not the marketing bidirectional figure.
struct Link {
  double bandwidth = 0;  // bytes/s, one direction, per device
  double latency = 0;    // s per message (alpha)
  // Where a collective's implementation moves its bytes at another rate than the all-reduce
  // `bandwidth` was measured with (0: `bandwidth`), as `weft calibrate` measures on CPU ranks:
  // weft's own ring reduce-scatter (comm/mpi_communicator.cc) and Open MPI's all-gather are other
  // code than Open MPI's all-reduce (this machine, 2 ranks, three runs: reduce-scatter 7.3-7.7,
  // all-gather 8.9-10.2, all-reduce 8.9-9.4 GB/s). Vendor presets leave them 0: NCCL's ring
  // collectives run at the link's rate.
  double reduce_scatter_bandwidth = 0, all_gather_bandwidth = 0;
  bool present() const { return bandwidth > 0; }
};

// GEMM time model (docs/planner.md §3.1): a GEMM [M,K] x [K,N] is cut into tile_m x tile_n
// output tiles spread over `compute_units` (SMs, CUs, cores) in waves; its time is
//   max(min_time, 2MNK / (peak * efficiency * wave_eff(M, N) * K / (K + k_half)))
// where wave_eff is the useful fraction of the tiles x waves the hardware executes.
struct GemmModel {
  int compute_units = 1;
  int tile_m = 128, tile_n = 128;
  double efficiency = 0.75;  // fraction of the peak a large, well-shaped GEMM reaches
  double k_half = 0;         // the K at which the K loop's fixed cost halves the rate
  double min_time = 0;       // s: the shortest a GEMM call takes (launch, synchronization)
};

struct Cluster {
  std::string name;
  std::string description;
  std::string device;           // "A100-SXM4-80GB"
  int devices_per_node = 1;     // GPUs (GCDs for MI250X; 1 for a CPU process)
  int devices_per_package = 1;  // 2 for MI250X: its two GCDs share a package
  int max_nodes = 0;            // 0: no limit
  double memory_bytes = 0;      // per device
  double reserved_bytes = 0;    // per device: runtime context, allocator slack (not usable)
  // [memory] runtime_mib: what one of weft's CPU training processes holds beyond its model's
  // buffers (code pages, JIT-generated GEMM kernels, the libraries' heap temporaries), as
  // model::MemoryCounting's `runtime_bytes`; `weft calibrate` measures it on its machine.
  // Absent: model::kDefaultRuntimeBytes.
  int64_t runtime_bytes = model::kDefaultRuntimeBytes;
  double memory_bandwidth = 0;   // bytes/s per device, spec
  double memory_efficiency = 1;  // fraction of memory_bandwidth streaming kernels reach
  // [memory] optimizer_bandwidth_gbps: the bytes per second the optimizer step streams (AdamW,
  // fp32: reads parameter, gradient and both moments, writes all but the gradient; 28 bytes per
  // parameter), as `weft calibrate` times cpu::adamw_update. Seven streams at once reach more
  // than a copy's two: this machine, one thread, 31 GB/s against the copy's 17, so priced at the
  // copy's rate the step of a rank's 4.2M parameters took 8 ms in the planner and 3.8 in weft.
  // 0 (a preset without the key, every vendor preset): memory_bandwidth x memory_efficiency.
  double optimizer_bandwidth = 0;
  double peak_bf16 = 0, peak_fp16 = 0, peak_tf32 = 0, peak_fp32 = 0;  // FLOP/s per device
  GemmModel gemm;
  // [attention] flash_forward_tflops / flash_backward_tflops (docs/planner.md §3.4): the device
  // runs attention as one fused kernel (FlashAttention-2's algorithm, as weft's GPU trainer does:
  // kernels/cuda), which never writes the T x T scores: the planner prices a layer's attention at
  // these rates instead of as batched GEMMs plus a softmax over the scores in memory. Rates counted
  // as FlashAttention-2 counts (causal forward 2 B NH T^2 HS FLOPs; backward 2.5x that). 0 (a
  // preset without the table): the materialized attention of Megatron-LM 2021, the published rows'.
  double flash_forward = 0, flash_backward = 0;  // FLOP/s
  bool flash_attention() const { return flash_forward > 0; }
  Link package;  // between the devices of one package (absent: use `node`)
  Link node;     // between devices of one node (NVLink/NVSwitch, Infinity Fabric, shared memory)
  Link network;  // across nodes, per device (its share of the node's NICs)
  // [calibration]: factors refitted from real training steps (weft tune,
  // planner/calibration_fit.h) on top of the kernel and link constants above, which stay what
  // the spec sheet or `weft calibrate` says. compute_scale multiplies every kernel's time (GEMMs
  // and memory-bound kernels, the optimizer step included); step_overhead is added to each step
  // (the optimizer step of every pipeline rank): what a real step spends outside the kernels the
  // planner prices (the framework's own work, synchronization, allocator). `note` says what was
  // refitted, from which trials.
  double compute_scale = 1;  // > 0
  double step_overhead = 0;  // s per step, >= 0
  // weight_passes: what each linear layer's GEMM call costs beyond its FLOPs, in passes over its
  // weight-sized operand (the weight for the forward and the input gradient, the weight gradient
  // it accumulates into for the weight gradient) at the memory bandwidth above
  // (cost_model.h, weight_pass_time). A cost per call, so per microbatch: a step of 8
  // microbatches of 1 sequence pays it 8 times, one microbatch of 8 once. `weft calibrate` times
  // each GEMM shape again and again on the same operands, so the weights stay in cache and its
  // GEMM model never sees this; inside a step every layer's weights come back from L3 or memory
  // once per microbatch. Measured on this machine's CPU (bench/tune/weight_passes.sh: oneDNN
  // sgemm, 1 thread, the tune bench's shapes, weights rotating through 24 MB): a linear layer's
  // forward at 64 rows took 9-399 us more per call than 1/8 of one at 512 rows, in proportion to
  // the weight (73-128 us per MiB, about one pass at 8-14 GB/s); its backward 1.0-1.6x that;
  // a step of 8 microbatches of 1 took 111.8 ms against 84.3 for 1 of 8, all of it in GEMMs.
  // 0 (a preset without the key; a GPU, whose GEMMs overlap their weight reads with their math):
  // no such cost.
  double weight_passes = 0;  // >= 0
  // tp_collective_overhead: what each tensor-parallel collective inside a step costs beyond its
  // alpha-beta time on the link (cost_model.h, collective_time), once per call. `weft calibrate`
  // times collectives on ranks that start them together, again and again on the same buffers;
  // inside a step the ranks reach each of the layer's collectives at different times (the
  // faster rank waits for the slower one's kernels since the last collective) with data the
  // other core just wrote. Data parallelism meets the other ranks once per step, tensor
  // parallelism 2-4 times per layer and microbatch. Fitted from this machine's trials
  // (bench/tune/run.sh 2, 2 ranks on 2 cores): tp2 layouts, 19-72 collectives per step, measured
  // 6-17% slower than predicted where dp2 layouts were within a few percent; 100-300 us per
  // call took both to within 10% (the committed preset: 160; docs/planner.md §12). 0 (a preset
  // without the key): no such cost.
  double tp_collective_overhead = 0;  // s per call, >= 0
  // gemm_speed: how fast the machine ran GEMMs when the factors above were fitted, against the
  // [gemm] model (planner/gemm_fit.h, gemm_speed: the model's time of a run's GEMM shapes over
  // their measured time). `weft calibrate` writes its own fit's (near 1); a refit by `weft tune`
  // the fastest of the speeds it probed before and between its trials. `weft tune` compares the
  // speed it probes with this one and warns when they are far apart (kForeignPresetSpeed,
  // calibration_fit.h): two hosts of this machine's kind ran GEMMs 2.3x apart, and a preset
  // calibrated on one priced the other's steps 40-50% fast. Not a price: the planner's times do
  // not read it. 0 (a preset without the key, every vendor preset): not measured.
  double gemm_speed = 0;  // >= 0
  std::string calibration_note;

  double peak(NumberFormat f) const;  // 0 when the device has no such rate
  double usable_memory() const { return memory_bytes - reserved_bytes; }
};

// Every problem at once (missing keys, unknown keys with a suggestion, values out of range).
Status validate(const Cluster& c);
Result<Cluster> parse_cluster(const std::string& toml_text, const std::string& origin);
Result<Cluster> load_cluster(const std::string& path);
// The TOML text of a preset (what `weft calibrate` and `weft tune` write);
// parse_cluster(to_toml(c)) == c. `header_comment`: text above the tables, each line made a
// comment ("# " added where it lacks '#').
std::string to_toml(const Cluster& c, const std::string& header_comment = "");

}  // namespace weft::planner
