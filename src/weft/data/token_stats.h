#pragma once
// Statistics of a tokenized corpus that put a loss in perspective.

#include <cstdint>

#include "weft/data/token_dataset.h"

namespace weft::data {

// Entropy in nats per token of the unigram distribution of tokens [begin, end) of the stream:
// the cross-entropy of the best model that ignores context. A language model's validation loss
// should fall well below it.
double unigram_entropy(const TokenDataset& data, int64_t begin, int64_t end);

}  // namespace weft::data
