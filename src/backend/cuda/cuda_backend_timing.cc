// CudaBackend: per-op device timing with pooled CUDA events (SetOpTiming / TakeOpTimings).
#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <utility>

#include "backend/cuda/cuda_backend.h"

namespace deepinfer::backend::cuda {
namespace {

// Records kept between two TakeOpTimings calls; later ops go untimed (bounded memory).
constexpr size_t kMaxTimingRecords = size_t{1} << 18;

// Length of a run of decimal digits at the start of `s`.
size_t DigitRun(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && std::isdigit(static_cast<unsigned char>(s[n]))) ++n;
  return n;
}

// Replaces every "<prefix><digits>." in `name` by `replacement` (empty: removes it), where
// the prefix starts the name, a component (after '.') or a joined name (after '+').
std::string CollapseIndexed(std::string_view name, std::string_view prefix,
                            std::string_view replacement) {
  std::string out;
  size_t i = 0;
  while (i < name.size()) {
    const bool at_boundary = i == 0 || name[i - 1] == '.' || name[i - 1] == '+';
    if (at_boundary && name.substr(i, prefix.size()) == prefix) {
      const size_t digits = DigitRun(name.substr(i + prefix.size()));
      const size_t end = i + prefix.size() + digits;
      if (digits > 0 && end < name.size() && name[end] == '.') {
        out += replacement;
        i = end + 1;
        continue;
      }
    }
    out += name[i++];
  }
  return out;
}

}  // namespace

std::string OpTimingLabel(std::string_view op, std::string_view weight_name) {
  if (weight_name.empty()) return std::string(op);
  std::string name = CollapseIndexed(weight_name, "layers.", "");
  name = CollapseIndexed(name, "ffn.experts.", "ffn.experts.*.");
  return std::string(op) + "[" + name + "]";
}

void CudaBackend::SetOpTiming(bool on) {
  FlushTape();  // work recorded before belongs to no timed op
  timing_on_ = on;
  timing_pending_ = -1;
}

cudaEvent_t CudaBackend::TimingEvent() {
  if (timing_next_ == static_cast<int>(timing_events_.size())) {
    cudaEvent_t e = nullptr;
    if (!Check(cudaEventCreate(&e), "op timing event")) return nullptr;
    timing_events_.push_back(e);
  }
  return timing_events_[timing_next_++];
}

void CudaBackend::TimingStart() {
  if (timing_records_.size() >= kMaxTimingRecords) return;
  if (timing_pending_ < 0) {  // else re-record the start of an op that never finished
    if (TimingEvent() == nullptr) return;
    timing_pending_ = timing_next_ - 1;
  }
  Check(cudaEventRecord(timing_events_[timing_pending_], stream_), "op timing start");
}

void CudaBackend::TimingEnd(const char* what, std::string_view weight_name) {
  if (timing_pending_ < 0 || failed_) return;
  const int start = timing_pending_;
  timing_pending_ = -1;
  cudaEvent_t end = TimingEvent();
  if (end == nullptr || !Check(cudaEventRecord(end, stream_), "op timing end")) return;
  timing_records_.push_back({OpTimingLabel(what, weight_name), start, timing_next_ - 1});
}

std::vector<OpTiming> CudaBackend::TakeOpTimings() {
  std::vector<OpTiming> result;
  if (!failed_ && Check(cudaSetDevice(device_), "cudaSetDevice") &&
      Check(cudaStreamSynchronize(stream_), "op timing synchronize")) {
    std::map<std::string, OpTiming> by_label;
    for (const TimingRecord& r : timing_records_) {
      float ms = 0.0f;
      if (cudaEventElapsedTime(&ms, timing_events_[r.start], timing_events_[r.end]) !=
          cudaSuccess) {
        cudaGetLastError();
        continue;
      }
      OpTiming& t = by_label[r.label];
      t.label = r.label;
      t.calls += 1;
      t.total_us += 1000.0 * ms;
    }
    for (auto& [label, t] : by_label) result.push_back(std::move(t));
    std::sort(result.begin(), result.end(), [](const OpTiming& a, const OpTiming& b) {
      return a.total_us != b.total_us ? a.total_us > b.total_us : a.label < b.label;
    });
  }
  timing_records_.clear();
  timing_pending_ = -1;
  timing_next_ = 0;  // events are reused from the start of the pool
  return result;
}

void CudaBackend::FreeTimingEvents() {
  for (cudaEvent_t e : timing_events_) cudaEventDestroy(e);
  timing_events_.clear();
  timing_records_.clear();
  timing_pending_ = -1;
  timing_next_ = 0;
}

}  // namespace deepinfer::backend::cuda
