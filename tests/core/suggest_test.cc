// "Did you mean ...?": Levenshtein distance and the nearest-name suggestion.

#include "weft/core/suggest.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace weft {
namespace {

TEST(EditDistance, IsZeroForEqualStrings) {
  EXPECT_EQ(edit_distance("", ""), 0);
  EXPECT_EQ(edit_distance("n_embd", "n_embd"), 0);
}

TEST(EditDistance, CountsInsertionsDeletionsAndSubstitutions) {
  EXPECT_EQ(edit_distance("", "abc"), 3);
  EXPECT_EQ(edit_distance("abc", ""), 3);
  EXPECT_EQ(edit_distance("n_embd", "n_emb"), 1);   // deletion
  EXPECT_EQ(edit_distance("n_emb", "n_embd"), 1);   // insertion
  EXPECT_EQ(edit_distance("n_embd", "n_embx"), 1);  // substitution
  EXPECT_EQ(edit_distance("n_embd", "n_emdb"), 2);  // a transposition is two edits
}

TEST(EditDistance, MatchesTheClassicExamples) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);
  EXPECT_EQ(edit_distance("flaw", "lawn"), 2);
  EXPECT_EQ(edit_distance("intention", "execution"), 5);
}

TEST(EditDistance, IsSymmetric) {
  EXPECT_EQ(edit_distance("sunday", "saturday"), edit_distance("saturday", "sunday"));
  EXPECT_EQ(edit_distance("sunday", "saturday"), 3);
}

const std::vector<std::string> kKeys = {"n_layer", "n_head", "n_embd", "vocab_size", "block_size"};

TEST(DidYouMean, SuggestsTheNearestName) {
  EXPECT_EQ(did_you_mean("n_emdb", kKeys), " (did you mean 'n_embd'?)");
  EXPECT_EQ(did_you_mean("n_heads", kKeys), " (did you mean 'n_head'?)");
  EXPECT_EQ(did_you_mean("vocabsize", kKeys), " (did you mean 'vocab_size'?)");
  EXPECT_EQ(did_you_mean("blok_sise", kKeys), " (did you mean 'block_size'?)");
}

TEST(DidYouMean, StaysSilentForFarNames) {
  EXPECT_EQ(did_you_mean("learning_rate", kKeys), "");
  EXPECT_EQ(did_you_mean("xyz", kKeys), "");
  EXPECT_EQ(did_you_mean("n_lyrs_total", kKeys), "");
}

TEST(DidYouMean, StaysSilentWithoutCandidates) { EXPECT_EQ(did_you_mean("n_embd", {}), ""); }

TEST(DidYouMean, AllowsMoreEditsForLongerNames) {
  // The limit is max(2, length / 3): three edits are fine for a 12-letter name, not a short one.
  EXPECT_EQ(edit_distance("grd_klip_nrm", "grad_clip_norm"), 3);
  EXPECT_EQ(did_you_mean("grd_klip_nrm", {"grad_clip_norm"}), " (did you mean 'grad_clip_norm'?)");
  EXPECT_EQ(did_you_mean("lrx", {"lr"}), " (did you mean 'lr'?)");
  EXPECT_EQ(did_you_mean("abc", {"xyz"}), "");
}

}  // namespace
}  // namespace weft
