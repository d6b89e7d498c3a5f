#pragma once
// Megatron-LM's indexed dataset, MMIDIDX version 1: PREFIX.bin holds the token ids back to back,
// PREFIX.idx says where each sequence starts and which sequences end a document. The layout is
// exactly that of megatron/core/datasets/indexed_dataset.py (_IndexWriter.write / _IndexReader),
// little-endian, no padding:
//
//   offset  size       field
//        0  9          magic b"MMIDIDX\x00\x00"                       (_INDEX_HEADER)
//        9  8          version, uint64 = 1
//       17  1          dtype code, uint8 (DType: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
//                      6 float64, 7 float32, 8 uint16)
//       18  8          sequence count S, uint64
//       26  8          document count D, uint64 (= documents + 1: the list starts with 0)
//       34  4*S        sequence_lengths, int32 (tokens per sequence)
//   34+4S   8*S        sequence_pointers, int64 (byte offset of each sequence in .bin)
//   34+12S  8*D        document_indices, int64 (0, then the sequence index after each document)
//
// Multimodal datasets append S int8 sequence modes; the reader accepts and ignores them.
// weft writes one sequence per document (tokens followed by EOD, like preprocess_data.py
// --append-eod), so the .bin read in order is the token stream TokenDataset describes.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "weft/core/status.h"
#include "weft/data/file_io.h"
#include "weft/data/sidecar.h"
#include "weft/data/token_dataset.h"

namespace weft::data {

inline constexpr char kMmidIdxMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr int64_t kMmidIdxHeaderBytes = 34;

// Writes PREFIX.bin and PREFIX.idx as a stream: tokens go to disk as they arrive and the index is
// built on disk too, so memory stays flat however large the dataset. Everything is written under
// temporary names (PREFIX.bin.tmp-<pid>, ...) and renamed into place by finish(); a writer
// destroyed before finish() removes its temporaries and leaves any existing dataset untouched.
class IndexedDatasetWriter {
 public:
  // `type` is the stored token type: uint16 when the vocabulary fits, else int32.
  static Result<IndexedDatasetWriter> create(const std::string& prefix, TokenType type);
  IndexedDatasetWriter(IndexedDatasetWriter&&) noexcept;
  IndexedDatasetWriter& operator=(IndexedDatasetWriter&&) noexcept;
  ~IndexedDatasetWriter();

  // Appends tokens to the current document; call as often as needed, then end_document().
  // An id that the stored type cannot hold is an error.
  Status append(std::span<const int32_t> tokens);
  // Closes the current document (the caller appends EOD first, as preprocess does).
  Status end_document();
  // Writes the index and, when `sidecar_json` is not empty, PREFIX.json; then renames every file
  // into place, PREFIX.idx last (a reader needs it, so a dataset is never half-visible).
  Status finish(const std::string& sidecar_json = "");

  int64_t num_tokens() const;
  int64_t num_documents() const;

 private:
  struct State;
  explicit IndexedDatasetWriter(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

// What a PREFIX.idx says, checked against itself: the token type, the counts, and the size in
// bytes the .bin must have (sequences are stored back to back, so the lengths determine it).
struct MmidIdxIndex {
  TokenType type = TokenType::U16;
  int64_t num_sequences = 0, num_documents = 0;
  int64_t bin_bytes = 0;
};

// Checks the bytes of a PREFIX.idx against the layout above; every problem names `origin`. Any
// bytes are either a consistent index or an error (tests/fuzz/mmididx_fuzz.cc holds it to that).
Result<MmidIdxIndex> parse_mmididx_index(std::span<const std::byte> idx, std::string_view origin);

// Reads a Megatron MMIDIDX v1 dataset in place (both files memory-mapped), after checking the
// index against itself and against the size of the .bin; every problem names the file.
class IndexedDataset final : public MappedTokenDataset {
 public:
  // PREFIX.idx + PREFIX.bin; `sidecar` (PREFIX.json, when present) is checked against the data.
  static Result<std::unique_ptr<IndexedDataset>> open(const std::string& prefix,
                                                      std::optional<Sidecar> sidecar = {});

  std::string describe() const override;
  std::vector<std::string> files() const override { return {file_.path(), idx_.path()}; }

  int64_t num_sequences() const { return num_sequences_; }
  TokenType token_type() const { return type_; }
  int32_t sequence_length(int64_t i) const;
  int64_t sequence_pointer(int64_t i) const;
  int64_t document_index(int64_t i) const;  // i in [0, num_documents()]

 private:
  IndexedDataset(MappedFile idx, MappedFile bin)
      : MappedTokenDataset(std::move(bin), 0), idx_(std::move(idx)) {}
  MappedFile idx_;  // the .bin is file_
  int64_t num_sequences_ = 0;
};

}  // namespace weft::data
