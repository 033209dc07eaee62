// The OpenAI-compatible HTTP/1.1 front end of `leantune serve` (cpp-httplib), over a started
// leantune::Engine. Routes:
//   POST /v1/completions, /v1/chat/completions   (stream: server-sent events, else one JSON)
//   GET  /v1/models                              (the base model and every loaded adapter)
//   POST /v1/adapters {"name", "path"}, DELETE /v1/adapters/NAME
//   GET  /health, /metrics (Prometheus text)
// Errors are OpenAI's {"error": {...}} bodies: 400 malformed or invalid request (prompt too long,
// negative max_tokens ...), 404 unknown model or route, 409 adapter name taken, 413 body too
// large, 429 queue full, 500 an engine failure. A streaming client that disconnects cancels its
// requests. Each HTTP request is served on one thread of a pool, which waits for the engine's
// events; the engine batches all of them.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

namespace leantune {
class Engine;
class Tokenizer;
}  // namespace leantune

namespace lt::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                      // 0: any free port (bind() returns it)
  std::string model_name;               // the base model's id in /v1/models and requests
  std::string chat_template = "auto";   // chat_format.h
  size_t max_body_bytes = 8u << 20;     // larger bodies get 413
  int http_threads = 128;               // requests handled at once (the rest wait for a thread)
};

class HttpServer {
 public:
  // `engine` (started) and `tok` must outlive the server.
  HttpServer(leantune::Engine& engine, const leantune::Tokenizer& tok, ServerOptions o);
  ~HttpServer();
  // Binds the socket; returns the port. leantune::Error when it cannot.
  int bind();
  // Serves until stop() (from another thread or a signal handler's helper thread).
  void run();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lt::serve
