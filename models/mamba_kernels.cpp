// Mamba-1's CPU kernels: the selective scan, the causal depthwise convolution and the SiLU gate,
// each forward and backward. Compiled on first use by torch.utils.cpp_extension (models/mamba.py).
// Batch rows run in parallel on torch's intra-op threads; whatever all rows share (the gradients of
// A, D and the conv weights) is accumulated per row and summed afterwards, so no thread writes
// another's memory. Each kernel makes one pass over its tensors where eager torch makes several.
//
// Selective scan, one (batch row, block of channels) at a time with its state in a small local
// buffer: no [B, T, E, N] tensor is ever written to memory.
//
//   h_t = exp(delta_t A) h_{t-1} + delta_t x_t B_t,   y_t = C_t . h_t + D x_t
//
// Shapes: x, delta [B, T, E]; A [E, N]; Bm, C [B, T, N]; D [E]; all contiguous, one dtype.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

// Channels are processed in blocks of W, the innermost (contiguous, vectorised) loop, so the state
// of a block is N x W numbers in L1 and no loop needs a horizontal sum except the gradients of B and
// C, which are shared by all channels. A is passed transposed, [N, E], for the same reason.
constexpr int64_t W = 16;

// exp for the decays exp(delta A), whose argument is never positive. float: 2^(x log2 e) split into
// 2^integer (built in the exponent bits) times a degree-6 polynomial for 2^fraction (relative
// error 5e-9, below float rounding), plain arithmetic the compiler vectorises inline (std::exp is
// a libmvec call per vector). double keeps std::exp, so the float64 tests compare the exact
// recurrence.
inline double decay_exp(double x) { return std::exp(x); }
inline float decay_exp(float x) {
  x = std::max(x, -87.0f);  // below this exp underflows to 0 anyway; keeps the exponent in range
  const float t = x * 1.4426950408889634f;
  const float k = std::floor(t);
  const float f = t - k;  // in [0, 1)
  const float p = 1.0f + f * (0.693147028f + f * (0.240229401f + f * (0.0554853207f + f * (0.00967454989f +
                  f * (0.001248284f + f * 0.000215406697f)))));  // least squares in relative error
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

template <typename scalar_t>
void forward_rows(int64_t b0, int64_t b1, int64_t T, int64_t E, int64_t N, const scalar_t* x,
                  const scalar_t* delta, const scalar_t* At, const scalar_t* Bm, const scalar_t* C,
                  const scalar_t* D, scalar_t* y) {
  std::vector<scalar_t> h(N * W);
  for (int64_t b = b0; b < b1; ++b) {
    for (int64_t e0 = 0; e0 < E; e0 += W) {
      const int64_t w_end = std::min(W, E - e0);
      std::fill(h.begin(), h.end(), scalar_t(0));
      for (int64_t t = 0; t < T; ++t) {
        const int64_t i = (b * T + t) * E + e0;
        const scalar_t *d = delta + i, *xt = x + i, *Bt = Bm + (b * T + t) * N, *Ct = C + (b * T + t) * N;
        scalar_t acc[W] = {0}, drive[W];
#pragma omp simd
        for (int64_t w = 0; w < w_end; ++w) drive[w] = d[w] * xt[w];
        for (int64_t n = 0; n < N; ++n) {
          const scalar_t bn = Bt[n], cn = Ct[n];
          const scalar_t* An = At + n * E + e0;
          scalar_t* hn = h.data() + n * W;
#pragma omp simd
          for (int64_t w = 0; w < w_end; ++w) {
            hn[w] = decay_exp(d[w] * An[w]) * hn[w] + drive[w] * bn;
            acc[w] += hn[w] * cn;
          }
        }
#pragma omp simd
        for (int64_t w = 0; w < w_end; ++w) y[i + w] = acc[w] + D[e0 + w] * xt[w];
      }
    }
  }
}

template <typename scalar_t>
void backward_rows(int64_t b0, int64_t b1, int64_t T, int64_t E, int64_t N, const scalar_t* x,
                   const scalar_t* delta, const scalar_t* At, const scalar_t* Bm, const scalar_t* C,
                   const scalar_t* D, const scalar_t* gy, scalar_t* gx, scalar_t* gdelta, scalar_t* gAt_rows,
                   scalar_t* gB, scalar_t* gC, scalar_t* gD_rows) {
  // per channel block: the decays and states of every position, recomputed ([T, N, W] each)
  std::vector<scalar_t> decay(T * N * W), h(T * N * W), g(N * W), zeros(N * W, scalar_t(0));
  // dL/dB and dL/dC of this row, kept per lane across channel blocks and summed over lanes once at
  // the end of the row, so the inner loop has no horizontal sums
  std::vector<scalar_t> gB_lanes(T * N * W), gC_lanes(T * N * W);
  for (int64_t b = b0; b < b1; ++b) {
    std::fill(gB_lanes.begin(), gB_lanes.end(), scalar_t(0));
    std::fill(gC_lanes.begin(), gC_lanes.end(), scalar_t(0));
    scalar_t* gAt = gAt_rows + b * N * E;  // this row's share of dL/dA^T, summed over rows afterwards
    scalar_t* gD = gD_rows + b * E;
    for (int64_t e0 = 0; e0 < E; e0 += W) {
      const int64_t w_end = std::min(W, E - e0);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t i = (b * T + t) * E + e0;
        const scalar_t *d = delta + i, *xt = x + i, *Bt = Bm + (b * T + t) * N;
        const scalar_t* hp = t ? h.data() + (t - 1) * N * W : zeros.data();  // h_{-1} = 0
        scalar_t *ht = h.data() + t * N * W, *at = decay.data() + t * N * W;
        for (int64_t n = 0; n < N; ++n) {
          const scalar_t bn = Bt[n];
          const scalar_t* An = At + n * E + e0;
#pragma omp simd
          for (int64_t w = 0; w < w_end; ++w) {
            at[n * W + w] = decay_exp(d[w] * An[w]);
            ht[n * W + w] = at[n * W + w] * hp[n * W + w] + d[w] * xt[w] * bn;
          }
        }
      }
      std::fill(g.begin(), g.end(), scalar_t(0));  // dL/dh_t from later positions
      for (int64_t t = T - 1; t >= 0; --t) {
        const int64_t i = (b * T + t) * E + e0;
        const scalar_t *d = delta + i, *xt = x + i, *gyt = gy + i;
        const scalar_t *Bt = Bm + (b * T + t) * N, *Ct = C + (b * T + t) * N;
        const scalar_t* hp = t ? h.data() + (t - 1) * N * W : zeros.data();
        const scalar_t *ht = h.data() + t * N * W, *at = decay.data() + t * N * W;
        scalar_t g_drive[W] = {0}, g_d[W] = {0};
        for (int64_t n = 0; n < N; ++n) {
          const scalar_t bn = Bt[n], cn = Ct[n];
          const scalar_t* An = At + n * E + e0;
          scalar_t* gAn = gAt + n * E + e0;
          scalar_t* gn = g.data() + n * W;
          scalar_t *gc = gC_lanes.data() + (t * N + n) * W, *gb = gB_lanes.data() + (t * N + n) * W;
#pragma omp simd
          for (int64_t w = 0; w < w_end; ++w) {
            const scalar_t gt = gn[w] + gyt[w] * cn;  // all of dL/dh_t
            gc[w] += gyt[w] * ht[n * W + w];
            gb[w] += gt * d[w] * xt[w];
            g_drive[w] += gt * bn;
            const scalar_t carry = at[n * W + w] * gt;  // what reaches h_{t-1}
            const scalar_t q = carry * hp[n * W + w];  // dL/d(delta_t A_n)
            g_d[w] += q * An[w];
            gAn[w] += q * d[w];
            gn[w] = carry;
          }
        }
#pragma omp simd
        for (int64_t w = 0; w < w_end; ++w) {
          gdelta[i + w] = g_d[w] + g_drive[w] * xt[w];
          gx[i + w] = g_drive[w] * d[w] + gyt[w] * D[e0 + w];
          gD[e0 + w] += gyt[w] * xt[w];
        }
      }
    }
    for (int64_t k = 0; k < T * N; ++k) {
      scalar_t sb = 0, sc = 0;
      for (int64_t w = 0; w < W; ++w) {
        sb += gB_lanes[k * W + w];
        sc += gC_lanes[k * W + w];
      }
      gB[b * T * N + k] = sb;
      gC[b * T * N + k] = sc;
    }
  }
}

