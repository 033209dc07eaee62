// engine.h: the public Engine over the engine's Scheduler (infer/scheduler.h) and AdapterCache.
// Requests and cancels from any thread land in an inbox under a mutex; the stepping thread drains
// it into the scheduler before each step, so the scheduler itself stays single-threaded.
#include "leantune/engine.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "api/access.h"
#include "api/guard.h"
#include "api/serve_options.h"
#include "core/error.h"
#include "infer/adapter_cache.h"
#include "infer/scheduler.h"

namespace leantune {

struct Engine::Impl {
  std::shared_ptr<const lt::LlamaModel> weights;
  const lt::Tokenizer* tok = nullptr;
  int threads = 1;
  EngineOptions o;
  std::unique_ptr<lt::Scheduler> sch;
  std::unique_ptr<lt::AdapterCache> adapters;

  struct Pending {
    uint64_t id;
    lt::SchedRequest req;
  };
  std::mutex mu;  // guards the inbox, the cancels, `stop` and the stats snapshot
  std::condition_variable cv;
  std::vector<Pending> inbox;
  std::vector<uint64_t> cancels;
  uint64_t next_id = 1;
  bool stop = false;
  lt::SchedStats snapshot;
  std::thread thread;
  std::atomic<bool> started{false};
  std::unordered_map<uint64_t, uint64_t> sched_id;  // public id -> scheduler id (stepping thread only)

  bool drain_and_step();
  void loop();
};

namespace {

StopReason stop_reason(const std::string& r) {
  if (r == "eos") return StopReason::Eos;
  if (r == "stop_string") return StopReason::StopString;
  if (r == "context") return StopReason::Context;
  if (r == "cancelled" || r == "error") return StopReason::Cancelled;
  return StopReason::MaxNewTokens;
}

EngineEvent public_event(const lt::SchedEvent& e) {
  EngineEvent p;
  p.token = e.token;
  p.text = e.text;
  p.logprob = e.logprob;
  p.finished = e.finished;
  p.stop_reason = stop_reason(e.reason);
  p.error = e.error;
  p.prompt_tokens = e.prompt_tokens;
  p.completion_tokens = e.completion_tokens;
  p.cached_tokens = e.cached_tokens;
  for (const lt::SchedBeam& b : e.beams) p.beams.push_back({b.tokens, b.text, b.score, stop_reason(b.reason)});
  return p;
}

lt::BeamOptions beam_options(const BeamSearchOptions& b) {
  lt::BeamOptions o;
  o.num_beams = b.num_beams;
  o.num_return = b.num_return;
  o.length_penalty = b.length_penalty;
  if (b.early_stopping == "true") o.early_stopping = lt::EarlyStopping::True;
  else if (b.early_stopping == "never") o.early_stopping = lt::EarlyStopping::Never;
  else LT_CHECK(b.early_stopping == "false", "early_stopping is '{}'; use false, true or never", b.early_stopping);
  LT_CHECK(b.num_beams >= 1, "num_beams is {}; it must be 1 or more", b.num_beams);
  LT_CHECK(b.num_return >= 1 && b.num_return <= b.num_beams, "{} sequences asked of {} beams; ask 1 to {}",
           b.num_return, b.num_beams, b.num_beams);
  return o;
}

void cancelled_event(const lt::SchedRequest& r, const std::string& error) {
  lt::SchedEvent e;
  e.finished = true;
  e.reason = error.empty() ? "cancelled" : "error";
  e.error = error;
  e.prompt_tokens = int(r.prompt.size());
  if (r.on_event) r.on_event(e);
}

}  // namespace

// Moves the inbox and the cancels into the scheduler, then runs one step; whether work remains.
bool Engine::Impl::drain_and_step() {
  std::vector<Pending> adds;
  std::vector<uint64_t> cs;
  {
    std::lock_guard<std::mutex> lock(mu);
    adds.swap(inbox);
    cs.swap(cancels);
  }
  for (auto& p : adds) {
    if (std::find(cs.begin(), cs.end(), p.id) != cs.end()) {
      cancelled_event(p.req, "");
      continue;
    }
    auto done = p.req.on_event;
    const uint64_t pub = p.id;
    p.req.on_event = [this, done, pub](const lt::SchedEvent& e) {
      if (e.finished) sched_id.erase(pub);
      if (done) done(e);
    };
    try {
      sched_id[pub] = sch->add(p.req);
    } catch (const std::exception& e) {
      cancelled_event(p.req, e.what());
    }
  }
  for (uint64_t id : cs)
    if (auto it = sched_id.find(id); it != sched_id.end()) sch->cancel(it->second);
  bool more = true;
  try {
    more = sch->step();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "leantune engine: step failed: %s\n", e.what());
  }
  std::lock_guard<std::mutex> lock(mu);
  snapshot = sch->stats();
  return more || !inbox.empty() || !cancels.empty();
}

void Engine::Impl::loop() {
  detail::ThreadScope scope(threads);
  bool work = false;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return stop || work || !inbox.empty() || !cancels.empty(); });
      if (stop) return;
    }
    work = drain_and_step();
  }
}

