// RoPE frequencies, shared by every implementation (computed once on the host, then passed to the
// op as an array): inv_freq[i] = 1 / theta^(2i / rotary_dim), with optional llama3 scaling.
#include <cmath>
#include <string>
#include <vector>

#include "infergate/kernels/ref.h"

namespace infergate::kernels {

Status rope_inv_freq(const RopeConfig& c, std::vector<float>* inv_freq) {
  if (c.rotary_dim < 2 || c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim) {
    return invalid_argument("rope: rotary_dim " + std::to_string(c.rotary_dim) +
                            " must be even, >= 2 and <= head_dim " + std::to_string(c.head_dim));
  }
  if (!(c.theta > 1.0f) || !std::isfinite(c.theta)) {
    return invalid_argument("rope: rope_theta " + std::to_string(c.theta) +
                            " must be a finite number above 1");
  }
  const Llama3RopeScaling& s = c.llama3;
  if (s.enabled && !(s.factor > 0.0f && s.low_freq_factor > 0.0f && s.high_freq_factor > s.low_freq_factor &&
                     s.original_max_position > 0)) {
    return invalid_argument(
        "rope: llama3 scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
        "original_max_position_embeddings > 0");
  }
  const int32_t half = c.rotary_dim / 2;
  inv_freq->assign(static_cast<size_t>(half), 0.0f);
  for (int32_t i = 0; i < half; ++i) {
    // transformers: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), in fp32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(c.rotary_dim);
    float f = static_cast<float>(1.0 / std::pow(static_cast<double>(c.theta), static_cast<double>(exponent)));
    if (s.enabled) {
      const double pi = 3.14159265358979323846;
      const double low_wavelen = s.original_max_position / static_cast<double>(s.low_freq_factor);
      const double high_wavelen = s.original_max_position / static_cast<double>(s.high_freq_factor);
      const double wavelen = 2 * pi / f;
      if (wavelen > low_wavelen) {
        f = static_cast<float>(f / s.factor);  // low frequencies: interpolated by the factor
      } else if (wavelen >= high_wavelen) {    // medium: blend between the two
        const double smooth = (s.original_max_position / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        f = static_cast<float>((1 - smooth) * f / s.factor + smooth * f);
      }  // high frequencies: unchanged
    }
    (*inv_freq)[static_cast<size_t>(i)] = f;
  }
  return ok_status();
}

}  // namespace infergate::kernels
