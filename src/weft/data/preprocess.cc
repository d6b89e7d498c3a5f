#include "weft/data/preprocess.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "weft/core/clock.h"
#include "weft/data/bpe_tokenizer.h"
#include "weft/data/indexed_dataset.h"
#include "weft/data/sidecar.h"

namespace weft::data {

// ---- text helpers ----

size_t find_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    if (i + 8 <= n) {  // ASCII fast path: most text is ASCII
      uint64_t w;
      std::memcpy(&w, p + i, sizeof w);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // The well-formed sequences of the Unicode standard (Table 3-7): the second byte's range
    // excludes overlong forms (E0, F0), surrogates (ED) and code points above U+10FFFF (F4).
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c == 0xE0) {
      len = 3, lo = 0xA0;
    } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
      len = 3;
    } else if (c == 0xED) {
      len = 3, hi = 0x9F;
    } else if (c == 0xF0) {
      len = 4, lo = 0x90;
    } else if (c >= 0xF1 && c <= 0xF3) {
      len = 4;
    } else if (c == 0xF4) {
      len = 4, hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

namespace {

// The code point of the UTF-8 character at text[i, end), or -1 when it is not well formed.
int32_t decode_at(std::string_view text, size_t i) {
  const size_t n = std::min(text.size() - i, size_t{4});
  const std::string_view c = text.substr(i, n);
  if (c.empty()) return -1;
  const auto b0 = static_cast<unsigned char>(c[0]);
  const size_t len = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
  if (len > c.size() || find_invalid_utf8(c.substr(0, len)) != std::string_view::npos) return -1;
  if (len == 1) return b0;
  int32_t cp = b0 & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(c[k]) & 0x3F);
  return cp;
}

// The code point of the character that ends just before text[end], or -1.
int32_t decode_before(std::string_view text, size_t end) {
  size_t i = end;
  for (int k = 0; k < 4 && i > 0; ++k) {
    --i;
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      return decode_at(text.substr(0, end), i);
    }
  }
  return -1;
}

// A character that no whitespace piece of the pre-tokenizer can contain: printable ASCII, or a
// non-ASCII character outside the tokenizer's \s set (JavaScript's: the Unicode Z categories and
// U+FEFF; bpe_tokenizer.h) and outside the C1 controls. Conservative on purpose: U+0085 and
// U+180E count as spaces here.
bool is_solid(int32_t cp) {
  if (cp >= 0x21 && cp <= 0x7E) return true;
  if (cp < 0xA0) return false;  // ASCII controls, space, DEL, C1 controls, invalid (-1)
  constexpr int32_t kSpaces[] = {0xA0,   0x1680, 0x180E, 0x2028, 0x2029,
                                 0x202F, 0x205F, 0x3000, 0xFEFF};
  return std::ranges::find(kSpaces, cp) == std::end(kSpaces) && !(cp >= 0x2000 && cp <= 0x200A);
}

}  // namespace

size_t find_cut(std::string_view text, size_t lo, size_t hi) {
  WEFT_CHECK(lo >= 1 && lo <= hi && hi + 4 <= text.size(), "find_cut window [", lo, ", ", hi,
             "] of ", text.size(), " bytes");
  // Candidates p in [lo, hi] with text[p - 1] == '\n', from the right.
  size_t fallback = std::string_view::npos;
  size_t end = hi;  // search text[lo - 1, end) for '\n'
  while (end > lo - 1) {
    const void* hit = ::memrchr(text.data() + lo - 1, '\n', end - (lo - 1));
    if (!hit) break;
    const size_t q = static_cast<size_t>(static_cast<const char*>(hit) - text.data());
    const size_t p = q + 1;
    if (fallback == std::string_view::npos) fallback = p;
    if (q >= 1 && is_solid(decode_before(text, q)) && is_solid(decode_at(text, p))) return p;
    end = q;
  }
  if (fallback != std::string_view::npos) return fallback;
  // No line break: keep characters whole at least.
  for (size_t p = hi; p > hi - 4 && p >= lo; --p) {
    if ((static_cast<unsigned char>(text[p]) & 0xC0) != 0x80) return p;
  }
  return hi;
}

