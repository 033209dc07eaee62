// UnitStore (train/unit_store.h): the hooks TrainModel calls around each unit become exactly the
// acquire / release calls a sharding strategy expects, in the order the model made them before the
// store existed (ZeRO's overlap, prefetch and reduction order depend on it): a tied embedding's
// lm_head takes its turn between the final norm's forward and backward, an untied head is held
// once across the final norm, the loss and the norm's backward, the embedding's backward acquires
// no parameters, and a strategy that holds nothing hears only that a unit's gradients are complete.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "train/train_model.h"
#include "train/unit_store.h"

using namespace lt;

namespace {

// A strategy that logs every call: "P+u" (with ">n" for a prefetch hint), "P-u", "G+u", "G-u", and
// "Ru" for grads_ready(u).
class Recorder final : public ShardingStrategy {
 public:
  Recorder(bool params, bool grads, std::vector<std::string>* log) : params_(params), grads_(grads), log_(log) {}
  bool holds_params() const override { return params_; }
  bool holds_grads() const override { return grads_; }
  Communicator& comm() override { return self_; }
  void attach(std::vector<TrainParam>&) override {}
  float* acquire_params(int u, int next) override {
    log_->push_back("P+" + std::to_string(u) + (next >= 0 ? ">" + std::to_string(next) : ""));
    return buffer_;
  }
  void release_params(int u) override { log_->push_back("P-" + std::to_string(u)); }
  float* acquire_grads(int u) override {
    log_->push_back("G+" + std::to_string(u));
    return buffer_;
  }
  void release_grads(int u) override { log_->push_back("G-" + std::to_string(u)); }
  void grads_ready(int u) override { log_->push_back("R" + std::to_string(u)); }
  void set_frozen(size_t, bool, float) override {}
  OptimizerStepResult optimizer_step(const OptimizerStepArgs&) override { return {}; }
  void save_checkpoint(const std::string&, const TrainerState&, const TrainedModelInfo&, const TrainHooks&) override {}
  TrainerState load_checkpoint(const std::string&, const std::string&) override { return {}; }
  TrainedTensorFn trained_tensors() override { return {}; }

 private:
  bool params_, grads_;
  std::vector<std::string>* log_;
  SelfCommunicator self_;
  float buffer_[8] = {};
};

// Two decoder layers: units 0 (embedding), 1, 2, 3 (final norm, and lm_head when untied), one
// tensor of 2 floats each.
struct Fixture {
  std::vector<std::string> log;
  std::vector<TrainParam> params;
  UnitStore store;
  float own[4][2] = {}, own_grads[4][2] = {};  // what the model holds when the strategy does not
  std::vector<float*> p, g;
  Fixture(bool holds_params, bool holds_grads)
      : store(std::make_unique<Recorder>(holds_params, holds_grads, &log)), p(4, nullptr), g(4, nullptr) {
    for (int u = 0; u < 4; ++u) {
      if (!holds_params) p[size_t(u)] = own[u];
      if (!holds_grads) g[size_t(u)] = own_grads[u];
    }
    for (int u = 0; u < 4; ++u) {
      params.push_back(TrainParam{"t" + std::to_string(u), {2}, nullptr, nullptr, nullptr, nullptr, 2, u - 1, true, u});
      store.add_pointers(size_t(u), &p[size_t(u)], &g[size_t(u)]);
    }
    store.attach(params, 4);
    store.set_backward_reads_params(0, false);
  }
  // the hooks of TrainModel::run for one pass
  void pass(bool backward, bool tied) {
    const int head = 3, lm = tied ? 0 : head;
    store.begin_pass(backward);
    for (int u = 0; u < head; ++u) {
      store.before(u, Pass::Forward);
      store.after(u, Pass::Forward);
    }
    store.before(head, Pass::Forward);
    store.after(head, Pass::Forward);
    const Pass loss = backward ? Pass::Loss : Pass::Forward;
    store.before(lm, loss);
    EXPECT_NE(p[size_t(lm)], nullptr) << "the loss reads lm_head";
    store.after(lm, loss);
    if (backward)
      for (int u = head; u >= 0; --u) {
        store.before(u, Pass::Backward);
        EXPECT_NE(g[size_t(u)], nullptr) << "unit " << u << "'s backward writes its gradients";
        store.after(u, Pass::Backward);
      }
    store.end_pass();
  }
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  size_t a = 0;
  for (size_t b; (b = s.find(' ', a)) != std::string::npos; a = b + 1) v.push_back(s.substr(a, b - a));
  v.push_back(s.substr(a));
  return v;
}

}  // namespace

TEST(TrainUnitStore, TiedEmbeddingTakesTurnsWithTheHeadAsTheModelDid) {
  Fixture f(true, true);
  f.pass(true, true);
  EXPECT_EQ(f.log, split("P+0 P-0 P+1 P-1 P+2 P-2 P+3 P-3 P+0 G+0 P-0 G-0 P+3 G+3 P-3 G-3 P+2 G+2 P-2 G-2 "
                         "P+1 G+1 P-1 G-1 G+0 G-0"));
  for (int u = 0; u < 4; ++u) {
    EXPECT_EQ(f.p[size_t(u)], nullptr) << "released parameters point nowhere";
    EXPECT_EQ(f.g[size_t(u)], nullptr) << "released gradients point nowhere";
  }
}

TEST(TrainUnitStore, AnUntiedHeadIsHeldOnceAcrossNormLossAndNormBackward) {
  Fixture f(true, true);
  f.pass(true, false);
  EXPECT_EQ(f.log, split("P+0 P-0 P+1 P-1 P+2 P-2 P+3 G+3 P-3 G-3 P+2 G+2 P-2 G-2 P+1 G+1 P-1 G-1 G+0 G-0"));
  f.log.clear();
  f.pass(false, false);  // evaluation: parameters only
  EXPECT_EQ(f.log, split("P+0 P-0 P+1 P-1 P+2 P-2 P+3 P-3"));
}

TEST(TrainUnitStore, TheSecondPassOfAKindGetsPrefetchHints) {
  Fixture f(true, false);
  f.pass(false, true);
  f.log.clear();
  f.pass(false, true);
  EXPECT_EQ(f.log, split("P+0>1 P-0 P+1>2 P-1 P+2>3 P-2 P+3>0 P-3 P+0 P-0"));
}

TEST(TrainUnitStore, AStrategyHoldingNothingHearsWhenGradientsAreComplete) {
  Fixture f(false, false);
  f.pass(true, true);  // the lm_head part of the tied embedding's gradient is not its last
  EXPECT_EQ(f.log, split("R3 R2 R1 R0"));
  UnitStore none;  // no strategy at all: every hook is a no-op
  std::vector<TrainParam> params;
  none.attach(params, 1);
  none.begin_pass(true);
  none.before(0, Pass::Backward);
  none.after(0, Pass::Backward);
  none.end_pass();
}
