// TrainModel with PEFT's LoRA variants and INT4 QAT on the pretrained stories260K: QAT's loss and
// gradients are exactly those of the model whose linear weights are the fake-quantized ones (the
// straight-through gradient lands on the f32 master), and the working copies follow the masters
// after an update; LoRA+ puts lora_B (and only it, here) at lr · ratio; DoRA starts at the base
// model (its magnitude is the row norm); and the combinations not implemented are errors naming
// the options. (Parity of each variant with PEFT: tests/python/test_lora_variants.py.)
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "io/model_files.h"
#include "kernels/ops.h"
#include "quant/int4.h"
#include "train/train_model.h"

using namespace lt;

namespace {

const std::string kModel = std::string(LT_SHARED_DIR) + "/models/stories260K/stories260K.bin";
constexpr int kB = 2, kT = 16;

struct Batch {
  std::vector<int> tokens, labels, pos, doc;
  Batch() {
    for (int i = 0; i < kB * kT; ++i) {
      tokens.push_back((i * 37 + 11) % 512);
      pos.push_back(i % kT);
      doc.push_back(i - i % kT);
    }
    for (int i = 0; i < kB * kT; ++i) labels.push_back((i + 1) % kT ? tokens[size_t(i) + 1] : -100);
  }
};

TrainModelOptions options(Method m) {
  TrainModelOptions o;
  o.method = m;
  o.micro_batch = kB;
  o.seq_len = kT;
  o.lora.r = 4;
  o.lora.alpha = 8;
  o.lora.target_modules = {"all-linear"};
  return o;
}

bool is_linear(const std::string& name) {
  return name.find("_proj.weight") != std::string::npos;
}

float loss_and_grads(TrainModel& m, const Batch& b) {
  m.zero_grads();
  return m.forward_backward(b.tokens.data(), b.labels.data(), b.pos.data(), b.doc.data(), 1.0f, 0);
}

TEST(QatModel, LossAndGradientsAreThoseOfTheFakeQuantizedModel) {
  const ModelFiles files = load_model_files(kModel);
  for (QuantType t : {QuantType::Int4, QuantType::Int4Asym}) {
    TrainModelOptions o = options(Method::Full);
    o.qat = t;
    o.qat_group_size = 64;
    TrainModel qat(files.config, files.tensors, o, ops_cpu());
    // the reference: every linear weight replaced by its fake-quantized copy, trained without QAT
    std::deque<std::vector<float>> store;
    TensorSet fq;
    for (const auto& [name, info] : files.tensors.all()) {
      TensorInfo c = info;
      if (is_linear(name)) {
        auto& v = store.emplace_back(size_t(info.numel()));
        convert_to_f32(v.data(), info.data, info.dtype, v.size());
        fake_quantize_int4(v.data(), v.data(), int64_t(v.size()), 64, t);
        c.data = v.data();
        c.dtype = DType::F32;
        c.nbytes = v.size() * 4;
      }
      fq.add(c);
    }
    TrainModel ref(files.config, fq, options(Method::Full), ops_cpu());
    const Batch b;
    const float lq = loss_and_grads(qat, b), lr = loss_and_grads(ref, b);
    EXPECT_EQ(lq, lr) << quant_type_name(t);
    ASSERT_EQ(qat.params().size(), ref.params().size());
    for (size_t i = 0; i < qat.params().size(); ++i) {
      const TrainParam &p = qat.params()[i], &r = ref.params()[i];
      ASSERT_EQ(p.name, r.name);
      EXPECT_EQ(0, std::memcmp(p.g, r.g, p.n * 4)) << p.name << ": not the gradient of the fake-quantized model";
      if (is_linear(p.name)) {  // the master stays f32: it is not the fake-quantized weight
        EXPECT_NE(0, std::memcmp(p.p, r.p, p.n * 4)) << p.name;
      }
    }
    // an update of the masters reaches the forward after zero_grads()
    for (auto& p : qat.params())
      for (size_t j = 0; j < p.n; ++j) p.p[j] -= 0.05f * p.g[j];
    const float before = lq;
    qat.zero_grads();
    EXPECT_NE(qat.forward_loss(b.tokens.data(), b.labels.data(), b.pos.data(), b.doc.data()), before);
  }
}

TEST(LoraVariantsModel, LoraPlusScalesOnlyLoraB) {
  const ModelFiles files = load_model_files(kModel);
  TrainModelOptions o = options(Method::Lora);
  o.loraplus_lr_ratio = 16;
  TrainModel m(files.config, files.tensors, o, ops_cpu());
  size_t b = 0;
  for (const auto& p : m.params()) {
    const bool is_b = p.name.find("lora_B") != std::string::npos;
    EXPECT_EQ(p.lr_factor, is_b ? 16.0f : 1.0f) << p.name;
    b += is_b;
  }
  EXPECT_EQ(b, size_t(7 * files.config.n_layers));
}

TEST(LoraVariantsModel, DoraAndPissaStartAtTheBaseModel) {
  const ModelFiles files = load_model_files(kModel);
  const Batch b;
  TrainModel base(files.config, files.tensors, options(Method::Lora), ops_cpu());
  const float l0 = base.forward_loss(b.tokens.data(), b.labels.data(), b.pos.data(), b.doc.data());
  for (const char* init : {"default", "pissa", "olora"}) {
    TrainModelOptions o = options(Method::Lora);
    o.lora.use_dora = true;
    o.lora.init = init;
    TrainModel m(files.config, files.tensors, o, ops_cpu());
    // the same model to f32 rounding: W_res + s·B·A = W, and m = ‖W‖ makes DoRA's scale 1
    EXPECT_NEAR(m.forward_loss(b.tokens.data(), b.labels.data(), b.pos.data(), b.doc.data()), l0, 1e-5 * l0) << init;
    EXPECT_EQ(m.params().size(), size_t(3 * 7 * files.config.n_layers)) << init;  // A, B, magnitude
  }
}

TEST(LoraVariantsModel, CombinationsNotImplementedAreErrors) {
  const ModelFiles files = load_model_files(kModel);
  auto error = [&](TrainModelOptions o) {
    try {
      TrainModel m(files.config, files.tensors, o, ops_ref());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  TrainModelOptions o = options(Method::Lora);
  o.lora.use_dora = true;
  o.lora.dropout = 0.1f;
  o.precision = Precision::BF16;
  EXPECT_NE(error(o).find("use_dora with lora_dropout"), std::string::npos) << error(o);
  o = options(Method::Lora);
  o.lora.init = "pissa";
  o.quantization = QuantType::NF4;
  EXPECT_NE(error(o).find("init_lora_weights pissa"), std::string::npos) << error(o);
  o = options(Method::Lora);
  o.qat = QuantType::Int4;
  EXPECT_NE(error(o).find("qat: int4"), std::string::npos) << error(o);
  o = options(Method::Full);
  o.loraplus_lr_ratio = 4;
  EXPECT_NE(error(o).find("loraplus_lr_ratio is for LoRA"), std::string::npos) << error(o);
  o = options(Method::Full);
  o.qat = QuantType::Int4;
  o.qat_group_size = 16;
  EXPECT_NE(error(o).find("block size 16"), std::string::npos) << error(o);
}

}  // namespace
