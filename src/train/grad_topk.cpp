// Top-k gradient sparsification with error feedback (train/grad_topk.h).
#include "train/grad_topk.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace lt {

TopkFeedback parse_topk_feedback(const std::string& s) {
  if (s == "residual" || s == "error_feedback") return TopkFeedback::Residual;
  if (s == "scale") return TopkFeedback::Scale;
  fail("grad_topk_feedback: '{}' is not known; expected residual (error feedback) or scale (compensation scaling)", s);
}

size_t topk_keep(size_t n, double fraction) {
  if (n == 0) return 0;
  const size_t k = size_t(std::ceil(fraction * double(n)));
  return std::min(n, std::max<size_t>(1, k));
}

std::string topk_residual_name(int worker, const std::string& name) {
  return "topk_residual." + std::to_string(worker) + "." + name;
}
std::string topk_age_name(const std::string& name) { return "topk_age." + name; }

GradTopK::GradTopK(const TopkOptions& o, std::vector<size_t> counts) : o_(o), counts_(std::move(counts)) {
  init();
  // buffers of its own: W residuals, then the ages
  own_.assign(total_ * (size_t(o.workers) * o.residuals() + o.ages()), 0.0f);
  float* at = own_.data();
  if (o.residuals()) {
    buf_.residual.assign(size_t(o.workers), {});
    for (auto& r : buf_.residual)
      for (size_t n : counts_) r.push_back(std::exchange(at, at + n));
  }
  if (o.ages())
    for (size_t n : counts_) buf_.age.push_back(std::exchange(at, at + n));
}

GradTopK::GradTopK(const TopkOptions& o, std::vector<size_t> counts, TopkBuffers buffers)
    : o_(o), counts_(std::move(counts)), buf_(std::move(buffers)) {
  init();
  bool ok = buf_.residual.size() == size_t(o.workers) * o.residuals() && buf_.age.size() == counts_.size() * o.ages();
  for (const auto& r : buf_.residual) ok = ok && r.size() == counts_.size();
  LT_CHECK(ok, "internal: grad_topk's planned buffers do not match its options ({} workers, {} tensors, ages {})",
           o.workers, counts_.size(), o.ages());
}

void GradTopK::init() {
  LT_CHECK(o_.fraction > 0 && o_.fraction <= 1, "grad_topk: {} is out of range: it must be in (0, 1]", o_.fraction);
  LT_CHECK(o_.workers >= 1, "grad_topk_workers: {} is out of range: it must be >= 1", o_.workers);
  size_t mx = 0;
  for (size_t n : counts_) {
    total_ += n;
    mx = std::max(mx, n);
  }
  acc_.resize(mx);
  order_.resize(mx);
}

float* GradTopK::residual(size_t i, int w) { return buf_.residual.empty() ? nullptr : buf_.residual[size_t(w)][i]; }

void GradTopK::select(size_t i, int w, const float* g, uint32_t* idx, float* val) {
  const size_t n = counts_[i], k = keep(i);
  float* e = residual(i, w);
  float* acc = acc_.data();
  for (size_t j = 0; j < n; ++j) acc[j] = e ? g[j] + e[j] : g[j];
  uint32_t* ord = order_.data();
  for (size_t j = 0; j < n; ++j) ord[j] = uint32_t(j);
  // a total order (magnitude descending, then index ascending): the same selection on every rank
  auto larger = [acc](uint32_t a, uint32_t b) {
    const float x = std::fabs(acc[a]), y = std::fabs(acc[b]);
    return x > y || (x == y && a < b);
  };
  if (k < n) std::nth_element(ord, ord + k, ord + n, larger);
  std::sort(ord, ord + k);
  double scale = 1;
  if (!e) {  // compensation scaling: the kept entries carry the dense 2-norm
    double all = 0, kept = 0;
    for (size_t j = 0; j < n; ++j) all += double(g[j]) * double(g[j]);
    for (size_t j = 0; j < k; ++j) kept += double(g[ord[j]]) * double(g[ord[j]]);
    scale = kept > 0 ? std::sqrt(all / kept) : 1.0;
  }
  for (size_t j = 0; j < k; ++j) {
    idx[j] = ord[j];
    val[j] = e ? acc[ord[j]] : float(double(g[ord[j]]) * scale);
  }
  if (e) {  // the residual: what was not sent
    std::memcpy(e, acc, n * sizeof(float));
    for (size_t j = 0; j < k; ++j) e[idx[j]] = 0.0f;
  }
}

void scatter_add(float* g, const uint32_t* idx, const float* val, size_t k) {
  for (size_t j = 0; j < k; ++j) g[idx[j]] += val[j];
}

}  // namespace lt
