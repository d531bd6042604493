#include "model/mla_items.h"

#include <algorithm>
#include <vector>

#include "util/thread_pool.h"

namespace nibble {

namespace {

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

}  // namespace

void run_mla_items(void (*item_fn)(const x86::MlaItem&), const x86::MlaItem& proto, int64_t tokens, int64_t heads,
                   int64_t max_rows, ThreadPool* pool,
                   const std::function<void(x86::MlaItem& it, int64_t t, int64_t h0, int worker)>& setup) {
  const int64_t G = x86::kMlaGroup, ld = round_up(proto.latent, 32), ldr = round_up(proto.rope, 16);
  const int64_t threads = pool ? pool->size() : 1;
  const int64_t splits = std::max<int64_t>(1, (threads + tokens - 1) / tokens);
  const int64_t slice = std::min(round_up(heads, G), round_up((heads + splits - 1) / splits, G));
  const int64_t slices = (heads + slice - 1) / slice, groups = slice / G;
  const int64_t items = tokens * slices;
  auto work = [&](int64_t first, int64_t step) {
    const int worker = int(first);
    if (first >= items) return;
    const int64_t floats = slice * (2 * ld + ldr + 16) + groups * round_up(max_rows, 2) * G;
    std::vector<float> buf(size_t(floats + 16));
    float* base = buf.data() + (16 - (reinterpret_cast<uintptr_t>(buf.data()) / sizeof(float)) % 16) % 16;
    x86::MlaItem it = proto;
    it.ld = ld, it.ldr = ldr;
    it.q_abs = base, it.ctx = base + slice * ld, it.q_rope = base + 2 * slice * ld;
    it.inv_sum = it.q_rope + slice * ldr, it.scores = it.inv_sum + slice * 16;
    for (int64_t item = first; item < items; item += step) {
      const int64_t t = item / slices, h0 = item % slices * slice;
      it.heads = std::min(slice, heads - h0);
      setup(it, t, h0, worker);
      item_fn(it);
    }
  };
  if (!pool || pool->size() <= 1 || items < 2) work(0, 1);
  else pool->run([&](int i, int n) { work(i, n); });
}

}  // namespace nibble
