#include "weft/planner/tune.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>
#include <string_view>
#include <tuple>

#include "weft/core/clock.h"
#include "weft/core/xml.h"
#include "weft/schedule/instr.h"

namespace weft::planner {

namespace {

// The expected wall time of the next trial of `c`, from what the search has measured so far.
double estimate_trial_seconds(const TuneOutcome& out, const CandidateRecord& c, int warmup,
                              int steps) {
  std::vector<double> ratios;
  double overhead = 0;
  int measured = 0;
  for (const CandidateRecord& r : out.records) {
    for (const TrialResult& t : r.successful()) {
      if (r.candidate.predicted_seconds > 0) {
        ratios.push_back(t.step_seconds / r.candidate.predicted_seconds);
      }
      // Building and tearing down the engine, and the warm-up's first-touch cost.
      overhead += std::max(0.0, t.wall_seconds - (warmup + t.steps) * t.step_seconds);
      ++measured;
    }
  }
  const TrialResult* last = c.latest();
  const double ratio = ratios.empty() ? 1.0 : median(ratios);
  const double step = last ? last->step_seconds : c.candidate.predicted_seconds * ratio;
  return (warmup + steps) * step + (measured > 0 ? overhead / measured : 0.0);
}

// The comment that ends a TOML line ("  # ..."), outside double-quoted strings; "" if none.
std::string trailing_comment(const std::string& line) {
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\\' && quoted) {
      ++i;
    } else if (line[i] == '"') {
      quoted = !quoted;
    } else if (line[i] == '#' && !quoted) {
      size_t start = i;
      while (start > 0 && (line[start - 1] == ' ' || line[start - 1] == '\t')) --start;
      return line.substr(start);
    }
  }
  return "";
}

size_t skip_blanks(std::string_view line, size_t at) {
  while (at < line.size() && std::isspace(static_cast<unsigned char>(line[at]))) ++at;
  return at;
}

// The bare name at `at` ([A-Za-z0-9_-]+, and '.' in a section's, `dotted`); `at` is moved past it.
std::string_view bare_name(std::string_view line, size_t& at, bool dotted) {
  const size_t begin = at;
  while (at < line.size() && (std::isalnum(static_cast<unsigned char>(line[at])) ||
                              line[at] == '_' || line[at] == '-' || (dotted && line[at] == '.'))) {
    ++at;
  }
  return line.substr(begin, at - begin);
}

// The section a table header `[name]  # comment` opens; "" for any other line.
std::string_view toml_header(std::string_view line) {
  size_t at = skip_blanks(line, 0);
  if (at == line.size() || line[at] != '[') return {};
  at = skip_blanks(line, at + 1);
  const std::string_view name = bare_name(line, at, true);
  at = skip_blanks(line, at);
  if (name.empty() || at == line.size() || line[at] != ']') return {};
  at = skip_blanks(line, at + 1);
  return at == line.size() || line[at] == '#' ? name : std::string_view{};
}

// The key a `key = value` line sets; "" for any other line.
std::string_view toml_key(std::string_view line) {
  size_t at = skip_blanks(line, 0);
  const std::string_view key = bare_name(line, at, false);
  at = skip_blanks(line, at);
  return at < line.size() && line[at] == '=' ? key : std::string_view{};
}

}  // namespace

const TrialResult* CandidateRecord::latest() const {
  auto done = successful();
  return done.empty() ? nullptr : &done.back();
}

double CandidateRecord::figure() const {
  std::vector<double> steps;
  for (const TrialResult& t : successful()) {
    const size_t n = static_cast<size_t>(std::max(t.steps, 1));
    if (t.step_series_seconds.size() >= n) {  // the timed steps: the series' last n
      steps.insert(steps.end(), t.step_series_seconds.end() - static_cast<std::ptrdiff_t>(n),
                   t.step_series_seconds.end());
    } else {
      steps.insert(steps.end(), n, t.step_seconds);
    }
  }
  return median(std::move(steps));
}

double CandidateRecord::fastest() const {
  double f = 0;
  for (const TrialResult& t : successful()) {
    const double s = t.fastest_seconds > 0 ? t.fastest_seconds : t.step_seconds;
    f = f > 0 ? std::min(f, s) : s;
  }
  return f;
}

