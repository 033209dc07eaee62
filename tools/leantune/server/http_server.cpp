// The HTTP server (http_server.h): routes, OpenAI error bodies for every failure (including the
// library's own 404 / 413), models, adapters, health and Prometheus metrics.
#include "http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <nlohmann/json.hpp>
#include <sstream>

#include "chat_format.h"
#include "server_state.h"

namespace lt::serve {

using json = nlohmann::json;

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_body(e), "application/json");
}

struct HttpServer::Impl {
  ServerState st;
  httplib::Server svr;
  const long long started = (long long)std::time(nullptr);
  int port = 0;  // bound (bind())
  Impl(leantune::Engine& e, const leantune::Tokenizer& t, ServerOptions o) : st(e, t, std::move(o)) {}
  void routes();
  std::string metrics();
};

namespace {

json model_json(const std::string& id, long long created, const std::string& parent) {
  json j = {{"id", id}, {"object", "model"}, {"created", created}, {"owned_by", "leantune"}};
  if (!parent.empty()) j["parent"] = parent;
  return j;
}

// The body of a response the library made itself (no route, body too large, a failed read).
ApiError library_error(int status) {
  switch (status) {
    case 404: return ApiError(404, "no such route; see /v1/models, /v1/completions, /v1/chat/completions", "",
                              "invalid_request_error", "not_found");
    case 413: return ApiError(413, "the request body is larger than this server accepts (--max-body-bytes)", "",
                              "invalid_request_error", "request_too_large");
    case 400: return ApiError(400, "the request could not be read");
    default: return ApiError(status, "the request failed with HTTP status " + std::to_string(status), "",
                             status >= 500 ? "server_error" : "invalid_request_error");
  }
}

// Calls fn(fd, listening) for every TCP socket of this process whose local port is `port` (httplib
// keeps its descriptors private, so they are found by scanning the descriptor table).
template <class Fn>
void for_each_socket_on(int port, Fn fn) {
  const int max_fd = int(sysconf(_SC_OPEN_MAX) > 0 ? std::min<long>(sysconf(_SC_OPEN_MAX), 65536) : 1024);
  for (int fd = 0; fd < max_fd; ++fd) {
    int listening = 0;
    socklen_t len = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0) continue;
    sockaddr_storage addr{};
    socklen_t alen = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    int p = -1;
    if (addr.ss_family == AF_INET) p = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) p = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    if (p == port) fn(fd, listening != 0);
  }
}

// cpp-httplib 0.11 listens with a backlog of 5 (compiled into Debian's library), so a burst of
// connections overflows the accept queue and clients see resets. listen() again on the listening
// socket raises its backlog.
void raise_listen_backlog(int port) {
  for_each_socket_on(port, [](int fd, bool listening) {
    if (listening) ::listen(fd, SOMAXCONN);
  });
}

// On stop, httplib joins its workers, and a worker serving an idle keep-alive connection waits for
// the keep-alive timeout (120 s) before it returns: a client holding a pooled connection would delay
// the exit by minutes. Shutting the accepted connections down ends those waits at once (the worker
// reads end of file and closes the socket).
void shutdown_connections(int port) {
  for_each_socket_on(port, [](int fd, bool listening) {
    if (!listening) ::shutdown(fd, SHUT_RDWR);
  });
}

}  // namespace