namespace {

using Clock = SteadyClock;

enum class Format { Whole, Paragraphs, Jsonl };

bool is_blank_char(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

int64_t count_newlines(std::string_view s) {
  return static_cast<int64_t>(std::count(s.begin(), s.end(), '\n'));
}

// Text for the workers: segments of `text`, each a piece of a document (txt) or a JSON line.
struct Segment {
  size_t begin = 0, end = 0;
  bool ends_document = false;
  int64_t line = 0;  // input line of the segment's first byte (1-based)
};

struct WorkItem {
  int64_t index = 0;
  std::string text;
  std::vector<Segment> segments;
  int64_t input_bytes = 0;  // input consumed since the previous item (progress)
};

struct Encoded {
  std::vector<int32_t> tokens;
  std::vector<std::pair<int64_t, bool>> pieces;  // token count, ends a document
  int64_t input_bytes = 0;
  Status status;
};

// Cuts the input stream into WorkItems of about piece_bytes, by the rules of the format.
class Chunker {
 public:
  using Emit = std::function<void(WorkItem&&)>;
  Chunker(Format format, size_t piece_bytes, Emit emit)
      : format_(format), piece_(piece_bytes), emit_(std::move(emit)) {}

  void feed(std::string_view block) {
    consumed_ += static_cast<int64_t>(block.size());
    switch (format_) {
      case Format::Whole:
        if (!open_) open_document(1);
        item_.text.append(block);
        maybe_cut();
        break;
      case Format::Paragraphs:
        for_each_line_part(
            block, [this](std::string_view part) { paragraph_part(part); },
            [this] { paragraph_line_end(); });
        break;
      case Format::Jsonl:
        for_each_line_part(
            block, [this](std::string_view part) { partial_.append(part); },
            [this] {
              json_line(partial_);
              partial_.clear();
              ++line_;
            });
        break;
    }
  }

  void finish() {
    if (format_ == Format::Jsonl && !partial_.empty()) json_line(partial_);
    if (open_) close_document();
    if (!item_.segments.empty() || consumed_ > 0) emit_item();
  }

 private:
  template <typename Part, typename End>
  static void for_each_line_part(std::string_view block, Part&& part, End&& end_line) {
    while (!block.empty()) {
      const void* nl = std::memchr(block.data(), '\n', block.size());
      if (!nl) {
        part(block);
        return;
      }
      const auto n = static_cast<size_t>(static_cast<const char*>(nl) - block.data());
      part(block.substr(0, n));
      end_line();
      block.remove_prefix(n + 1);
    }
  }

  void open_document(int64_t line) {
    open_ = true;
    open_begin_ = item_.text.size();
    open_line_ = line;
  }

  void close_document() {
    item_.segments.push_back({open_begin_, item_.text.size(), true, open_line_});
    open_ = false;
    if (item_.text.size() >= piece_) emit_item();
  }

  // Cuts the open document into pieces while it is longer than a piece. The window is relative
  // to the open part's start, so the cuts depend only on the text, not on how it was read.
  void maybe_cut() {
    while (open_ && item_.text.size() - open_begin_ >= piece_ + 4) {
      const std::string_view open(item_.text.data() + open_begin_, item_.text.size() - open_begin_);
      const size_t p = find_cut(open, piece_ / 2, piece_);
      WorkItem next;
      next.text.assign(open.substr(p));
      const int64_t next_line = open_line_ + count_newlines(open.substr(0, p));
      item_.text.resize(open_begin_ + p);
      item_.segments.push_back({open_begin_, open_begin_ + p, false, open_line_});
      emit_item();
      item_ = std::move(next);
      open_begin_ = 0;
      open_line_ = next_line;
    }
  }

  void emit_item() {
    item_.input_bytes = consumed_;
    consumed_ = 0;
    emit_(std::move(item_));
    item_ = WorkItem{};
    open_begin_ = 0;
  }

  // A paragraph is its lines, joined by the '\n' that ended each (added only when the next
  // non-blank line arrives, so the last line's break is dropped).
  void paragraph_part(std::string_view part) {
    if (part.empty()) return;
    if (line_blank_) {
      size_t k = 0;
      while (k < part.size() && is_blank_char(part[k])) ++k;
      if (k == part.size()) {  // still blank so far: hold the whitespace back
        line_ws_.append(part);
        return;
      }
      line_blank_ = false;
      if (!open_) {
        open_document(line_);
      } else {
        item_.text += '\n';
      }
      item_.text += line_ws_;
      line_ws_.clear();
    }
    item_.text.append(part);
    maybe_cut();
  }

  void paragraph_line_end() {
    if (line_blank_) {
      line_ws_.clear();
      if (open_) close_document();
    }
    line_blank_ = true;
    ++line_;
  }

  void json_line(std::string_view line) {
    if (std::all_of(line.begin(), line.end(), is_blank_char)) return;
    item_.segments.push_back({item_.text.size(), item_.text.size() + line.size(), true, line_});
    item_.text.append(line);
    if (item_.text.size() >= piece_) emit_item();
  }

  const Format format_;
  const size_t piece_;
  Emit emit_;
  WorkItem item_;
  int64_t consumed_ = 0;
  int64_t line_ = 1;
  bool open_ = false;
  size_t open_begin_ = 0;
  int64_t open_line_ = 1;
  bool line_blank_ = true;
  std::string line_ws_;
  std::string partial_;
};

// The message of a JSON parse error without nlohmann's "[json.exception...] parse error at line
// 1, column N:" preamble (the line is ours to name).
std::string json_problem(const nlohmann::json::parse_error& e) {
  std::string what = e.what();
  const size_t colon = what.find(": ", what.find("parse error"));
  if (colon != std::string::npos) what = what.substr(colon + 2);
  return fmt::format("{} (at byte {})", what, e.byte);
}

Encoded encode_item(const WorkItem& item, Format format, const TextEncoder& encoder,
                    const std::string& path, const std::string& key) {
  Encoded out;
  out.input_bytes = item.input_bytes;
  out.tokens.reserve(item.text.size() / 3);
  for (const Segment& seg : item.segments) {
    const std::string_view text(item.text.data() + seg.begin, seg.end - seg.begin);
    if (const size_t bad = find_invalid_utf8(text); bad != std::string_view::npos) {
      out.status = Status::error(fmt::format(
          "{}:{}: invalid UTF-8: byte 0x{:02X} does not start a valid UTF-8 character", path,
          seg.line + count_newlines(text.substr(0, bad)), static_cast<unsigned char>(text[bad])));
      return out;
    }
    const size_t before = out.tokens.size();
    if (format == Format::Jsonl) {
      auto where = fmt::format("{}:{}", path, seg.line);
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(text.begin(), text.end());
      } catch (const nlohmann::json::parse_error& e) {
        out.status = Status::error(where + ": invalid JSON: " + json_problem(e));
        return out;
      }
      if (!j.is_object()) {
        out.status =
            Status::error(fmt::format("{}: expected a JSON object, not {}", where, j.type_name()));
        return out;
      }
      const auto it = j.find(key);
      if (it == j.end()) {
        out.status = Status::error(fmt::format(
            "{}: no \"{}\" field (--json-key names the field that holds the text)", where, key));
        return out;
      }
      if (!it->is_string()) {
        out.status = Status::error(
            fmt::format("{}: field \"{}\" is {}, not a string", where, key, it->type_name()));
        return out;
      }
      encoder.encode_into(it->get_ref<const std::string&>(), out.tokens);
    } else {
      encoder.encode_into(text, out.tokens);
    }
    out.pieces.emplace_back(static_cast<int64_t>(out.tokens.size() - before), seg.ends_document);
  }
  return out;
}

// "read 512.0/1024.0 MB (50%), 120.5 MB/s, 130.2M tokens, 4.2K documents, ETA 0:04"
class Progress {
 public:
  Progress(bool enabled, int64_t total_bytes)
      : enabled_(enabled), tty_(::isatty(STDERR_FILENO) == 1), total_(total_bytes) {}

