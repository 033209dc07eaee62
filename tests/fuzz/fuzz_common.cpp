// Shared pieces of the libFuzzer harnesses: the memfd-backed input path, the small in-memory
// tokenizer and the exception policy of one run (see fuzz_common.h).
#include "fuzz_common.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <typeinfo>
#include <vector>

#include "core/error.h"
#include "tokenizer/llama2c_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace lt::fuzz {

std::string bytes_path(std::string_view bytes) {
  static int fd = memfd_create("lt_fuzz_input", MFD_CLOEXEC);
  LT_ASSERT(fd >= 0);
  LT_ASSERT(ftruncate(fd, 0) == 0);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t w = pwrite(fd, bytes.data() + done, bytes.size() - done, off_t(done));
    LT_ASSERT(w > 0);
    done += size_t(w);
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

namespace {

void put_piece(std::string& out, float score, const std::string& piece) {
  int32_t len = int32_t(piece.size());
  out.append(reinterpret_cast<const char*>(&score), 4);
  out.append(reinterpret_cast<const char*>(&len), 4);
  out += piece;
}

}  // namespace

std::string small_tokenizer_bytes() {
  std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    pieces.push_back(buf);
  }
  for (char c = ' '; c <= '~'; ++c) pieces.push_back(std::string(1, c));
  for (const char* m : {"th", "he", "in", "er", "an", " t", " a", " the", "<|", "|>", "im", "_start", "_end"})
    pieces.push_back(m);
  std::string out(4, '\0');
  int32_t max_len = 16;
  std::memcpy(out.data(), &max_len, 4);
  for (size_t i = 0; i < pieces.size(); ++i) put_piece(out, i < 259 ? 0.0f : -float(i), pieces[i]);
  return out;
}

const Tokenizer& small_tokenizer() {
  static std::unique_ptr<Tokenizer> tok = load_llama2c_tokenizer("small_tokenizer.bin", small_tokenizer_bytes());
  return *tok;
}

void exercise_tokenizer(const Tokenizer& tok) {
  static const char kBadUtf8[] = "bad \xff\xfe utf8 \xc3 \x00 nul";
  static const std::string kTexts[] = {
      "", " ", "Hello world", "  two  spaces\n\nnew\tlines\r\n", "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80",
      std::string(kBadUtf8, sizeof kBadUtf8 - 1),
      "<s></s><unk><|im_start|>user<|im_end|><|endoftext|>",
      "don't I'LL 12345 3.14 <0x41>"};
  int V = tok.vocab_size();
  (void)tok.bos_id(), (void)tok.eos_id();
  for (const std::string& t : kTexts)
    for (bool special : {false, true}) {
      std::vector<int> ids = tok.encode(t, special);
      (void)tok.decode(ids, !special);
      Tokenizer::StreamDecoder sd(tok, !special);
      for (int id : ids) (void)sd.push(id);
      (void)sd.flush();
    }
  std::vector<int> ids = {-1, V, V + 1, 0x7fffffff};
  for (int i = 0; i < V && i < 300; ++i) ids.push_back(i);
  for (int i = V - 1; i >= 300 && i >= V - 300; --i) ids.push_back(i);
  for (int id : ids) (void)tok.token_text(id), (void)tok.is_special(id);
  (void)tok.decode(ids, false);
  (void)tok.decode(ids, true);
}

int run_one(Harness h, const uint8_t* data, size_t size) {
  if (size > kMaxInputBytes) return -1;  // libFuzzer: do not add to the corpus
  try {
    h(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const Error&) {
  } catch (const std::exception& e) {
    static std::set<std::string> seen;
    static const bool strict = [] {
      const char* s = std::getenv("LT_FUZZ_STRICT");
      return s && std::strcmp(s, "1") == 0;
    }();
    if (seen.insert(typeid(e).name()).second || strict)
      std::fprintf(stderr, "lt_fuzz: exception other than lt::Error (%s): %.300s\n", typeid(e).name(), e.what());
    if (strict) std::abort();
  }
  return 0;
}

}  // namespace lt::fuzz
