// DeepSeek-V4's hyper-connections on the GPU (model/deepseek_v4_hc.h): the
// parts after the mixes. The mixes themselves (an unweighted RMSNorm of the
// flattened streams, then the hc_*_fn linear) are cuda_rms_norm and a linear
// kernel; what is left per token is tiny (N = 4 streams: 24 mixes, a 4 x 4
// Sinkhorn) and runs in one thread per token, in exactly the CPU's order, so
// the only differences are expf / the division's rounding; the collapse and
// the post mix are spread over D.
#pragma once

#include <cstdint>
#include <vector>

namespace nibble {

// The weights of one hyper-connection on the device: base [(2+N)*N] (N for
// the head), scale [3] (1 for the head).
struct HcDeviceParams {
  int64_t streams = 4;  // N (at most kMaxHcStreams)
  int64_t hidden = 0;   // D
  int64_t sinkhorn_iters = 20;
  float hc_eps = 1e-6f;
  const float* base = nullptr;
  const float* scale = nullptr;
};
constexpr int64_t kMaxHcStreams = 8;

// From mixes [n, (2+N)*N] and streams [n, N*D]: collapsed [n, D] (the
// sublayer input), post [n, N], comb [n, N*N] (Sinkhorn'd; comb[j][k] the
// weight of old stream j in new stream k).
void cuda_hc_pre_finish(const HcDeviceParams& p, const float* mixes, const float* streams, int64_t n,
                        float* collapsed, float* post, float* comb, void* stream = nullptr);

// streams[k] <- post[k] * out + sum_j comb[j][k] * streams[j], in place.
void cuda_hc_post(int64_t streams_n, int64_t hidden, const float* out, const float* post, const float* comb,
                  int64_t n, float* streams, void* stream = nullptr);

// y [n, D] = sum_k (sigmoid(mix_k * scale + base_k) + eps) * stream_k, mixes [n, N].
void cuda_hc_head_finish(const HcDeviceParams& p, const float* mixes, const float* streams, int64_t n, float* y,
                         void* stream = nullptr);

// ---- host round trips (tests); base / scale host vectors ----
struct HcPreHost {
  std::vector<float> collapsed, post, comb;
};
HcPreHost cuda_hc_pre_finish_host(HcDeviceParams p, const std::vector<float>& base, const std::vector<float>& scale,
                                  const std::vector<float>& mixes, const std::vector<float>& streams, int64_t n);
std::vector<float> cuda_hc_post_host(int64_t streams_n, int64_t hidden, const std::vector<float>& out,
                                     const std::vector<float>& post, const std::vector<float>& comb, int64_t n,
                                     std::vector<float> streams);
std::vector<float> cuda_hc_head_finish_host(HcDeviceParams p, const std::vector<float>& base,
                                            const std::vector<float>& scale, const std::vector<float>& mixes,
                                            const std::vector<float>& streams, int64_t n);

}  // namespace nibble