CandidateRecord::Memory CandidateRecord::least_memory() const {
  Memory m;
  bool any = false;
  for (const TrialResult& t : successful()) {
    m.peak_bytes = any ? std::min(m.peak_bytes, t.peak_bytes) : t.peak_bytes;
    m.rank0_bytes = any ? std::min(m.rank0_bytes, t.rank0_bytes) : t.rank0_bytes;
    any = true;
  }
  return m;
}

int CandidateRecord::timed_steps() const {
  int n = 0;
  for (const TrialResult& t : successful()) n += t.steps;
  return n;
}

int halving_trials(int n) {
  if (n <= 1) return n;
  int total = 0;
  for (int size = n; size > 1; size = (size + 1) / 2) total += size;
  return total;
}

int halving_rounds(int n) {
  int rounds = 1;  // the halving passes through a round of 2, the last
  for (int size = n; size > 2; size = (size + 1) / 2) ++rounds;
  return rounds;
}

int final_round_steps(int n, int first_steps) { return first_steps << (halving_rounds(n) - 1); }

int initial_candidates(int candidates, const HalvingOptions& o) {
  int r = std::min(o.initial, candidates);
  if (o.grid) return r;
  while (o.max_trials > 0 && r > 1 && halving_trials(r) > o.max_trials) --r;
  return r;
}

std::vector<int> first_round(const std::vector<TuneCandidate>& ranked, int n) {
  std::vector<bool> taken(ranked.size(), false);
  std::set<std::tuple<int, int, int>> shapes;
  int count = 0;
  // Pass 0: the best of each shape; pass 1: the best of the rest.
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < ranked.size() && count < n; ++i) {
      const layout::Layout& c = ranked[i].config;
      if (!taken[i] && (pass == 1 || shapes.insert({c.tp, c.pp, c.dp}).second)) {
        taken[i] = true;
        ++count;
      }
    }
  }
  std::vector<int> out;
  for (size_t i = 0; i < ranked.size(); ++i) {
    if (taken[i]) out.push_back(static_cast<int>(i));
  }
  return out;
}