std::string HttpServer::Impl::metrics() {
  const leantune::EngineStats s = st.engine.stats();
  std::ostringstream o;
  o.precision(15);  // byte counts print whole
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n' << name << ' ' << v << '\n';
  };
  metric("leantune_requests_total", "counter", "Generation requests queued in the engine", double(s.requests));
  metric("leantune_requests_finished_total", "counter", "Generation requests finished", double(s.finished));
  metric("leantune_requests_cancelled_total", "counter", "Requests cancelled (client gone)", double(s.cancelled));
  metric("leantune_prompt_tokens_total", "counter", "Prompt tokens of queued requests", double(s.prompt_tokens));
  metric("leantune_generation_tokens_total", "counter", "Tokens generated", double(s.generated_tokens));
  metric("leantune_computed_tokens_total", "counter", "Tokens run through the model", double(s.computed_tokens));
  metric("leantune_queue_depth", "gauge", "Requests waiting for a slot", double(s.waiting));
  metric("leantune_running_requests", "gauge", "Requests in the running batch", double(s.running));
  metric("leantune_steps_total", "counter", "Batched forward steps", double(s.steps));
  metric("leantune_preemptions_total", "counter", "Requests preempted (recomputed later)", double(s.preemptions));
  metric("leantune_engine_bytes", "gauge", "Bytes the engine allocated (KV pools, batch buffers)",
         double(s.engine_bytes));
  metric("leantune_kv_blocks", "gauge", "KV cache blocks in the pool", double(s.kv_blocks));
  metric("leantune_kv_blocks_in_use", "gauge", "KV cache blocks held by requests", double(s.kv_blocks_in_use));
  metric("leantune_kv_blocks_cached", "gauge", "Free KV blocks kept for prefix reuse", double(s.kv_blocks_cached));
  metric("leantune_prefix_cache_lookups_total", "counter", "Prompt blocks looked up", double(s.prefix_lookup_blocks));
  metric("leantune_prefix_cache_hits_total", "counter", "Prompt blocks found cached", double(s.prefix_hit_blocks));
  metric("leantune_prefix_cache_hit_rate", "gauge", "Hits per lookup",
         s.prefix_lookup_blocks ? double(s.prefix_hit_blocks) / double(s.prefix_lookup_blocks) : 0.0);
  metric("leantune_spec_draft_tokens_total", "counter", "Draft tokens proposed (speculative decoding)",
         double(s.spec_proposed));
  metric("leantune_spec_accepted_tokens_total", "counter", "Draft tokens the model accepted", double(s.spec_accepted));
  metric("leantune_spec_acceptance_rate", "gauge", "Accepted per proposed draft token",
         s.spec_proposed ? double(s.spec_accepted) / double(s.spec_proposed) : 0.0);
  metric("leantune_adapter_loads_total", "counter", "Adapters loaded from disk", double(s.adapter_loads));
  metric("leantune_adapter_evictions_total", "counter", "Adapters evicted (LRU)", double(s.adapter_evictions));
  metric("leantune_adapters_resident", "gauge", "Adapters in memory", double(s.adapters_resident));
  metric("leantune_adapter_bytes", "gauge", "Bytes of resident adapters", double(s.adapter_bytes));
  o << "# HELP leantune_http_responses_total HTTP responses by route and status\n"
       "# TYPE leantune_http_responses_total counter\n";
  std::lock_guard<std::mutex> lock(st.counts_mu);
  for (const auto& [k, n] : st.http_counts)
    o << "leantune_http_responses_total{route=\"" << k.first << "\",code=\"" << k.second << "\"} " << n << '\n';
  return o.str();
}

