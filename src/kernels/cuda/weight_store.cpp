// The weight store's host side: layouts and sizes, the fit check, and the
// double-buffered upload over a StoreTarget (weight_store.h says what; the
// CUDA target is weight_store_cuda.cu). Pure C++: built with or without
// CUDA, tested on the CPU with a host fake target.
#include "kernels/cuda/weight_store.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>

#include "kernels/cuda/mma_repack.h"
#include "kernels/cuda/w4a16_layout.h"
#include "kernels/cuda/w4a16_repack.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace nibble {

namespace {

constexpr uint64_t kAlign = 256;  // cudaMalloc's own alignment; every part starts on one

uint64_t align_up(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

std::string gib(uint64_t b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GiB", double(b) / double(1ull << 30));
  return s;
}

// The formats the W4A16 kernels take (INT4: group 32, repack_w4a16 checks).
bool is_fp4(Format f) { return f == Format::mxfp4 || f == Format::nvfp4 || f == Format::int4; }
bool is_mma(Format f) { return f == Format::fp8_block128 || f == Format::bf16; }

// The per-view bytes of each part of a w4a16 / mma entry.
std::vector<uint64_t> part_sizes(const StoreEntry& e) {
  if (e.layout == DeviceLayout::stored) return {e.raw_bytes};
  const WeightView& v = e.views.front();
  if (e.layout == DeviceLayout::w4a16) {
    const uint64_t rp = uint64_t(w4a16::round_up(v.rows, 16)), cp = uint64_t(w4a16::round_up(v.cols, 64));
    return {rp * cp / 2, w4a16_scale_bytes(v.format, v.rows, v.cols), 4};
  }
  return {mma_word_bytes(v.format, v.rows, v.cols), mma_scale_bytes(v.format, v.rows, v.cols)};
}

void check_entry(const StoreEntry& e) {
  if (e.layout == DeviceLayout::stored) {
    if (!e.views.empty()) fail("weight store: ", e.name, ": a stored entry holds raw bytes, not matrices");
    if (e.raw_bytes > 0 && !e.raw) fail("weight store: ", e.name, ": ", e.raw_bytes, " raw bytes without data");
    return;
  }
  if (e.views.empty()) fail("weight store: ", e.name, ": no matrices");
  const WeightView& v0 = e.views.front();
  const bool fits = e.layout == DeviceLayout::w4a16 ? is_fp4(v0.format) : is_mma(v0.format);
  if (!fits)
    fail("weight store: ", e.name, ": the ", device_layout_name(e.layout), " layout does not take ",
         format_name(v0.format), " (", v0.name, ")");
  for (const WeightView& v : e.views)
    if (v.format != v0.format || v.rows != v0.rows || v.cols != v0.cols)
      fail("weight store: ", e.name, ": ", v.name, " is ", format_name(v.format), " [", v.rows, ", ", v.cols,
           "] but ", v0.name, " is ", format_name(v0.format), " [", v0.rows, ", ", v0.cols,
           "]: a stack holds matrices of one format and shape");
}

}  // namespace

const char* device_layout_name(DeviceLayout l) {
  switch (l) {
    case DeviceLayout::w4a16: return "w4a16";
    case DeviceLayout::mma: return "mma";
    case DeviceLayout::stored: return "stored";
  }
  return "?";
}

DeviceLayout cuda_layout_for(Format format, bool is_matrix) {
  if (!is_matrix) return DeviceLayout::stored;
  if (is_fp4(format)) return DeviceLayout::w4a16;
  if (is_mma(format)) return DeviceLayout::mma;
  return DeviceLayout::stored;
}

uint64_t cuda_layout_bytes(Format format, bool is_matrix, int64_t rows, int64_t cols, uint64_t stored_bytes) {
  switch (cuda_layout_for(format, is_matrix)) {
    case DeviceLayout::w4a16:
      return w4a16_repacked_bytes(format, rows, cols) + 4;  // + the f32 global scale (1.0 for MXFP4)
    case DeviceLayout::mma:
      return mma_word_bytes(format, rows, cols) + mma_scale_bytes(format, rows, cols);
    case DeviceLayout::stored:
      return stored_bytes;
  }
  return stored_bytes;
}

uint64_t StoreEntryPlan::bytes() const {
  uint64_t b = 0;
  for (const StorePart& p : parts) b += p.bytes;
  return b;
}

StorePlan plan_weight_store(const std::vector<StoreEntry>& entries) {
  StorePlan plan;
  uint64_t at = 0;
  for (const StoreEntry& e : entries) {
    check_entry(e);
    StoreEntryPlan ep;
    const uint64_t n = e.layout == DeviceLayout::stored ? 1 : e.views.size();
    for (uint64_t per : part_sizes(e)) {
      StorePart p{at, per * n, per};
      at = align_up(at + p.bytes);
      ep.parts.push_back(p);
    }
    plan.entries.push_back(std::move(ep));
  }
  plan.total_bytes = at;
  return plan;
}

void check_store_fits(const StorePlan& plan, const std::vector<StoreEntry>& entries, uint64_t reserve_bytes,
                      uint64_t free_bytes, uint64_t total_bytes, const std::string& device) {
  if (plan.total_bytes + reserve_bytes <= free_bytes) return;
  std::vector<size_t> order(entries.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return plan.entries[a].bytes() > plan.entries[b].bytes(); });
  std::string largest;
  for (size_t i = 0; i < std::min<size_t>(3, order.size()); ++i)
    largest += std::string(i ? ", " : "") + entries[order[i]].name + " " + gib(plan.entries[order[i]].bytes());
  fail("the weights need ", gib(plan.total_bytes), " (", plan.total_bytes, " bytes) on ", device, " plus ",
       gib(reserve_bytes), " reserved for caches and activations; ", device, " has ", gib(free_bytes), " free of ",
       gib(total_bytes), ": the model does not fit (nothing was copied). Largest: ", largest);
}