torch::Tensor scan_forward(torch::Tensor x, torch::Tensor delta, torch::Tensor A, torch::Tensor Bm,
                           torch::Tensor C, torch::Tensor D) {
  const int64_t Bn = x.size(0), T = x.size(1), E = x.size(2), N = A.size(1);
  auto y = torch::empty_like(x);
  auto At = A.t().contiguous();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "scan_forward", [&] {
    at::parallel_for(0, Bn, 1, [&](int64_t b0, int64_t b1) {
      forward_rows<scalar_t>(b0, b1, T, E, N, x.data_ptr<scalar_t>(), delta.data_ptr<scalar_t>(),
                             At.data_ptr<scalar_t>(), Bm.data_ptr<scalar_t>(), C.data_ptr<scalar_t>(),
                             D.data_ptr<scalar_t>(), y.data_ptr<scalar_t>());
    });
  });
  return y;
}

std::vector<torch::Tensor> scan_backward(torch::Tensor x, torch::Tensor delta, torch::Tensor A, torch::Tensor Bm,
                                         torch::Tensor C, torch::Tensor D, torch::Tensor gy) {
  const int64_t Bn = x.size(0), T = x.size(1), E = x.size(2), N = A.size(1);
  auto gx = torch::empty_like(x), gdelta = torch::empty_like(x);
  auto gB = torch::empty_like(Bm), gC = torch::empty_like(C);
  auto gAt_rows = torch::zeros({Bn, N, E}, x.options()), gD_rows = torch::zeros({Bn, E}, x.options());
  auto At = A.t().contiguous();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "scan_backward", [&] {
    at::parallel_for(0, Bn, 1, [&](int64_t b0, int64_t b1) {
      backward_rows<scalar_t>(b0, b1, T, E, N, x.data_ptr<scalar_t>(), delta.data_ptr<scalar_t>(),
                              At.data_ptr<scalar_t>(), Bm.data_ptr<scalar_t>(), C.data_ptr<scalar_t>(),
                              D.data_ptr<scalar_t>(), gy.data_ptr<scalar_t>(), gx.data_ptr<scalar_t>(),
                              gdelta.data_ptr<scalar_t>(), gAt_rows.data_ptr<scalar_t>(),
                              gB.data_ptr<scalar_t>(), gC.data_ptr<scalar_t>(), gD_rows.data_ptr<scalar_t>());
    });
  });
  return {gx, gdelta, gAt_rows.sum(0).t().contiguous(), gB, gC, gD_rows.sum(0)};
}