Engine::Engine(const Model& model, const Tokenizer& tok, const EngineOptions& options) {
  impl_ = detail::guard([&] {
    const detail::ModelImpl& m = detail::Access::model(model);
    auto e = std::make_unique<Impl>();
    e->weights = m.weights;
    e->tok = &detail::Access::tokenizer(tok);
    e->threads = m.threads;
    e->o = options;
    LT_CHECK(options.max_queue >= 0, "max_queue is {}; it must be 0 or more", options.max_queue);
    const lt::ModelConfig* draft = nullptr;
    if (options.draft_model) draft = &detail::Access::model(*options.draft_model).weights->config();
    lt::SchedulerOptions so = detail::scheduler_options(m.weights->config(), options, draft);
    if (options.draft_model) so.draft = detail::Access::model(*options.draft_model).weights;
    e->sch = std::make_unique<lt::Scheduler>(m.weights, *e->tok, so);
    e->adapters = std::make_unique<lt::AdapterCache>(m.weights->config(), options.adapter_memory_bytes);
    e->snapshot = e->sch->stats();
    return e;
  });
}

Engine::~Engine() { stop(); }

uint64_t Engine::submit(EngineRequest r, EventCallback on_event) {
  return detail::guard([&]() -> uint64_t {
    Impl& I = *impl_;
    const int ctx = I.sch->options().max_context;
    LT_CHECK(!r.prompt_ids.empty(), "the prompt encodes to no tokens; give a prompt or keep BOS");
    LT_CHECK(int(r.prompt_ids.size()) < ctx, "the prompt has {} tokens; the context holds {} (prompt and output)",
             r.prompt_ids.size(), ctx);
    LT_CHECK(r.options.max_new_tokens >= 0, "max_new_tokens is {}; it must be 0 or more", r.options.max_new_tokens);
    lt::SchedRequest s;
    s.prompt = std::move(r.prompt_ids);
    if (!r.adapter.empty()) s.adapter = I.adapters->get(r.adapter, &s.adapter_salt);
    s.max_new_tokens = r.options.max_new_tokens;
    s.stop = r.options.stop;
    s.stop_at_eos = r.options.stop_at_eos;
    s.stop_ids = std::move(r.stop_token_ids);
    s.logprobs = r.logprobs;
    const SamplingOptions& so = r.options.sampling;
    s.sampler = {so.temperature, so.top_k, so.top_p, so.min_p, so.repetition_penalty, so.no_repeat_ngram_size, so.seed};
    lt::Sampler check(s.sampler, 1);  // throws naming the option out of range
    s.beam = beam_options(r.beam);
    I.sch->check_beam(s);
    s.on_event = [cb = std::move(on_event)](const lt::SchedEvent& e) {
      if (cb) cb(public_event(e));
    };
    std::lock_guard<std::mutex> lock(I.mu);
    if (int(I.inbox.size()) + I.snapshot.waiting >= I.o.max_queue)
      throw QueueFull("the queue is full: " + std::to_string(I.o.max_queue) + " requests are waiting; retry later");
    const uint64_t id = I.next_id++;
    I.inbox.push_back({id, std::move(s)});
    I.cv.notify_one();
    return id;
  });
}

void Engine::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->cancels.push_back(id);
  impl_->cv.notify_one();
}

bool Engine::step() {
  return detail::guard([&] {
    LT_CHECK(!impl_->started, "Engine::step: the engine runs its own thread (start()); stop() it first");
    detail::ThreadScope scope(impl_->threads);
    return impl_->drain_and_step();
  });
}

void Engine::start() {
  if (impl_->started.exchange(true)) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = false;
  }
  impl_->thread = std::thread([this] { impl_->loop(); });
}

void Engine::stop() {
  if (!impl_ || !impl_->started) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
    impl_->cv.notify_one();
  }
  impl_->thread.join();
  impl_->started = false;
}

void Engine::load_adapter(const std::string& name, const std::string& dir) {
  detail::guard([&] { impl_->adapters->add(name, dir); });
}
bool Engine::unload_adapter(const std::string& name) {
  return detail::guard([&] { return impl_->adapters->remove(name); });
}
bool Engine::has_adapter(const std::string& name) const { return impl_->adapters->contains(name); }
std::vector<std::string> Engine::adapters() const { return impl_->adapters->names(); }
int Engine::context() const { return impl_->sch->options().max_context; }

EngineStats Engine::stats() const {
  lt::SchedStats s;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    s = impl_->snapshot;
    s.waiting += int(impl_->inbox.size());  // submitted, not yet handed to the scheduler
  }
  const lt::AdapterStats a = impl_->adapters->stats();
  EngineStats p;
  p.requests = s.requests;
  p.finished = s.finished;
  p.cancelled = s.cancelled;
  p.preemptions = s.preemptions;
  p.steps = s.steps;
  p.prompt_tokens = s.prompt_tokens;
  p.generated_tokens = s.generated_tokens;
  p.computed_tokens = s.prefill_tokens;
  p.prefix_lookup_blocks = s.prefix_lookup_blocks;
  p.prefix_hit_blocks = s.prefix_hit_blocks;
  p.adapter_loads = a.loads;
  p.spec_proposed = s.spec_proposed;
  p.spec_accepted = s.spec_accepted;
  p.adapter_evictions = a.evictions;
  p.waiting = s.waiting;
  p.running = s.running;
  p.kv_blocks = s.blocks_total;
  p.kv_blocks_in_use = s.blocks_in_use;
  p.kv_blocks_cached = s.blocks_cached;
  p.block_size = impl_->sch->options().block_size;
  p.adapters_resident = a.resident;
  p.adapter_bytes = a.resident_bytes;
  p.kv_bytes = impl_->sch->pool().arenas().allocated_bytes(lt::Category::KVCache);
  p.engine_bytes = impl_->sch->allocated_bytes();
  return p;
}

}  // namespace leantune