  void update(int64_t bytes, int64_t tokens, int64_t documents, bool final) {
    if (!enabled_) return;
    const auto now = Clock::now();
    // A terminal line is redrawn often; a log gets a line every few seconds.
    const auto interval = tty_ ? std::chrono::milliseconds(250) : std::chrono::seconds(10);
    if (!final && now - last_ < interval) return;
    if (final && !tty_ && !printed_) return;  // a short run on a log: the summary says it all
    last_ = now;
    printed_ = true;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double mb = bytes / 1e6;
    const double rate = seconds > 0 ? mb / seconds : 0;
    std::string line = total_ >= 0
                           ? fmt::format("preprocess: read {:.1f}/{:.1f} MB ({:.0f}%)", mb,
                                         total_ / 1e6, total_ > 0 ? 100.0 * bytes / total_ : 100.0)
                           : fmt::format("preprocess: read {:.1f} MB", mb);
    line += fmt::format(", {:.1f} MB/s, {} tokens, {} documents", rate, human_count(tokens),
                        human_count(documents));
    if (total_ >= 0 && rate > 0 && !final) {
      const auto eta = static_cast<int64_t>((total_ - bytes) / 1e6 / rate);
      line += fmt::format(", ETA {}:{:02d}:{:02d}", eta / 3600, eta / 60 % 60, eta % 60);
    }
    if (tty_) {
      std::fprintf(stderr, "\r%s\x1b[K%s", line.c_str(), final ? "\n" : "");
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  }

  // Ends a redrawn line before an error message is printed under it.
  void abandon() {
    if (enabled_ && tty_ && printed_) std::fputc('\n', stderr);
  }

 private:
  bool enabled_, tty_, printed_ = false;
  int64_t total_;
  Clock::time_point start_ = Clock::now(), last_ = Clock::now();
};

// Every problem with the options and the input that shows before any work, together.
Status check_options(const PreprocessOptions& o) {
  Status invalid;
  if (o.input.empty()) invalid.add("no input file (--input FILE.txt or FILE.jsonl)");
  if (o.output.empty()) invalid.add("no output prefix (--output PREFIX)");
  if (o.input.ends_with(".jsonl")) {
    if (o.split_blank_lines) {
      invalid.add(o.input + ": --split-blank-lines applies to .txt input, not .jsonl");
    }
  } else if (!o.input.ends_with(".txt") && !o.input.empty()) {
    invalid.add(o.input + ": unknown input format (expected a .txt or .jsonl file)");
  }
  if (!o.input.empty()) {
    struct stat st {};
    if (::stat(o.input.c_str(), &st) != 0 || ::access(o.input.c_str(), R_OK) != 0) {
      invalid.add(o.input + ": cannot open: " + errno_text());
    } else if (S_ISDIR(st.st_mode)) {
      invalid.add(o.input + ": is a directory");
    }
  }
  if (o.piece_bytes < 16) invalid.add(fmt::format("piece_bytes={} must be >= 16", o.piece_bytes));
  if (o.workers < 0) invalid.add(fmt::format("--workers {} must be >= 0", o.workers));
  return invalid;
}

// The stages of preprocess() and what they share. The reader (the calling thread) cuts the input
// into items, `workers` threads encode them, one thread writes them in input order. Items in
// flight (queued, encoding, or encoded and waiting for their turn to be written) are bounded: a
// few per worker keeps every worker busy while bounding memory.
class EncodePipeline {
 public:
  EncodePipeline(const PreprocessOptions& o, const TextEncoder& encoder, Format format, int workers,
                 IndexedDatasetWriter& writer, PreprocessStats& stats, Progress& progress)
      : o_(o),
        encoder_(encoder),
        format_(format),
        workers_(workers),
        max_in_flight_(2 * int64_t{workers} + 2),
        writer_(writer),
        stats_(stats),
        progress_(progress) {}