// Causal depthwise convolution over positions, K taps per channel (x is 0 before position 0):
//   out[b, t, e] = bias[e] + sum_j w[e, j] x[b, t - (K-1) + j, e]
// x may be a strided view (the first half of in_proj's output) whose channels are contiguous; the
// weights are passed transposed, [K, E], so every loop runs along channels.
template <typename scalar_t>
void conv_forward_rows(int64_t b0, int64_t b1, int64_t T, int64_t E, int64_t K, const scalar_t* x,
                       int64_t sb, int64_t st, const scalar_t* wt, const scalar_t* bias, scalar_t* out) {
  for (int64_t b = b0; b < b1; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      scalar_t* o = out + (b * T + t) * E;
      std::memcpy(o, bias, E * sizeof(scalar_t));
      for (int64_t j = std::max<int64_t>(0, K - 1 - t); j < K; ++j) {
        const scalar_t *xs = x + b * sb + (t - (K - 1) + j) * st, *wj = wt + j * E;
#pragma omp simd
        for (int64_t e = 0; e < E; ++e) o[e] += wj[e] * xs[e];
      }
    }
  }
}

// dL/dx[b, s] = sum_j g[b, s + (K-1) - j] w[j];  dL/dw[j] = sum_{b,t} g[b, t] x[b, t - (K-1) + j];
// dL/dbias = sum_{b,t} g[b, t]. gx is zeroed by the caller; gwt_rows, gbias_rows hold one row each.
template <typename scalar_t>
void conv_backward_rows(int64_t b0, int64_t b1, int64_t T, int64_t E, int64_t K, const scalar_t* x,
                        int64_t sb, int64_t st, const scalar_t* wt, const scalar_t* gout, scalar_t* gx,
                        scalar_t* gwt_rows, scalar_t* gbias_rows) {
  for (int64_t b = b0; b < b1; ++b) {
    scalar_t *gwt = gwt_rows + b * K * E, *gbias = gbias_rows + b * E;
    for (int64_t t = 0; t < T; ++t) {
      const scalar_t* g = gout + (b * T + t) * E;
#pragma omp simd
      for (int64_t e = 0; e < E; ++e) gbias[e] += g[e];
      for (int64_t j = std::max<int64_t>(0, K - 1 - t); j < K; ++j) {
        const int64_t s = t - (K - 1) + j;
        const scalar_t *xs = x + b * sb + s * st, *wj = wt + j * E;
        scalar_t *gxs = gx + (b * T + s) * E, *gwj = gwt + j * E;
#pragma omp simd
        for (int64_t e = 0; e < E; ++e) {
          gxs[e] += g[e] * wj[e];
          gwj[e] += g[e] * xs[e];
        }
      }
    }
  }
}

torch::Tensor conv_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
  const int64_t Bn = x.size(0), T = x.size(1), E = x.size(2), K = weight.size(-1);
  auto out = torch::empty({Bn, T, E}, x.options());
  auto wt = weight.reshape({E, K}).t().contiguous();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "conv_forward", [&] {
    at::parallel_for(0, Bn, 1, [&](int64_t b0, int64_t b1) {
      conv_forward_rows<scalar_t>(b0, b1, T, E, K, x.data_ptr<scalar_t>(), x.stride(0), x.stride(1),
                                  wt.data_ptr<scalar_t>(), bias.data_ptr<scalar_t>(), out.data_ptr<scalar_t>());
    });
  });
  return out;
}

