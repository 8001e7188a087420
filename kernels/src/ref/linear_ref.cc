// Scalar reference of the linear layer: y = x W^T (+ bias), with W dequantized element by element.
#include <vector>

#include "infergate/kernels/ref.h"
#include "validate.h"

namespace infergate::kernels {

Status linear_ref(View2<const float> x, const WeightView& w, const float* bias, View2<float> y) {
  INFERGATE_K_RETURN_IF_ERROR(validate_linear(x, w, y, "linear"));
  const int64_t n_out = w.layout.rows, k_in = w.layout.cols;
  std::vector<float> wrow(static_cast<size_t>(n_out * k_in));
  INFERGATE_K_RETURN_IF_ERROR(dequantize_weight_ref(w, contiguous(wrow.data(), n_out, k_in)));
  for (int64_t m = 0; m < x.rows; ++m) {
    const float* xm = x.row(m);
    for (int64_t n = 0; n < n_out; ++n) {
      const float* wn = wrow.data() + n * k_in;
      double acc = 0.0;
      for (int64_t k = 0; k < k_in; ++k) acc += static_cast<double>(xm[k]) * wn[k];
      if (bias != nullptr) acc += bias[n];
      y.at(m, n) = static_cast<float>(acc);
    }
  }
  return ok_status();
}

}  // namespace infergate::kernels