TuneOutcome successive_halving(const std::vector<TuneCandidate>& ranked, const HalvingOptions& o,
                               const TrialRunner& run, const ElapsedClock& elapsed,
                               const std::function<bool()>& stop) {
  TuneOutcome out;
  for (const TuneCandidate& c : ranked) {
    out.records.emplace_back();
    out.records.back().candidate = c;
  }
  const int n = initial_candidates(static_cast<int>(ranked.size()), o);
  std::vector<int> entrants = first_round(ranked, n);
  int steps = o.grid ? final_round_steps(n, o.first_steps) : o.first_steps;
  for (int round = 0; !entrants.empty(); ++round) {
    out.finalists = entrants;
    out.rounds = round + 1;
    std::vector<std::pair<double, int>> measured;  // (step seconds, record), this round's
    bool cut = false;
    // A grid's pass k starts k/passes of the way into the layouts (pass 1 at the first): a slow
    // phase of the machine that comes back at the same point of every pass (this machine: the
    // last three layouts of each of three passes ran 20-40% slow) does not meet one layout in all
    // of them.
    std::vector<int> order = entrants;
    if (o.grid && o.passes > 1 && !order.empty()) {
      const size_t shift = static_cast<size_t>(round) * order.size() / o.passes % order.size();
      std::rotate(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(shift), order.end());
    }
    for (int i : order) {
      CandidateRecord& rec = out.records[i];
      if (rec.failed) continue;  // a grid's later pass
      if (stop && stop()) {
        out.stopped = cut = true;
        break;
      }
      if ((o.max_trials > 0 && out.trials >= o.max_trials) ||
          (o.max_seconds > 0 &&
           elapsed() + estimate_trial_seconds(out, rec, o.warmup, steps) > o.max_seconds)) {
        out.budget_spent = cut = true;
        break;
      }
      TrialResult r = run(rec.candidate, o.warmup, steps);
      if (r.stopped) {
        rec.trials.push_back(r);
        out.stopped = cut = true;
        break;
      }
      ++out.trials;
      out.steps += o.warmup + steps;
      rec.trials.push_back(r);
      rec.last_round = round;
      if (!r.ok) {
        rec.failed = true;  // out of the search; the search goes on
        continue;
      }
      measured.emplace_back(rec.figure(), i);
    }
    if (cut || (o.grid && round + 1 >= std::max(1, o.passes))) break;
    if (o.grid) continue;  // the next pass: every entrant again, at the same length
    // The faster half (rounded up) of the layouts that ran, by their figure so far.
    std::stable_sort(measured.begin(), measured.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    entrants.clear();
    for (size_t k = 0; k < (measured.size() + 1) / 2; ++k) entrants.push_back(measured[k].second);
    if (entrants.size() == 1) {
      out.finalists = entrants;
      break;
    }
    if (entrants.empty()) break;  // every layout of the round failed: finalists keep the round's
    steps *= 2;
  }
  double best = std::numeric_limits<double>::infinity();
  for (int i : out.finalists) {
    const CandidateRecord& rec = out.records[i];
    const double f = rec.figure();
    if (rec.failed || f <= 0) continue;
    if (f < best) {
      best = f;
      out.winner = i;
    }
  }
  return out;
}

std::map<std::string, std::vector<std::pair<std::string, std::string>>> run_config_keys_of(
    const layout::Layout& c) {
  const auto quoted = [](std::string_view s) { return fmt::format("\"{}\"", s); };
  return {
      {"parallel",
       {{"tp", std::to_string(c.tp)},
        {"pp", std::to_string(c.pp)},
        {"dp", std::to_string(c.dp)},
        {"vp", std::to_string(c.vp)},
        {"schedule", quoted(schedule::kind_name(c.schedule))},
        {"sequence_parallel", c.sequence_parallel ? "true" : "false"},
        {"zero", std::to_string(c.zero)}}},
      {"train",
       {{"micro_batch", std::to_string(c.micro_batch)},
        {"recompute", quoted(model::recompute_name(c.recompute))}}},
  };
}

std::string set_toml_keys(
    const std::string& text,
    const std::map<std::string, std::vector<std::pair<std::string, std::string>>>& keys) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::map<std::string, std::map<std::string, bool>> done;  // section -> key -> written
  std::map<std::string, size_t> header_at;
  std::string section;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (const std::string_view h = toml_header(lines[i]); !h.empty()) {
      section = h;
      header_at[section] = i;
      continue;
    }
    // A copy: the view points into lines[i], which the loop may rewrite.
    const std::string key(toml_key(lines[i]));
    if (key.empty()) continue;
    auto s = keys.find(section);
    if (s == keys.end()) continue;
    for (const auto& [k, v] : s->second) {
      if (k == key) {
        lines[i] = fmt::format("{} = {}{}", k, v, trailing_comment(lines[i]));
        done[section][k] = true;
      }
    }
  }
  // Missing keys go right under their section's header, missing sections at the end.
  std::map<size_t, std::vector<std::string>> insert_after;
  std::string appended;
  for (const auto& [sec, kv] : keys) {
    std::vector<std::string> missing;
    for (const auto& [k, v] : kv) {
      if (!done[sec][k]) missing.push_back(fmt::format("{} = {}", k, v));
    }
    if (missing.empty()) continue;
    if (auto h = header_at.find(sec); h != header_at.end()) {
      insert_after[h->second] = missing;
    } else {
      appended += fmt::format("\n[{}]\n", sec);
      for (const std::string& l : missing) appended += l + "\n";
    }
  }
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    out += lines[i] + "\n";
    if (auto a = insert_after.find(i); a != insert_after.end()) {
      for (const std::string& l : a->second) out += l + "\n";
    }
  }
  return out + appended;
}

