// tokenizer.h: the engine's Tokenizer behind the public class, and the JSON batch encoding of
// `leantune tokenize --input`.
#include "leantune/tokenizer.h"

#include <nlohmann/json.hpp>

#include "api/access.h"
#include "api/guard.h"
#include "core/error.h"
#include "core/json_parse.h"
#include "model/model_tokenizer.h"

namespace leantune {

Tokenizer::Tokenizer(const std::string& path) {
  impl_ = detail::guard([&] {
    auto t = std::make_unique<Impl>();
    t->tok = lt::load_tokenizer_for_model("", path);  // a GGUF path: the tokenizer in its metadata
    return t;
  });
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int> Tokenizer::encode(std::string_view text, bool add_special) const {
  return detail::guard([&] { return impl_->tok->encode(text, add_special); });
}

std::string Tokenizer::decode(std::span<const int> ids, bool skip_special) const {
  return detail::guard([&] { return impl_->tok->decode(ids, skip_special); });
}

int Tokenizer::vocab_size() const { return impl_->tok->vocab_size(); }
int Tokenizer::bos_id() const { return impl_->tok->bos_id(); }
int Tokenizer::eos_id() const { return impl_->tok->eos_id(); }
bool Tokenizer::is_special(int id) const { return impl_->tok->is_special(id); }
std::string Tokenizer::token_text(int id) const {
  return detail::guard([&] { return impl_->tok->token_text(id); });
}
const std::string& Tokenizer::path() const { return impl_->tok->source(); }

void Tokenizer::check_fits(const Model& model) const {
  detail::guard([&] {
    const detail::ModelImpl& m = detail::Access::model(model);
    lt::check_tokenizer_fits_model(*impl_->tok, m.config.vocab_size, m.path);
  });
}

std::string Tokenizer::encode_json_file(const std::string& json_path, bool add_special, bool skip_special) const {
  return detail::guard([&] {
    nlohmann::json in = lt::load_json_file(json_path);
    LT_CHECK(in.is_array(), "{}: expected a JSON array of strings", json_path);
    nlohmann::json out = nlohmann::json::array();
    for (size_t i = 0; i < in.size(); ++i) {
      LT_CHECK(in[i].is_string(), "{}: element {} is not a string", json_path, i);
      std::vector<int> ids = impl_->tok->encode(in[i].get<std::string>(), add_special);
      out.push_back({{"ids", ids}, {"decoded", impl_->tok->decode(ids, skip_special)}});
    }
    return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  });
}

}  // namespace leantune