  // Runs every stage until the input ends or one stage fails; returns the first problem.
  Status run(int fd) {
    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(workers_) + 1);
    for (int i = 0; i < workers_; ++i) threads.emplace_back([this] { encode_items(); });
    threads.emplace_back([this] { write_items(); });
    read_input(fd);
    {
      std::lock_guard lock(mu_);
      total_items_ = next_index_;
      work_cv_.notify_all();
      done_cv_.notify_all();
    }
    for (auto& t : threads) t.join();
    return error_;
  }

 private:
  void fail(Status s) {  // with mu_ held
    if (error_.ok()) error_ = std::move(s);
    aborted_ = true;
    work_cv_.notify_all();
    done_cv_.notify_all();
    space_cv_.notify_all();
  }

  // The reader: blocks from the file, cut into items, handed over when there is room.
  void read_input(int fd) {
    Chunker chunker(format_, static_cast<size_t>(o_.piece_bytes),
                    [this](WorkItem&& item) { hand_over(std::move(item)); });
    try {
      std::vector<char> block(std::min<size_t>(static_cast<size_t>(o_.piece_bytes), 1 << 20));
      for (;;) {
        {
          std::lock_guard lock(mu_);
          if (aborted_) break;
        }
        const ssize_t r = ::read(fd, block.data(), block.size());
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
          std::lock_guard lock(mu_);
          fail(Status::error(o_.input + ": read failed: " + errno_text()));
          break;
        }
        if (r == 0) {
          chunker.finish();
          break;
        }
        stats_.input_bytes += r;
        chunker.feed(std::string_view(block.data(), static_cast<size_t>(r)));
      }
    } catch (const std::exception& e) {
      std::lock_guard lock(mu_);
      fail(Status::error(fmt::format("{}: {}", o_.input, e.what())));
    }
  }

