// What the HTTP handlers share: the engine, tokenizer and options, and the HTTP counters that
// /metrics reports. Private to tools/leantune/server.
#pragma once
#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include <httplib.h>

#include "http_server.h"
#include "leantune/engine.h"
#include "leantune/tokenizer.h"
#include "openai_request.h"

namespace lt::serve {

struct ServerState {
  leantune::Engine& engine;
  const leantune::Tokenizer& tok;
  ServerOptions o;
  std::string chat_template;  // resolved
  std::atomic<uint64_t> next_id{1};
  std::mutex counts_mu;
  std::map<std::pair<std::string, int>, uint64_t> http_counts;  // (route, status) -> responses

  ServerState(leantune::Engine& e, const leantune::Tokenizer& t, ServerOptions opts)
      : engine(e), tok(t), o(std::move(opts)) {}
  void count(const std::string& route, int status) {
    std::lock_guard<std::mutex> lock(counts_mu);
    ++http_counts[{route, status}];
  }
};

// Writes an OpenAI error response.
void send_error(httplib::Response& res, const ApiError& e);

// POST /v1/completions (chat false) and /v1/chat/completions (completion.cpp).
void handle_completion(ServerState& st, const httplib::Request& req, httplib::Response& res, bool chat);

}  // namespace lt::serve
