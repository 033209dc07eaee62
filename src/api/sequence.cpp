// sequence.h: a Sequence is the engine's LlamaModel made over a Model's shared weights (its own KV
// cache and activations) plus the number of positions filled.
#include "leantune/sequence.h"

#include "api/access.h"
#include "api/guard.h"
#include "core/error.h"

namespace leantune {

struct Sequence::Impl {
  std::unique_ptr<lt::LlamaModel> state;
  int threads = 1;
  int size = 0;
};

Sequence::Sequence(const Model& model, const SequenceOptions& options) {
  impl_ = detail::guard([&] {
    const detail::ModelImpl& m = detail::Access::model(model);
    auto s = std::make_unique<Impl>();
    s->threads = m.threads;
    s->state = detail::new_sequence_state(m, options);
    return s;
  });
}

Sequence::~Sequence() = default;
Sequence::Sequence(Sequence&&) noexcept = default;
Sequence& Sequence::operator=(Sequence&&) noexcept = default;

std::span<const float> Sequence::append(std::span<const int> tokens) {
  return detail::guard([&] {
    LT_CHECK(!tokens.empty(), "append: no token ids given");
    detail::ThreadScope threads(impl_->threads);
    impl_->state->forward(tokens.data(), int(tokens.size()), impl_->size);
    impl_->size += int(tokens.size());
    const lt::LlamaModel& s = *impl_->state;
    return std::span<const float>(s.logits(), size_t(s.config().vocab_size));
  });
}

int Sequence::size() const { return impl_->size; }
int Sequence::context() const { return impl_->state->context(); }

void Sequence::truncate(int n) {
  detail::guard([&] {
    LT_CHECK(n >= 0 && n <= impl_->size, "truncate: {} is out of range: the sequence holds {} positions", n,
             impl_->size);
    impl_->size = n;
  });
}

size_t Sequence::memory_bytes() const { return impl_->state->arenas().allocated_total(); }

}  // namespace leantune
