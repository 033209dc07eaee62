// libFuzzer harness: a request body as the server's /v1/completions and /v1/chat/completions receive
// it, parsed and checked by tools/leantune/server/openai_request.cpp (with the built-in chat formats
// of chat_format.cpp) against a small tokenizer, then the error body a rejection is answered with.
// A rejection is an ApiError (the server's 4xx answer) or a leantune::Error; a body every endpoint
// rejects ends as an lt::Error (a clean rejection for the fuzzer, and what the regression test's
// valid input must not give); anything else escapes to run_one.
#include "core/error.h"
#include "fuzz_common.h"
#include "leantune/error.h"
#include "leantune/tokenizer.h"
#include "openai_request.h"

namespace lt::fuzz {

void openai_request(std::string_view bytes) {
  static const leantune::Tokenizer tok(bytes_path(small_tokenizer_bytes()));
  const std::string body(bytes);
  const struct {
    bool chat;
    const char* format;
  } endpoints[] = {{false, "plain"}, {true, "chatml"}, {true, "llama3"}, {true, "llama2"}, {true, "plain"}, {true, "model"}};
  int accepted = 0;
  for (const auto& e : endpoints) {
    try {
      const serve::ParsedRequest r = serve::parse_request(body, e.chat, tok, e.format);
      for (const auto& p : r.prompts) (void)tok.decode(p);
      ++accepted;
    } catch (const serve::ApiError& err) {
      (void)serve::error_body(err);
    } catch (const leantune::Error&) {
    }
  }
  if (!accepted) fail("the request was rejected by every endpoint");
}

}  // namespace lt::fuzz

LT_FUZZ_ENTRY(lt::fuzz::openai_request)
