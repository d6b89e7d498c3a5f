#include "weft/planner/config.h"

#include <fmt/format.h>

#include <charconv>
#include <vector>

#include "weft/core/suggest.h"
#include "weft/schedule/schedule.h"

namespace weft::planner {

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::FP32:
      return "fp32";
    case Precision::BF16Mixed:
      return "bf16-mixed";
  }
  return "?";
}

Result<Precision> parse_precision(std::string_view name) {
  for (Precision p : {Precision::FP32, Precision::BF16Mixed}) {
    if (precision_name(p) == name) return p;
  }
  return Status::error(fmt::format("unknown precision '{}'{}: fp32 or bf16-mixed", name,
                                   did_you_mean(name, {"fp32", "bf16-mixed"})));
}

PrecisionBytes precision_bytes(Precision p) {
  switch (p) {
    case Precision::FP32:
      return {.weight = 4, .grad = 4, .optimizer = 8, .activation = 4};
    case Precision::BF16Mixed:
      return {.weight = 2, .grad = 4, .optimizer = 12, .activation = 2};
  }
  return {};
}

namespace {

bool parse_int(std::string_view v, int& out) {
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  return ec == std::errc() && ptr == v.data() + v.size();
}

}  // namespace

Result<ParallelConfig> parse_parallel_config(std::string_view text, int world) {
  ParallelConfig c;
  Status s;
  bool dp_given = false;
  const std::vector<std::string> keys = {"tp",       "pp",        "dp", "vp",  "mb",
                                         "schedule", "recompute", "sp", "zero"};
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = text.substr(pos, end - pos);
    pos = end + 1;
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      s.add(fmt::format("'{}' is not key=value", item));
      continue;
    }
    const std::string key(item.substr(0, eq));
    const std::string_view value = item.substr(eq + 1);
    auto integer = [&](int& out) {
      if (!parse_int(value, out)) s.add(fmt::format("{}={} must be an integer", key, value));
    };
    if (key == "tp") {
      integer(c.tp);
    } else if (key == "pp") {
      integer(c.pp);
    } else if (key == "dp") {
      integer(c.dp);
      dp_given = true;
    } else if (key == "vp") {
      integer(c.vp);
    } else if (key == "mb") {
      integer(c.micro_batch);
    } else if (key == "zero") {
      integer(c.zero);
    } else if (key == "sp") {
      int v = 0;
      integer(v);
      c.sequence_parallel = v != 0;
    } else if (key == "schedule") {
      if (auto k = schedule::parse_kind(value); k.ok()) {
        c.schedule = k.value();
      } else {
        s.merge(k.status());
      }
    } else if (key == "recompute") {
      if (auto r = model::parse_recompute(value)) {
        c.recompute = *r;
      } else {
        s.add(fmt::format("recompute={} must be none, selective or full", value));
      }
    } else {
      s.add(fmt::format("unknown key '{}'{}", key, did_you_mean(key, keys)));
    }
  }
  if (!dp_given && c.tp > 0 && c.pp > 0) {
    if (world % (c.tp * c.pp) != 0) {
      s.add(fmt::format("world {} is not divisible by tp*pp = {}", world, c.tp * c.pp));
    } else {
      c.dp = world / (c.tp * c.pp);
    }
  }
  if (!s.ok()) return s;
  return c;
}

std::string to_string(const ParallelConfig& c) {
  return fmt::format("tp={},pp={},dp={},vp={},mb={},schedule={},recompute={},sp={},zero={}", c.tp,
                     c.pp, c.dp, c.vp, c.micro_batch, schedule::kind_name(c.schedule),
                     model::recompute_name(c.recompute), c.sequence_parallel ? 1 : 0, c.zero);
}

std::string short_name(const ParallelConfig& c) {
  std::string out = fmt::format("tp{} pp{} dp{}", c.tp, c.pp, c.dp);
  if (c.vp > 1) out += fmt::format(" vp{}", c.vp);
  out += fmt::format(" mb{} {} {}", c.micro_batch, schedule::kind_name(c.schedule),
                     model::recompute_name(c.recompute));
  if (c.sequence_parallel) out += " sp";
  if (c.zero > 0) out += fmt::format(" z{}", c.zero);
  return out;
}

Status validate(const Job& job) {
  Status s = model::validate_for_run(job.model, job.seq_len);
  if (job.global_batch <= 0) s.add(fmt::format("global batch {} must be > 0", job.global_batch));
  if (job.world <= 0) s.add(fmt::format("world {} must be > 0", job.world));
  if (job.tokens < 0) s.add(fmt::format("tokens {} must be >= 0", job.tokens));
  return s;
}

Status validate(const ParallelConfig& c, const Job& job) {
  Status s;
  auto positive = [&](const char* key, int v) {
    if (v < 1) s.add(fmt::format("{}={} must be >= 1", key, v));
  };
  positive("tp", c.tp);
  positive("pp", c.pp);
  positive("dp", c.dp);
  positive("vp", c.vp);
  positive("mb", c.micro_batch);
  if (c.zero < 0 || c.zero > 3) s.add(fmt::format("zero={} must be 0, 1, 2 or 3", c.zero));
  if (!s.ok()) return s;
  const model::GptConfig& m = job.model;
  if (c.tp * c.pp * c.dp != job.world) {
    s.add(fmt::format("tp*pp*dp = {}*{}*{} = {} does not equal the world size {}", c.tp, c.pp, c.dp,
                      c.tp * c.pp * c.dp, job.world));
  }
  if (m.n_head % c.tp != 0) {
    s.add(fmt::format("n_head={} is not divisible by tp={}", m.n_head, c.tp));
  }
  if (m.padded_vocab() % c.tp != 0) {
    s.add(
        fmt::format("the padded vocabulary {} is not divisible by tp={}", m.padded_vocab(), c.tp));
  }
  if (c.sequence_parallel && c.tp == 1) s.add("sequence parallelism needs tp > 1");
  if (c.sequence_parallel && job.seq_len % c.tp != 0) {
    s.add(fmt::format("sequence length {} is not divisible by tp={} (sequence parallelism)",
                      job.seq_len, c.tp));
  }
  if (m.n_layer % (c.pp * c.vp) != 0) {
    s.add(fmt::format("n_layer={} is not divisible by pp*vp = {}*{} (equal stages)", m.n_layer,
                      c.pp, c.vp));
  }
  if (job.global_batch % (c.dp * c.micro_batch) != 0) {
    s.add(fmt::format("global batch {} is not divisible by dp*mb = {}*{}", job.global_batch, c.dp,
                      c.micro_batch));
  } else {
    s.merge(schedule::check_shape(c.schedule,
                                  {.pp = c.pp, .vp = c.vp, .microbatches = c.microbatches(job)}));
  }
  return s;
}

}  // namespace weft::planner
