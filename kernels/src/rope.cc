// RoPE frequencies, shared by every implementation (computed once on the host, then passed to the
// op as an array): inv_freq[i] = 1 / theta^(2i / rotary_dim), with optional llama3 scaling.
#include <algorithm>
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
  const YarnRopeScaling& y = c.yarn;
  if (y.enabled &&
      !(y.factor >= 1.0f && y.original_max_position > 0 && y.beta_fast > 0.0f && y.beta_slow > 0.0f)) {
    return invalid_argument(
        "rope: yarn scaling needs factor >= 1, original_max_position_embeddings > 0 and positive beta_fast, "
        "beta_slow");
  }
  if (y.enabled && s.enabled) return invalid_argument("rope: llama3 and yarn scaling are exclusive");
  const int32_t half = c.rotary_dim / 2;
  inv_freq->assign(static_cast<size_t>(half), 0.0f);
  if (y.enabled) {
    // transformers' _compute_yarn_parameters (truncate = true): the dimensions whose wavelength turns
    // fewer than beta_slow times over the original context are interpolated (divided by factor), those
    // turning more than beta_fast times extrapolated (unchanged), with a linear ramp between.
    const double pi = 3.14159265358979323846, base = c.theta, dim = c.rotary_dim;
    auto correction_dim = [&](double rotations) {
      return dim * std::log(y.original_max_position / (rotations * 2 * pi)) / (2 * std::log(base));
    };
    const double low = std::max(0.0, std::floor(correction_dim(y.beta_fast)));
    double high = std::min(dim - 1, std::ceil(correction_dim(y.beta_slow)));
    if (low == high) high += 0.001;
    for (int32_t i = 0; i < half; ++i) {
      const double pos = std::pow(base, static_cast<double>(2 * i) / dim);
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      const double extrapolation = 1.0 - ramp;
      const double f = (1.0 / (y.factor * pos)) * (1.0 - extrapolation) + (1.0 / pos) * extrapolation;
      (*inv_freq)[static_cast<size_t>(i)] = static_cast<float>(f);
    }
    return ok_status();
  }
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
