// logits.h: the logits rows of a prefill and of one-token decode steps, streamed to a file that
// appears whole or not at all (io/atomic_file.h).
#include "leantune/logits.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "api/access.h"
#include "api/guard.h"
#include "core/error.h"
#include "core/atomic_file.h"

namespace leantune {

void write_logits_file(const std::string& path, const Model& model, std::span<const int> prompt,
                       std::span<const int> decode, const SequenceOptions& options) {
  detail::guard([&] {
    LT_CHECK(!prompt.empty(), "--ids: no token ids given");
    const detail::ModelImpl& m = detail::Access::model(model);
    detail::ThreadScope threads(m.threads);
    auto seq = detail::new_sequence_state(m, options);
    const size_t V = size_t(m.config.vocab_size);
    lt::write_file_atomic(path, [&](std::FILE* f) {
      auto row = [&] {
        LT_CHECK(std::fwrite(seq->logits(), sizeof(float), V, f) == V, "{}: write failed: {}", path,
                 std::strerror(errno));
      };
      seq->forward(prompt.data(), int(prompt.size()), 0);
      row();
      int pos = int(prompt.size());
      for (int id : decode) {
        seq->forward(&id, 1, pos++);
        row();
      }
    });
  });
}

}  // namespace leantune
