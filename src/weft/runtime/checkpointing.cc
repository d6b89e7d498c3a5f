#include "weft/runtime/checkpointing.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/core/clock.h"
#include "weft/core/fault.h"
#include "weft/core/pending_file.h"

namespace weft::runtime {
namespace {

// The same verdict on every rank: ok when every rank's status is, else every failing rank's
// problems, each prefixed by the rank.
Status agree(comm::Communicator* world, const Status& mine, const std::string& who) {
  std::string text;
  for (const auto& p : mine.problems()) text += (who.empty() ? "" : who + ": ") + p + "\n";
  Status out;
  for (const std::string& t : comm::all_gather_strings(world, text)) {
    size_t at = 0;
    while (at < t.size()) {
      const size_t end = t.find('\n', at);
      out.add(t.substr(at, end - at));
      at = end + 1;
    }
  }
  return out;
}

// "rank tp0-dp1-pp0" in a job of several processes, else "".
std::string rank_name(const CheckpointJob& job) {
  if (job.world == nullptr || job.world->size() == 1) return "";
  return fmt::format("rank tp{}-dp{}-pp{}", job.tp_rank, job.dp_rank, job.pp_rank);
}

// The pieces of this rank's state it writes (WritePiece) or reads (ReadPiece): in host memory they
// point into the buffers, elsewhere they go through RankState::read/write.
template <class Piece>
std::vector<Piece> rank_pieces(RankState& st, bool moments) {
  constexpr bool kWriting = std::is_same_v<Piece, checkpoint::WritePiece>;
  std::vector<Piece> out;
  for (int j = 0; j < st.num_chunks(); ++j) {
    for (checkpoint::StatePiece& p : checkpoint::state_pieces(st.place(j), kWriting, moments)) {
      Piece piece{std::move(p.tensor), nullptr, {}};
      if (float* host = st.host_buffer(j, p.group)) {
        piece.data = host + p.at;
      } else if constexpr (kWriting) {
        piece.fetch = [&st, j, g = p.group, at = p.at](int64_t begin, int64_t n, float* out) {
          st.read(j, g, at + begin, n, out);
        };
      } else {
        piece.store = [&st, j, g = p.group, at = p.at](int64_t begin, int64_t n, const float* in) {
          st.write(j, g, at + begin, n, in);
        };
      }
      out.push_back(std::move(piece));
    }
  }
  return out;
}

// A save's three parts: rank 0 makes the temporary directory, named after its process
// (collective); every rank writes its files there (local: the writer thread of an asynchronous
// save); rank 0 commits what every rank wrote (collective).
Result<std::string> begin_save(const CheckpointJob& job, const std::string& root, int64_t step) {
  comm::Communicator* world = job.world;
  const bool leader = world == nullptr || world->rank() == 0;
  int64_t token = ::getpid();
  if (world != nullptr) world->broadcast(&token, 1, 0);
  Result<std::string> tmp = std::string();
  if (leader) tmp = checkpoint::begin_save(root, step, token);
  Status s = agree(world, tmp.ok() ? Status() : tmp.status(), rank_name(job));
  if (!s.ok()) return s;
  return fmt::format("{}/{}.tmp-{}", root, checkpoint::step_dir_name(step), token);
}

// `staging`: for pieces without data (a device's state read window by window); none from a
// snapshot.
Result<checkpoint::RankFiles> write_files(const CheckpointJob& job, const std::string& tmp_dir,
                                          std::span<const checkpoint::WritePiece> pieces,
                                          std::span<float> staging, int64_t step) {
  const auto names =
      checkpoint::rank_file_names(job.layout.zero, job.tp_rank, job.dp_rank, job.pp_rank);
  auto files = checkpoint::write_rank_files(tmp_dir, names, pieces, staging);
  fault_point("save", step);  // crash tests: this rank's files written, no metadata yet
  return files;
}

// Returns the checkpoint's bytes (every rank's files). `optimizer_step`: the state's, as it was
// when the files' data was taken (an asynchronous save commits steps later).
Result<int64_t> commit_save(const CheckpointJob& job, const std::string& root,
                            const std::string& tmp_dir, const Result<checkpoint::RankFiles>& files,
                            const checkpoint::TrainState& state, int64_t optimizer_step,
                            int keep_last) {
  comm::Communicator* world = job.world;
  const bool leader = world == nullptr || world->rank() == 0;
  const std::string who = rank_name(job);
  Status s = agree(world, files.ok() ? Status() : files.status(), who);
  if (!s.ok()) {
    if (leader) checkpoint::abort_save(tmp_dir);
    return s;
  }
  // Every rank learns what every rank wrote (for the size); rank 0 commits it.
  checkpoint::Metadata m;
  Status parsed;
  for (const std::string& text :
       comm::all_gather_strings(world, checkpoint::rank_files_to_json(files.value()))) {
    auto f = checkpoint::rank_files_from_json(text);
    if (!f.ok()) {
      parsed.merge(f.status());
      continue;
    }
    for (auto& sh : f.value().shards) m.shards.push_back(std::move(sh));
    for (auto& t : f.value().tensors) m.tensors.push_back(std::move(t));
  }
  int64_t bytes = 0;
  for (const auto& sh : m.shards) bytes += sh.bytes;
  Result<std::string> dir = std::string();
  if (leader) {
    m.model = job.model;
    m.parallel = job.layout;
    m.has_optimizer = true;
    m.adamw = job.state->adamw();
    m.optimizer_step = optimizer_step;
    m.train = state;
    if (parsed.ok()) {
      dir = checkpoint::commit_save(root, tmp_dir, m, keep_last);
    } else {
      checkpoint::abort_save(tmp_dir);
      dir = parsed;
    }
  }
  s = agree(world, dir.ok() ? Status() : dir.status(), who);
  if (!s.ok()) return s;
  return bytes;
}

std::string step_dir(const std::string& root, int64_t step) {
  return (std::filesystem::path(root) / checkpoint::step_dir_name(step)).string();
}

// The writer thread yields the cores to training: it mostly waits on the disk, and its
// checksums and copies should take what the kernels leave (a Linux thread's own nice value).
void lower_this_threads_priority() { (void)::setpriority(PRIO_PROCESS, ::gettid(), 10); }

}  // namespace

std::string CheckpointIo::summary() const {
  std::string text = fmt::format("{:.1f} MB in {:.2f} s, {:.2f} GB/s", bytes / 1e6, seconds,
                                 seconds > 0 ? bytes / seconds / 1e9 : 0.0);
  if (background) text += fmt::format("; in the background, training held {:.2f} s", held);
  return text;
}

Result<CheckpointIo> save_checkpoint(const CheckpointJob& job, const std::string& root,
                                     const checkpoint::TrainState& state, int keep_last) {
  const auto t0 = std::chrono::steady_clock::now();
  auto tmp = begin_save(job, root, state.step);
  if (!tmp.ok()) return tmp.status();
  // Every rank writes its part, straight from its buffers or through its staging buffer.
  const auto files =
      write_files(job, tmp.value(), rank_pieces<checkpoint::WritePiece>(*job.state, true),
                  job.state->staging(), state.step);
  auto bytes =
      commit_save(job, root, tmp.value(), files, state, job.state->step_count(), keep_last);
  if (!bytes.ok()) return bytes.status();
  const double seconds = seconds_since(t0);
  return CheckpointIo{
      step_dir(root, state.step), bytes.value(), seconds, false, seconds, state.step};
}

CheckpointSaver::CheckpointSaver(const CheckpointJob& job, std::string root, int keep_last)
    : job_(job), root_(std::move(root)), keep_last_(keep_last) {}

// The snapshot: every group this rank writes part of, whole, laid out as the files take them
// (checkpoint::write_rank_files): the parameters of every chunk, then from the next 4 KiB boundary
// every chunk's m, then every chunk's v, one after the other. Each file's bytes then lie in
// memory in the file's order, aligned as in the file, and go to disk without a copy (O_DIRECT,
// checkpoint.cc). Each piece sits at its group's offset plus its own.
CheckpointSaver::SnapshotPlan CheckpointSaver::plan_snapshot(RankState& st) {
  constexpr int64_t kBlock = kDirectBlockBytes / int64_t{sizeof(float)};
  SnapshotPlan plan;
  std::vector<std::vector<checkpoint::StatePiece>> chunks;
  for (int j = 0; j < st.num_chunks(); ++j) {
    chunks.push_back(checkpoint::state_pieces(st.place(j), true));
  }
  for (int g = 0; g < 3; ++g) {
    if (g == 1) plan.floats = (plan.floats + kBlock - 1) / kBlock * kBlock;
    for (int j = 0; j < st.num_chunks(); ++j) {
      const int64_t at = plan.floats;
      const size_t before = plan.pieces.size();
      for (checkpoint::StatePiece& p : chunks[j]) {
        if (p.group == g) plan.pieces.emplace_back(std::move(p), at + p.at);
      }
      if (plan.pieces.size() == before) continue;  // it writes no part of this group
      plan.groups.emplace_back(at, j * 3 + g);
      plan.floats += st.group_floats(j);
    }
  }
  return plan;
}

void CheckpointSaver::reserve(int64_t floats) {
  if (floats <= snapshot_floats_) return;
  snapshot_.reset();  // freed before the larger one is taken
  snapshot_ = job_.state->allocate_host(floats * int64_t{sizeof(float)});
  snapshot_floats_ = floats;
  // Every page touched now: a fresh page's first write costs a fault (Backend::allocate_host).
  std::memset(snapshot_.get(), 0, static_cast<size_t>(floats) * sizeof(float));
}

void CheckpointSaver::reserve_snapshot() { reserve(plan_snapshot(*job_.state).floats); }

CheckpointSaver::~CheckpointSaver() {
  if (writer_.joinable()) writer_.join();
}

Status CheckpointSaver::save(const checkpoint::TrainState& state) {
  if (Status s = finish(); !s.ok()) return s;
  auto io = save_checkpoint(job_, root_, state, keep_last_);
  if (!io.ok()) return io.status();
  committed_.push_back(std::move(io).value());
  return {};
}

Status CheckpointSaver::save_async(const checkpoint::TrainState& state) {
  if (Status s = finish(); !s.ok()) return s;
  started_ = std::chrono::steady_clock::now();
  auto tmp = begin_save(job_, root_, state.step);
  if (!tmp.ok()) return tmp.status();
  RankState& st = *job_.state;
  SnapshotPlan plan = plan_snapshot(st);
  reserve(plan.floats);
  float* const base = static_cast<float*>(snapshot_.get());
  for (const auto& [offset, g] : plan.groups) st.snapshot(g / 3, g % 3, base + offset);
  std::vector<checkpoint::WritePiece> pieces;
  for (auto& [p, offset] : plan.pieces) pieces.push_back({std::move(p.tensor), base + offset, {}});
  state_ = state;
  optimizer_step_ = st.step_count();
  tmp_dir_ = tmp.value();
  written_.store(false);
  writer_ = std::thread([this, pieces = std::move(pieces)] {
    lower_this_threads_priority();
    // Tests of a kill during the drain: WEFT_FAULT=slow_save:<ms>[:<rank>] (core/fault.h).
    if (const int64_t ms = fault_value("slow_save"); ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    }
    try {
      job_.state->wait_snapshot();
      files_ = write_files(job_, tmp_dir_, pieces, {}, state_.step);
    } catch (const std::exception& e) {
      files_ = Status::error(
          fmt::format("writing the checkpoint of step {}: {}", state_.step, e.what()));
    }
    drained_ = seconds_since(started_);
    written_.store(true);
  });
  held_ = seconds_since(started_);
  return {};
}

Status CheckpointSaver::poll() {
  if (!in_flight()) return {};
  int32_t writing = written_.load() ? 0 : 1;  // on any rank
  if (job_.world != nullptr && job_.world->size() > 1) {
    job_.world->all_reduce(&writing, 1, comm::ReduceOp::Max);
  }
  return writing == 0 ? commit_in_flight() : Status();
}

Status CheckpointSaver::finish() { return in_flight() ? commit_in_flight() : Status(); }

Status CheckpointSaver::commit_in_flight() {
  const auto t0 = std::chrono::steady_clock::now();
  writer_.join();
  auto bytes = commit_save(job_, root_, tmp_dir_, files_, state_, optimizer_step_, keep_last_);
  if (!bytes.ok()) return bytes.status();
  committed_.push_back(CheckpointIo{step_dir(root_, state_.step), bytes.value(), drained_, true,
                                    held_ + seconds_since(t0), state_.step});
  return {};
}

std::vector<CheckpointIo> CheckpointSaver::take_committed() {
  return std::exchange(committed_, {});
}

Status check_parameters_finite(const CheckpointJob& job) {
  Status mine;
  RankState& st = *job.state;
  const std::span<float> staging = st.staging();
  for (int j = 0; j < st.num_chunks() && mine.ok(); ++j) {
    const float* host = st.host_buffer(j, 0);
    for (const checkpoint::StatePiece& p : checkpoint::state_pieces(st.place(j), false, false)) {
      // In host memory: the whole piece at once; elsewhere, a staging window at a time.
      const int64_t window = host != nullptr ? std::max<int64_t>(p.tensor.count, 1)
                                             : static_cast<int64_t>(staging.size());
      for (int64_t at = 0; at < p.tensor.count && mine.ok(); at += window) {
        const int64_t n = std::min(window, p.tensor.count - at);
        const float* data = host != nullptr ? host + p.at + at : staging.data();
        if (host == nullptr) st.read(j, 0, p.at + at, n, staging.data());
        if (const float* bad = checkpoint::first_non_finite(data, n)) {
          mine =
              Status::error(fmt::format("non-finite parameter {} in {} (element {} of this "
                                        "rank's part)",
                                        *bad, p.tensor.name, p.tensor.begin + at + (bad - data)));
        }
      }
      if (!mine.ok()) break;
    }
  }
  const std::string who = rank_name(job);
  return agree(job.world, mine, who.empty() ? "this process" : who);
}

Result<CheckpointIo> load_checkpoint(const CheckpointJob& job, const std::string& dir,
                                     checkpoint::TrainState& state) {
  const auto t0 = std::chrono::steady_clock::now();
  auto md = checkpoint::read_metadata(dir);
  Status s;
  if (!md.ok()) {
    s = md.status();
  } else if (!md.value().has_optimizer) {
    s = Status::error(fmt::format("{}/{}: the checkpoint has no optimizer state to resume from",
                                  dir, checkpoint::kMetadataFile));
  } else {
    s = checkpoint::load_pieces(dir, md.value(), job.model,
                                rank_pieces<checkpoint::ReadPiece>(*job.state, true));
  }
  // Every rank reads the same metadata, so most problems are everyone's: report them once.
  Status all = agree(job.world, s, rank_name(job));
  if (!all.ok()) return s.ok() ? all : s;
  job.state->loaded(static_cast<int>(md.value().optimizer_step));
  state = md.value().train;
  int64_t bytes = 0;
  for (const auto& sh : md.value().shards) bytes += sh.bytes;
  return CheckpointIo{dir, bytes, seconds_since(t0)};
}

}  // namespace weft::runtime