  void hand_over(WorkItem&& item) {
    std::unique_lock lock(mu_);
    space_cv_.wait(lock, [&] { return aborted_ || in_flight_ < max_in_flight_; });
    if (aborted_) return;
    item.index = next_index_++;
    ++in_flight_;
    queue_.push_back(std::move(item));
    work_cv_.notify_one();
  }

  // A worker: encodes items as they come, in any order.
  void encode_items() {
    for (;;) {
      WorkItem item;
      {
        std::unique_lock lock(mu_);
        work_cv_.wait(lock, [&] { return aborted_ || !queue_.empty() || total_items_ >= 0; });
        if (aborted_ || queue_.empty()) return;
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      Encoded encoded;
      try {
        encoded = encode_item(item, format_, encoder_, o_.input, o_.json_key);
      } catch (const std::exception& e) {
        encoded.status = Status::error(fmt::format("{}: encoding failed: {}", o_.input, e.what()));
      }
      std::lock_guard lock(mu_);
      done_.emplace(item.index, std::move(encoded));
      done_cv_.notify_all();
    }
  }

  void write_items() {
    try {
      write_in_order();
    } catch (const std::exception& e) {
      std::lock_guard lock(mu_);
      fail(Status::error(fmt::format("{}: writing failed: {}", o_.output, e.what())));
    }
  }

  // The writer: each encoded item in input order, as soon as it and those before it are done.
  void write_in_order() {
    int64_t document_tokens = 0;  // tokens of the document being written so far
    int64_t bytes_done = 0;
    for (int64_t index = 0;; ++index) {
      Encoded e;
      {
        std::unique_lock lock(mu_);
        done_cv_.wait(lock,
                      [&] { return aborted_ || done_.count(index) || index == total_items_; });
        if (aborted_ || index == total_items_) return;
        auto node = done_.extract(index);
        e = std::move(node.mapped());
      }
      Status s = e.status;
      if (s.ok()) s = append_pieces(e, document_tokens);
      bytes_done += e.input_bytes;
      if (s.ok())
        progress_.update(bytes_done, writer_.num_tokens(), writer_.num_documents(), false);
      std::lock_guard lock(mu_);
      if (!s.ok()) return fail(std::move(s));
      --in_flight_;
      space_cv_.notify_one();
    }
  }

  // An item's pieces; each that ends a document is followed by the end-of-text token, unless the
  // document has no tokens at all (it is counted instead).
  Status append_pieces(const Encoded& e, int64_t& document_tokens) {
    Status s;
    size_t offset = 0;
    for (const auto& [count, ends_document] : e.pieces) {
      if (!s.ok()) break;
      s = writer_.append(std::span(e.tokens).subspan(offset, static_cast<size_t>(count)));
      offset += static_cast<size_t>(count);
      document_tokens += count;
      if (s.ok() && ends_document) {
        if (document_tokens == 0) {
          ++stats_.empty_documents;
        } else {
          const int32_t eod = encoder_.eod;
          s = writer_.append(std::span(&eod, 1));
          if (s.ok()) s = writer_.end_document();
        }
        document_tokens = 0;
      }
    }
    return s;
  }

  const PreprocessOptions& o_;
  const TextEncoder& encoder_;
  const Format format_;
  const int workers_;
  const int64_t max_in_flight_;
  IndexedDatasetWriter& writer_;
  PreprocessStats& stats_;
  Progress& progress_;

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_, space_cv_;
  std::deque<WorkItem> queue_;
  std::map<int64_t, Encoded> done_;
  int64_t in_flight_ = 0, next_index_ = 0, total_items_ = -1;
  bool aborted_ = false;
  Status error_;
};

}  // namespace