void HttpServer::Impl::routes() {
  // every handler: ApiError -> its status; anything else -> 500
  auto wrap = [this](std::string route, auto fn) {
    return [this, route, fn](const httplib::Request& req, httplib::Response& res) {
      try {
        fn(req, res);
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const std::exception& e) {
        send_error(res, ApiError(500, std::string("internal error: ") + e.what(), "", "server_error"));
      }
      st.count(route, res.status < 0 ? 200 : res.status);
    };
  };
  svr.Post("/v1/completions", wrap("/v1/completions", [this](auto& req, auto& res) {
             handle_completion(st, req, res, false);
           }));
  svr.Post("/v1/chat/completions", wrap("/v1/chat/completions", [this](auto& req, auto& res) {
             handle_completion(st, req, res, true);
           }));
  svr.Get("/v1/models", wrap("/v1/models", [this](auto&, auto& res) {
            json data = json::array({model_json(st.o.model_name, started, "")});
            for (const auto& a : st.engine.adapters()) data.push_back(model_json(a, started, st.o.model_name));
            res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
          }));
  svr.Get("/health", wrap("/health", [](auto&, auto& res) {
            res.set_content(R"({"status":"ok"})", "application/json");
          }));
  svr.Get("/metrics", wrap("/metrics", [this](auto&, auto& res) {
            res.set_content(metrics(), "text/plain; version=0.0.4");
          }));
  svr.Post("/v1/adapters", wrap("/v1/adapters", [this](auto& req, auto& res) {
             const json j = parse_body(req.body);
             if (!j.is_object()) throw ApiError(400, "the request body is not a JSON object");
             if (!j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty())
               throw ApiError(400, "name: expected the adapter's name (a non-empty string)", "name");
             if (!j.contains("path") || !j["path"].is_string())
               throw ApiError(400, "path: expected the PEFT adapter folder", "path");
             const std::string name = j["name"], path = j["path"];
             if (name == st.o.model_name || st.engine.has_adapter(name))
               throw ApiError(409, "a model named '" + name + "' exists; unload it first", "name",
                              "invalid_request_error", "model_exists");
             try {
               st.engine.load_adapter(name, path);
             } catch (const leantune::Error& e) {
               throw ApiError(400, e.what(), "path");
             }
             res.status = 201;
             res.set_content(model_json(name, (long long)std::time(nullptr), st.o.model_name).dump(),
                             "application/json");
           }));
  svr.Delete(R"(/v1/adapters/(.+))", wrap("/v1/adapters", [this](auto& req, auto& res) {
               const std::string name = req.matches[1];
               if (!st.engine.unload_adapter(name))
                 throw ApiError(404, "no adapter named '" + leantune::excerpt(name, 80) + "' is loaded", "name",
                                "invalid_request_error", "model_not_found");
               res.set_content(json{{"id", name}, {"object", "model"}, {"deleted", true}}.dump(), "application/json");
             }));
  svr.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // a handler's own error, counted by its route
    send_error(res, library_error(res.status));
    st.count("other", res.status);
  });
}

HttpServer::HttpServer(leantune::Engine& engine, const leantune::Tokenizer& tok, ServerOptions o)
    : impl_(std::make_unique<Impl>(engine, tok, std::move(o))) {
  impl_->st.chat_template = resolve_chat_template(impl_->st.o.chat_template, tok);
  const size_t threads = size_t(std::max(4, impl_->st.o.http_threads));
  impl_->svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  impl_->svr.set_payload_max_length(impl_->st.o.max_body_bytes);
  impl_->svr.set_read_timeout(30);
  // clients keep connections in pools: closing an idle one early makes a client's next request on
  // it fail (cpp-httplib's defaults are 5 s and 5 requests)
  impl_->svr.set_keep_alive_timeout(120);
  impl_->svr.set_keep_alive_max_count(100000);
  impl_->svr.set_write_timeout(30);
  impl_->routes();
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  const ServerOptions& o = impl_->st.o;
  int port = o.port;
  if (port == 0) {
    port = impl_->svr.bind_to_any_port(o.host);
  } else if (!impl_->svr.bind_to_port(o.host, port)) {
    port = -1;
  }
  if (port <= 0)
    throw leantune::Error("cannot listen on " + o.host + ":" + std::to_string(o.port) +
                          " (in use, or not an address of this machine); pick another --port or --host");
  raise_listen_backlog(port);
  impl_->port = port;
  return port;
}

void HttpServer::run() { impl_->svr.listen_after_bind(); }
void HttpServer::stop() {
  if (!impl_->svr.is_running()) return;
  impl_->svr.stop();
  if (impl_->port > 0) shutdown_connections(impl_->port);
}

}  // namespace lt::serve