StoreUpload upload_weight_store(const std::vector<StoreEntry>& entries, StoreTarget& target, uint64_t reserve_bytes,
                                uint64_t staging_bytes, const StoreProgress& progress, ThreadPool* pool) {
  StoreUpload up;
  up.plan = plan_weight_store(entries);
  uint64_t free_b = 0, total_b = 0;
  target.memory(&free_b, &total_b);
  check_store_fits(up.plan, entries, reserve_bytes, free_b, total_b, target.name());
  // An mma matrix streams into staging one 16-row strip at a time at least.
  for (const StoreEntry& e : entries)
    if (e.layout == DeviceLayout::mma) {
      const WeightView& v = e.views.front();
      const uint64_t strip = mma_word_bytes(v.format, 16, v.cols);
      if (staging_bytes < strip)
        fail("weight store: staging buffers of ", staging_bytes, " bytes are smaller than one 16-row strip of ",
             e.name, " (", strip, " bytes)");
    }
  if (staging_bytes == 0) fail("weight store: staging buffers of 0 bytes");
  up.base = target.allocate(up.plan.total_bytes);

  uint64_t done = 0, total = 0;
  for (const auto& ep : up.plan.entries) total += ep.bytes();
  int cur = 0;
  // One piece: wait until buffer `cur`'s previous copy is done, fill it on
  // the host, start its copy, and move to the other buffer, whose copy
  // then runs while this one is filled next time.
  auto emit = [&](uint8_t* dst, uint64_t n, const std::function<void(uint8_t*)>& fill) {
    target.wait(cur);
    uint8_t* buf = target.staging(cur, staging_bytes);
    fill(buf);
    target.copy_async(cur, dst, n);
    cur ^= 1;
    done += n;
    if (progress) progress(done, total);
  };
  auto stream = [&](uint8_t* dst, const uint8_t* src, uint64_t n) {
    for (uint64_t off = 0; off < n; off += staging_bytes) {
      const uint64_t len = std::min(staging_bytes, n - off);
      emit(dst + off, len, [&](uint8_t* buf) { std::memcpy(buf, src + off, len); });
    }
  };

  for (size_t i = 0; i < entries.size(); ++i) {
    const StoreEntry& e = entries[i];
    const std::vector<StorePart>& parts = up.plan.entries[i].parts;
    if (e.layout == DeviceLayout::stored) {
      stream(up.part(i, 0), e.raw, e.raw_bytes);
    } else if (e.layout == DeviceLayout::w4a16) {
      std::vector<float> gs;
      // A batch of the stack's matrices repacked at once (one per thread),
      // then streamed in order.
      const size_t batch = pool ? size_t(pool->size()) : 1;
      std::vector<W4A16Matrix> ms(batch);
      for (size_t v0 = 0; v0 < e.views.size(); v0 += batch) {
        const size_t nb = std::min(batch, e.views.size() - v0);
        auto repack = [&](int64_t b, int64_t end, int) {
          for (int64_t k = b; k < end; ++k) ms[size_t(k)] = repack_w4a16(e.views[v0 + size_t(k)]);
        };
        if (pool && nb > 1) pool->parallel_for(int64_t(nb), repack);
        else repack(0, int64_t(nb), 0);
        for (size_t k = 0; k < nb; ++k) {
          const size_t v = v0 + k;
          const W4A16Matrix& m = ms[k];
          stream(up.part(i, 0) + v * parts[0].per_view, reinterpret_cast<const uint8_t*>(m.words.data()),
                 m.words.size() * 4);
          stream(up.part(i, 1) + v * parts[1].per_view, m.scales.data(), m.scales.size());
          gs.push_back(m.global_scale);
        }
      }
      stream(up.part(i, 2), reinterpret_cast<const uint8_t*>(gs.data()), gs.size() * 4);
    } else {
      std::vector<float> scales;
      for (size_t v = 0; v < e.views.size(); ++v) {
        const WeightView& w = e.views[v];
        const uint64_t strip_bytes = mma_word_bytes(w.format, 16, w.cols);
        const int64_t strips = w4a16::round_up(w.rows, 16) / 16;
        const int64_t per_piece = int64_t(staging_bytes / strip_bytes);
        uint8_t* dst = up.part(i, 0) + v * parts[0].per_view;
        for (int64_t s = 0; s < strips; s += per_piece) {
          const int64_t s1 = std::min(strips, s + per_piece);
          emit(dst + uint64_t(s) * strip_bytes, uint64_t(s1 - s) * strip_bytes, [&](uint8_t* buf) {
            auto part = [&](int64_t b, int64_t end, int) {
              repack_mma_strips(w, s + b, s + end, buf + uint64_t(b) * strip_bytes);
            };
            if (pool) pool->parallel_for(s1 - s, part);
            else part(0, s1 - s, 0);
          });
        }
        const std::vector<float> sv = mma_scales(w);
        scales.insert(scales.end(), sv.begin(), sv.end());
      }
      stream(up.part(i, 1), reinterpret_cast<const uint8_t*>(scales.data()), scales.size() * 4);
    }
  }
  target.finish();
  return up;
}

StoreProgress stderr_progress_bar(const std::string& device) {
  auto last = std::make_shared<int>(-1);
  return [device, last](uint64_t done, uint64_t total) {
    const int pct = total ? int(done * 100 / total) : 100;
    if (pct == *last) return;
    *last = pct;
    char bar[21];
    for (int i = 0; i < 20; ++i) bar[i] = i < pct / 5 ? '#' : ' ';
    bar[20] = 0;
    std::fprintf(stderr, "\rupload %s [%s] %3d%%  %s / %s%s", device.c_str(), bar, pct, gib(done).c_str(),
                 gib(total).c_str(), done >= total ? "\n" : "");
    std::fflush(stderr);
  };
}

}  // namespace nibble
