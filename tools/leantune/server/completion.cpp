// /v1/completions and /v1/chat/completions: a request becomes one engine request per (prompt, n)
// choice; the handler's thread waits for their events and answers with one JSON, or streams them
// as server-sent events (OpenAI's chunk objects, then "data: [DONE]"). A streaming client that
// goes away cancels every choice of its request.
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <nlohmann/json.hpp>
#include <random>

#include "server_state.h"

namespace lt::serve {

using json = nlohmann::json;

namespace {

// The events of one HTTP request's choices, filled by the engine's thread.
struct Job {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<int, leantune::EngineEvent>> events;  // (choice index, event)
  int unfinished = 0;
};

struct Choice {
  std::string text;
  std::vector<std::string> pieces;  // per token: the text it completed
  std::vector<float> logprobs;
  std::string finish_reason;
  std::string error;
  int prompt_tokens = 0, completion_tokens = 0;
};

const char* finish_reason(const leantune::EngineEvent& e) {
  switch (e.stop_reason) {
    case leantune::StopReason::Eos:
    case leantune::StopReason::StopString: return "stop";
    case leantune::StopReason::Cancelled: return "cancelled";
    default: return "length";
  }
}

// The adapter a request's model names: "" for the base. ApiError 404 when unknown.
std::string resolve_model(ServerState& st, const std::string& model) {
  if (model.empty() || model == st.o.model_name) return "";
  if (st.engine.has_adapter(model)) return model;
  throw ApiError(404, "The model '" + leantune::excerpt(model, 80) + "' does not exist; GET /v1/models lists the base "
                 "model and the loaded adapters", "model", "invalid_request_error", "model_not_found");
}

// Queues every choice; on failure cancels those queued and rethrows as ApiError (429 / 400).
std::vector<uint64_t> submit_all(ServerState& st, const ParsedRequest& p, const std::string& adapter,
                                 const std::shared_ptr<Job>& job) {
  const int ctx = st.engine.context();
  static std::atomic<uint64_t> seed_counter{std::random_device{}()};
  std::vector<leantune::EngineRequest> reqs;
  for (size_t pi = 0; pi < p.prompts.size(); ++pi) {
    const int len = int(p.prompts[pi].size());
    if (len >= ctx)
      throw ApiError(400, "This model's context holds " + std::to_string(ctx) + " tokens; the prompt has " +
                     std::to_string(len) + ". Shorten the prompt.", p.chat ? "messages" : "prompt",
                     "invalid_request_error", "context_length_exceeded");
    const bool beam = p.beam.num_beams > 1;  // one request, its hypotheses the n choices
    for (int k = 0; k < (beam ? 1 : p.n); ++k) {
      leantune::EngineRequest r;
      r.prompt_ids = p.prompts[pi];
      r.adapter = adapter;
      r.options = p.options;
      r.options.max_new_tokens = p.max_tokens < 0 ? ctx - len : p.max_tokens;
      r.options.sampling.seed = p.seed ? *p.seed + uint64_t(k) : seed_counter.fetch_add(1);
      r.stop_token_ids = p.stop_token_ids;
      r.logprobs = p.logprobs;
      r.beam = p.beam;
      reqs.push_back(std::move(r));
    }
  }
  const int per = p.beam.num_beams > 1 ? p.n : 1;  // choices per engine request
  job->unfinished = int(reqs.size()) * per;
  std::vector<uint64_t> ids;
  try {
    for (size_t i = 0; i < reqs.size(); ++i)
      ids.push_back(st.engine.submit(std::move(reqs[i]), [job, i, per](const leantune::EngineEvent& e) {
        std::lock_guard<std::mutex> lock(job->mu);
        if (per == 1) {
          job->events.emplace_back(int(i), e);
          if (e.finished) --job->unfinished;
        } else if (e.finished) {  // beam search: each hypothesis finishes choice i * n + k
          for (int k = 0; k < per; ++k) {
            leantune::EngineEvent c = e;
            c.beams.clear();
            if (k < int(e.beams.size())) {
              c.text = e.beams[size_t(k)].text;
              c.stop_reason = e.beams[size_t(k)].stop_reason;
              c.completion_tokens = int(e.beams[size_t(k)].tokens.size());
            } else if (k > 0) {
              c.text.clear();
              c.completion_tokens = 0;
            }
            job->events.emplace_back(int(i) * per + k, std::move(c));
            --job->unfinished;
          }
        }
        job->cv.notify_all();
      }));
  } catch (const leantune::QueueFull& e) {
    for (uint64_t id : ids) st.engine.cancel(id);
    throw ApiError(429, e.what(), "", "rate_limit_error", "queue_full");
  } catch (const leantune::Error& e) {
    for (uint64_t id : ids) st.engine.cancel(id);
    throw ApiError(400, e.what());
  }
  return ids;
}

void add_event(Choice& c, const leantune::EngineEvent& e) {
  c.text += e.text;
  if (e.token >= 0) {
    c.pieces.push_back(e.text);
    c.logprobs.push_back(e.logprob);
  }
  if (e.finished) {
    c.finish_reason = finish_reason(e);
    c.error = e.error;
    c.prompt_tokens = e.prompt_tokens;
    c.completion_tokens = e.completion_tokens;
  }
}

// Logprobs objects; each token is named by the text it completed in the output (a decoded piece
// alone would lose a SentencePiece space), so the tokens concatenate to the text.
json logprobs_json(bool chat, const std::vector<std::string>& pieces, const std::vector<float>& lps) {
  if (chat) {
    json content = json::array();
    for (size_t i = 0; i < pieces.size(); ++i) {
      const std::string& t = pieces[i];
      json bytes = json::array();
      for (unsigned char ch : t) bytes.push_back(int(ch));
      content.push_back({{"token", t}, {"logprob", lps[i]}, {"bytes", bytes}, {"top_logprobs", json::array()}});
    }
    return {{"content", content}};
  }
  json toks = json::array(), lp = json::array(), offs = json::array();
  size_t off = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const std::string& t = pieces[i];
    toks.push_back(t);
    lp.push_back(lps[i]);
    offs.push_back(off);
    off += t.size();
  }
  return {{"tokens", toks}, {"token_logprobs", lp}, {"top_logprobs", nullptr}, {"text_offset", offs}};
}

json usage_json(int prompt, int completion) {
  return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
}

struct Meta {
  std::string id, model;
  long long created;
  bool chat;
};

void respond_whole(ServerState& st, const ParsedRequest& p, const Meta& m, Job& job, httplib::Response& res) {
  std::vector<Choice> choices(p.prompts.size() * size_t(p.n));
  {
    std::unique_lock<std::mutex> lock(job.mu);
    job.cv.wait(lock, [&] { return job.unfinished == 0; });
    for (auto& [i, e] : job.events) add_event(choices[size_t(i)], e);
  }
  json cs = json::array();
  int prompt = 0, completion = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    const Choice& c = choices[i];
    if (!c.error.empty()) return send_error(res, ApiError(500, "generation failed: " + c.error, "", "server_error"));
    if (i % size_t(p.n) == 0) prompt += c.prompt_tokens;
    completion += c.completion_tokens;
    json lp = p.logprobs ? logprobs_json(m.chat, c.pieces, c.logprobs) : json(nullptr);
    if (m.chat)
      cs.push_back({{"index", i}, {"message", {{"role", "assistant"}, {"content", c.text}}}, {"logprobs", lp},
                    {"finish_reason", c.finish_reason}});
    else
      cs.push_back({{"index", i}, {"text", c.text}, {"logprobs", lp}, {"finish_reason", c.finish_reason}});
  }
  json body = {{"id", m.id}, {"object", m.chat ? "chat.completion" : "text_completion"}, {"created", m.created},
               {"model", m.model}, {"choices", cs}, {"usage", usage_json(prompt, completion)}};
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

// One SSE chunk for event e of choice i (null when it carries nothing to send).
json chunk_json(ServerState& st, const ParsedRequest& p, const Meta& m, int i, const leantune::EngineEvent& e) {
  const bool has_token = e.token >= 0;
  if (e.text.empty() && !e.finished && !(p.logprobs && has_token)) return nullptr;
  json lp = p.logprobs && has_token ? logprobs_json(m.chat, {e.text}, {e.logprob}) : json(nullptr);
  json fr = e.finished ? json(finish_reason(e)) : json(nullptr);
  json c;
  if (m.chat) {
    json delta = json::object();
    if (!e.text.empty()) delta["content"] = e.text;
    c = {{"index", i}, {"delta", delta}, {"logprobs", lp}, {"finish_reason", fr}};
  } else {
    c = {{"index", i}, {"text", e.text}, {"logprobs", lp}, {"finish_reason", fr}};
  }
  return {{"id", m.id}, {"object", m.chat ? "chat.completion.chunk" : "text_completion"}, {"created", m.created},
          {"model", m.model}, {"choices", json::array({c})}};
}

// The streaming state kept by the content provider between its calls.
struct Stream {
  std::shared_ptr<Job> job;
  std::vector<uint64_t> ids;
  ParsedRequest p;
  Meta m;
  bool started = false;
  int prompt = 0, completion = 0;
};

bool write_event(httplib::DataSink& sink, const json& j) {
  const std::string s = "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
  return sink.write(s.data(), s.size());
}

// Sends what the engine produced since the last call; false when the client is gone.
bool stream_step(ServerState& st, Stream& s, httplib::DataSink& sink) {
  const int choices = int(s.p.prompts.size()) * s.p.n;
  if (!s.started && s.m.chat) {  // the role first, as OpenAI sends it
    for (int i = 0; i < choices; ++i) {
      json c = {{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                {"finish_reason", nullptr}};
      json j = {{"id", s.m.id}, {"object", "chat.completion.chunk"}, {"created", s.m.created}, {"model", s.m.model},
                {"choices", json::array({c})}};
      if (!write_event(sink, j)) return false;
    }
  }
  s.started = true;
  std::deque<std::pair<int, leantune::EngineEvent>> evs;
  bool done = false;
  {
    std::unique_lock<std::mutex> lock(s.job->mu);
    s.job->cv.wait_for(lock, std::chrono::milliseconds(500), [&] { return !s.job->events.empty(); });
    evs.swap(s.job->events);
    done = s.job->unfinished == 0;
  }
  for (auto& [i, e] : evs) {
    if (e.finished) {
      if (i % s.p.n == 0) s.prompt += e.prompt_tokens;
      s.completion += e.completion_tokens;
    }
    json j = chunk_json(st, s.p, s.m, i, e);
    if (!j.is_null() && !write_event(sink, j)) return false;
  }
  if (done) {
    if (s.p.include_usage) {
      json j = {{"id", s.m.id}, {"object", s.m.chat ? "chat.completion.chunk" : "text_completion"},
                {"created", s.m.created}, {"model", s.m.model}, {"choices", json::array()},
                {"usage", usage_json(s.prompt, s.completion)}};
      if (!write_event(sink, j)) return false;
    }
    const std::string end = "data: [DONE]\n\n";
    if (!sink.write(end.data(), end.size())) return false;
    sink.done();
  }
  return true;
}

void respond_stream(ServerState& st, ParsedRequest p, Meta m, std::shared_ptr<Job> job, std::vector<uint64_t> ids,
                    httplib::Response& res) {
  auto s = std::make_shared<Stream>();
  s->job = std::move(job);
  s->ids = std::move(ids);
  s->p = std::move(p);
  s->m = std::move(m);
  ServerState* stp = &st;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [stp, s](size_t, httplib::DataSink& sink) {
        if (stream_step(*stp, *s, sink)) return true;
        for (uint64_t id : s->ids) stp->engine.cancel(id);  // the client went away
        return false;
      },
      [stp, s](bool success) {
        if (!success)
          for (uint64_t id : s->ids) stp->engine.cancel(id);
      });
}

}  // namespace

void handle_completion(ServerState& st, const httplib::Request& req, httplib::Response& res, bool chat) {
  ParsedRequest p = parse_request(req.body, chat, st.tok, st.chat_template);
  const std::string adapter = resolve_model(st, p.model);
  Meta m;
  m.chat = chat;
  m.model = p.model.empty() ? st.o.model_name : p.model;
  m.created = (long long)std::time(nullptr);
  char id[32];
  std::snprintf(id, sizeof id, "%s-%012llx", chat ? "chatcmpl" : "cmpl", (unsigned long long)st.next_id.fetch_add(1));
  m.id = id;
  auto job = std::make_shared<Job>();
  std::vector<uint64_t> ids = submit_all(st, p, adapter, job);
  if (p.stream) return respond_stream(st, std::move(p), std::move(m), std::move(job), std::move(ids), res);
  respond_whole(st, p, m, *job, res);
}

}  // namespace lt::serve
