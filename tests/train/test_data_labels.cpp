// Truncation that removes every trained label (train/data_loader.h count_label_loss,
// check_labels_survive): an error naming the dataset, sequence_len and the counts when no example
// keeps a label (training would report loss 0.0), a warning when only some lose them, nothing
// when packing keeps every token; the DataLoader refuses such a set too.
#include <gtest/gtest.h>

#include <vector>

#include "../io/io_test_util.h"
#include "train/data_loader.h"

namespace lt {
namespace {

using test::error_of;
using test::expect_contains;

// A prompt of `prompt` untrained tokens, then `completion` trained ones.
Example prompt_completion(int prompt, int completion) {
  Example e;
  for (int i = 0; i < prompt + completion; ++i) {
    e.ids.push_back(10 + i);
    e.labels.push_back(i < prompt ? kIgnoreLabel : 10 + i);
  }
  return e;
}

TEST(DataLabels, CountsWhatACutOfTTokensKeeps) {
  // T = 8 keeps the targets labels[1..8]: the first completion token at index 8 still counts
  std::vector<Example> ex = {prompt_completion(8, 3), prompt_completion(9, 3), prompt_completion(2, 3)};
  const LabelLoss cut = count_label_loss(ex, 8, /*packing=*/false);
  EXPECT_EQ(cut.examples, 3u);
  EXPECT_EQ(cut.lost_to_cut, 1u);  // only the 9-token prompt
  EXPECT_EQ(cut.no_labels, 0u);
  EXPECT_EQ(count_label_loss(ex, 8, /*packing=*/true).lost_to_cut, 0u);  // packing cuts nothing
  ex.push_back(prompt_completion(5, 0));
  EXPECT_EQ(count_label_loss(ex, 8, true).no_labels, 1u);
}

TEST(DataLabels, EveryLabelTruncatedAwayIsAnErrorNamingDatasetAndSequenceLen) {
  const std::vector<Example> ex(4, prompt_completion(40, 5));
  expect_contains(error_of([&] { check_labels_survive(ex, 32, false, "qa.jsonl"); }),
                  {"qa.jsonl", "sequence_len 32", "4 of 4 examples", "loss of 0"});
  check_labels_survive(ex, 32, true, "qa.jsonl");   // packing keeps them: no error
  check_labels_survive(ex, 64, false, "qa.jsonl");  // a longer context keeps them
  expect_contains(error_of([&] { DataLoader(ex, 2, 32, false, 1); }), {"T=32", "4 lose them all"});
}

TEST(DataLabels, SomeExamplesLosingAllLabelsIsAWarning) {
  std::vector<Example> ex = {prompt_completion(40, 5), prompt_completion(3, 5), prompt_completion(50, 1)};
  testing::internal::CaptureStderr();
  check_labels_survive(ex, 32, false, "mixed.jsonl");
  const std::string err = testing::internal::GetCapturedStderr();
  expect_contains(err, {"warning", "mixed.jsonl", "2 of 3 examples", "sequence_len 32"});
  testing::internal::CaptureStderr();
  check_labels_survive({prompt_completion(3, 5)}, 32, false, "fine.jsonl");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace lt