std::vector<torch::Tensor> conv_backward(torch::Tensor x, torch::Tensor weight, torch::Tensor gout) {
  const int64_t Bn = x.size(0), T = x.size(1), E = x.size(2), K = weight.size(-1);
  auto gx = torch::zeros({Bn, T, E}, x.options());
  auto gwt_rows = torch::zeros({Bn, K, E}, x.options()), gbias_rows = torch::zeros({Bn, E}, x.options());
  auto wt = weight.reshape({E, K}).t().contiguous();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "conv_backward", [&] {
    at::parallel_for(0, Bn, 1, [&](int64_t b0, int64_t b1) {
      conv_backward_rows<scalar_t>(b0, b1, T, E, K, x.data_ptr<scalar_t>(), x.stride(0), x.stride(1),
                                   wt.data_ptr<scalar_t>(), gout.data_ptr<scalar_t>(), gx.data_ptr<scalar_t>(),
                                   gwt_rows.data_ptr<scalar_t>(), gbias_rows.data_ptr<scalar_t>());
    });
  });
  return {gx, gwt_rows.sum(0).t().reshape(weight.sizes()).contiguous(), gbias_rows.sum(0)};
}

// The output gate, out = y SiLU(z), with z a strided view like the conv's x (in_proj's second half).
// exp's argument is capped at 80 so it stays finite (-ffast-math assumes no infinities); the
// sigmoid there is below 2e-35 either way.
template <typename scalar_t>
void gate_rows(int64_t b0, int64_t b1, int64_t T, int64_t E, const scalar_t* y, const scalar_t* z,
               int64_t sb, int64_t st, const scalar_t* gout, scalar_t* out, scalar_t* gy, scalar_t* gz) {
  for (int64_t b = b0; b < b1; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t i = (b * T + t) * E;
      const scalar_t* zt = z + b * sb + t * st;
      if (gout == nullptr) {  // forward
#pragma omp simd
        for (int64_t e = 0; e < E; ++e)
          out[i + e] = y[i + e] * zt[e] / (scalar_t(1) + std::exp(std::min(-zt[e], scalar_t(80))));
      } else {  // backward: d SiLU(z)/dz = s (1 + z (1 - s)) with s = sigmoid(z)
#pragma omp simd
        for (int64_t e = 0; e < E; ++e) {
          const scalar_t s = scalar_t(1) / (scalar_t(1) + std::exp(std::min(-zt[e], scalar_t(80))));
          gy[i + e] = gout[i + e] * zt[e] * s;
          gz[i + e] = gout[i + e] * y[i + e] * s * (scalar_t(1) + zt[e] * (scalar_t(1) - s));
        }
      }
    }
  }
}

torch::Tensor gate_forward(torch::Tensor y, torch::Tensor z) {
  const int64_t Bn = y.size(0), T = y.size(1), E = y.size(2);
  auto out = torch::empty_like(y);
  AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "gate_forward", [&] {
    at::parallel_for(0, Bn, 1, [&](int64_t b0, int64_t b1) {
      gate_rows<scalar_t>(b0, b1, T, E, y.data_ptr<scalar_t>(), z.data_ptr<scalar_t>(), z.stride(0), z.stride(1),
                          nullptr, out.data_ptr<scalar_t>(), nullptr, nullptr);
    });
  });
  return out;
}

std::vector<torch::Tensor> gate_backward(torch::Tensor y, torch::Tensor z, torch::Tensor gout) {
  const int64_t Bn = y.size(0), T = y.size(1), E = y.size(2);
  auto gy = torch::empty_like(y), gz = torch::empty_like(y);
  AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "gate_backward", [&] {
    at::parallel_for(0, Bn, 1, [&](int64_t b0, int64_t b1) {
      gate_rows<scalar_t>(b0, b1, T, E, y.data_ptr<scalar_t>(), z.data_ptr<scalar_t>(), z.stride(0), z.stride(1),
                          gout.data_ptr<scalar_t>(), nullptr, gy.data_ptr<scalar_t>(), gz.data_ptr<scalar_t>());
    });
  });
  return {gy, gz};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &scan_forward, "selective scan forward: y [B, T, E]");
  m.def("backward", &scan_backward, "selective scan backward: grads of x, delta, A, B, C, D");
  m.def("conv_forward", &conv_forward, "causal depthwise conv forward: out [B, T, E]");
  m.def("conv_backward", &conv_backward, "causal depthwise conv backward: grads of x, weight, bias");
  m.def("gate_forward", &gate_forward, "y * SiLU(z)");
  m.def("gate_backward", &gate_backward, "gate backward: grads of y, z");
}