Result<PreprocessStats> preprocess(const PreprocessOptions& o, const TextEncoder& encoder) {
  const auto start = Clock::now();
  Status invalid = check_options(o);
  if (encoder.vocab_size <= 0 || encoder.eod < 0 || encoder.eod >= encoder.vocab_size) {
    invalid.add(fmt::format("tokenizer {}: end-of-text id {} outside its vocabulary of {}",
                            encoder.identity, encoder.eod, encoder.vocab_size));
  }
  if (!invalid.ok()) return invalid;
  const Format format = o.input.ends_with(".jsonl") ? Format::Jsonl
                        : o.split_blank_lines       ? Format::Paragraphs
                                                    : Format::Whole;

  Fd in{::open(o.input.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) return Status::error(o.input + ": cannot open: " + errno_text());
  struct stat st {};
  if (::fstat(in.fd, &st) != 0) return Status::error(o.input + ": cannot stat: " + errno_text());
  const int64_t total_bytes = S_ISREG(st.st_mode) ? st.st_size : -1;

  const TokenType type = encoder.vocab_size <= 65536 ? TokenType::U16 : TokenType::I32;
  auto writer_or = IndexedDatasetWriter::create(o.output, type);
  if (!writer_or.ok()) return writer_or.status();
  IndexedDatasetWriter writer = std::move(writer_or).value();

  const int workers = o.workers > 0
                          ? o.workers
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  PreprocessStats stats;
  Progress progress(o.progress, total_bytes);
  if (Status s = EncodePipeline(o, encoder, format, workers, writer, stats, progress).run(in.fd);
      !s.ok()) {
    progress.abandon();
    return s;  // the writer's destructor removes every temporary
  }

  progress.update(stats.input_bytes, writer.num_tokens(), writer.num_documents(), true);
  stats.documents = writer.num_documents();
  stats.tokens = writer.num_tokens();
  stats.workers = workers;
  stats.token_type = type;
  Sidecar sidecar{encoder.identity,
                  encoder.vocab_size,
                  encoder.eod,
                  stats.documents,
                  stats.tokens,
                  o.input,
                  ""};
  if (auto s = writer.finish(sidecar_json(sidecar)); !s.ok()) return s;
  stats.bin_path = o.output + ".bin";
  stats.idx_path = o.output + ".idx";
  stats.json_path = o.output + ".json";
  stats.seconds = seconds_since(start);
  return stats;
}

Result<PreprocessStats> preprocess(const PreprocessOptions& options) {
  Status invalid = check_options(options);  // before the tokenizer takes its second to load
  auto tokenizer_or = BpeTokenizer::load(resolve_tokenizer_dir(options.tokenizer));
  if (!tokenizer_or.ok()) {
    invalid.add(fmt::format(
        "cannot load the tokenizer '{}'{}", options.tokenizer,
        options.tokenizer == "gpt2" ? " (run scripts/fetch_assets.sh, or set WEFT_ASSETS)" : ""));
    invalid.merge(tokenizer_or.status());
  }
  if (!invalid.ok()) return invalid;
  auto tokenizer = std::make_shared<const BpeTokenizer>(std::move(tokenizer_or).value());
  TextEncoder encoder;
  encoder.encode_into = [tokenizer](std::string_view text, std::vector<int32_t>& out) {
    tokenizer->encode_into(text, out);
  };
  encoder.vocab_size = tokenizer->vocab_size();
  encoder.eod = tokenizer->eot_id();
  encoder.identity = tokenizer->identity();
  return preprocess(options, encoder);
}

}  // namespace weft::data