std::string render_tune_svg(const TuneOutcome& outcome, const std::string& title) {
  constexpr double W = 640, H = 560, left = 80, right = 30, top = 45, bottom = 60;
  const double pw = W - left - right, ph = H - top - bottom;
  struct Point {
    double predicted, measured;
    int round;
    bool winner;
  };
  std::vector<Point> points;
  int max_round = 0;
  for (size_t i = 0; i < outcome.records.size(); ++i) {
    const CandidateRecord& r = outcome.records[i];
    int round = 0;
    for (const TrialResult& t : r.trials) {
      if (t.ok && !t.stopped && r.candidate.predicted_seconds > 0 && t.step_seconds > 0) {
        points.push_back({r.candidate.predicted_seconds, t.step_seconds, round,
                          &t == r.latest() && outcome.winner == static_cast<int>(i)});
        max_round = std::max(max_round, round);
      }
      ++round;
    }
  }
  std::string svg = svg_chart_header(static_cast<int>(W), static_cast<int>(H), title);
  if (points.empty()) {
    return svg + fmt::format(
                     "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">no measured trial</text>\n"
                     "</svg>\n",
                     W / 2, H / 2);
  }
  // One square log-log frame over both axes, whole decades, so y = x is the diagonal.
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (const Point& p : points) {
    lo = std::min({lo, p.predicted, p.measured});
    hi = std::max({hi, p.predicted, p.measured});
  }
  const double d0 = std::floor(std::log10(lo)), d1 = std::max(d0 + 1, std::ceil(std::log10(hi)));
  const auto x_of = [&](double v) { return left + (std::log10(v) - d0) / (d1 - d0) * pw; };
  const auto y_of = [&](double v) { return top + ph - (std::log10(v) - d0) / (d1 - d0) * ph; };
  const auto label = [](double s) {
    return s >= 1 ? fmt::format("{:g} s", s) : fmt::format("{:g} ms", s * 1e3);
  };
  for (double d = d0; d <= d1 + 1e-9; d += 1) {
    const double v = std::pow(10.0, d);
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#ddd\"/>\n"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n"
        "<line x1=\"{5}\" y1=\"{6:.1f}\" x2=\"{7}\" y2=\"{6:.1f}\" stroke=\"#ddd\"/>\n"
        "<text x=\"{8}\" y=\"{9:.1f}\" text-anchor=\"end\">{4}</text>\n",
        x_of(v), top, top + ph, top + ph + 18, label(v), left, y_of(v), left + pw, left - 6,
        y_of(v) + 4);
  }
  svg += fmt::format(
      "<rect x=\"{0}\" y=\"{1}\" width=\"{2}\" height=\"{3}\" fill=\"none\" stroke=\"#333\"/>\n"
      "<line x1=\"{0}\" y1=\"{4}\" x2=\"{5}\" y2=\"{1}\" stroke=\"#888\" stroke-dasharray=\"6 "
      "4\"/>\n"
      "<text x=\"{6}\" y=\"{7}\" fill=\"#888\" text-anchor=\"end\">y = x (prediction "
      "exact)</text>\n"
      "<text x=\"{8}\" y=\"{9}\" text-anchor=\"middle\">predicted step time</text>\n"
      "<text x=\"18\" y=\"{10}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {10})\">measured "
      "step time (median step, slowest rank)</text>\n",
      left, top, pw, ph, top + ph, left + pw, left + pw - 8, top + 16, left + pw / 2, H - 15,
      top + ph / 2);
  static const char* kColors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                  "#b07aa1", "#76b7b2", "#edc948", "#9c755f"};
  for (const Point& p : points) {
    svg += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{}\" fill=\"{}\" fill-opacity=\"0.8\"{}/>\n",
        x_of(p.predicted), y_of(p.measured), p.winner ? 7 : 4, kColors[p.round % 8],
        p.winner ? " stroke=\"black\" stroke-width=\"2\"" : "");
  }
  for (int r = 0; r <= max_round; ++r) {
    svg += fmt::format(
        "<circle cx=\"{0}\" cy=\"{1}\" r=\"4\" fill=\"{2}\"/><text x=\"{3}\" y=\"{4}\">trial {5} "
        "of a layout</text>\n",
        left + 12, top + 14 + 16 * r, kColors[r % 8], left + 22, top + 18 + 16 * r, r + 1);
  }
  svg += fmt::format(
      "<circle cx=\"{0}\" cy=\"{1}\" r=\"7\" fill=\"none\" stroke=\"black\" stroke-width=\"2\"/>"
      "<text x=\"{2}\" y=\"{3}\">the winner</text>\n</svg>\n",
      left + 12, top + 14 + 16 * (max_round + 1), left + 22, top + 18 + 16 * (max_round + 1));
  return svg;
}

}  // namespace weft::planner
