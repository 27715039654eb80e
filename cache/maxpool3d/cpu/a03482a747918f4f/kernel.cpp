// regen artifact maxpool3d@cpu: generated content, do not edit. Change specs/maxpool3d.yaml and rebuild; provenance.json says who wrote it.
// 3x3x3 max pooling, stride 2, no padding, NCDHW, for the host CPU.
// Separable: for each output plane and row, the nine input rows of the window (3 planes x 3 rows)
// are reduced elementwise into one row (contiguous, vectorisable), then each output takes the max
// of three neighbouring columns. (volume, output plane) pairs run in parallel. Exact in every
// dtype: 16-bit values are compared through float32 and written back bit for bit.
#include <cstdint>
#include <cstring>
#include <vector>
#include <algorithm>

namespace {

inline float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

struct F32 {
  using Storage = float;
  static inline float load(float v) { return v; }
};
struct BF16 {
  using Storage = uint16_t;
  static inline float load(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }
};
struct F16 {
  using Storage = uint16_t;
  static inline float load(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) {
      const float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
      return sign ? -v : v;
    }
    if (exp == 31) return bits_to_float(sign | 0x7f800000u | (mant << 13));
    return bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));
  }
};

template <typename E>
void pool(const typename E::Storage* __restrict__ x, typename E::Storage* __restrict__ y,
          int64_t NC, int64_t D, int64_t H, int64_t W) {
  const int64_t OD = (D - 3) / 2 + 1, OH = (H - 3) / 2 + 1, OW = (W - 3) / 2 + 1;
  const int64_t width = 2 * OW + 1;  // input columns any window reaches
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(width));
    std::vector<int64_t> arg(static_cast<size_t>(width));  // flat index of the row maximum
#pragma omp for schedule(static)
    for (int64_t job = 0; job < NC * OD; ++job) {
      const int64_t nc = job / OD, od = job % OD;
      const typename E::Storage* __restrict__ vol = x + nc * D * H * W;
      typename E::Storage* __restrict__ out = y + (nc * OD + od) * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh) {
        for (int64_t w = 0; w < width; ++w) {
          const int64_t at = ((2 * od) * H + 2 * oh) * W + w;
          row[w] = E::load(vol[at]);
          arg[w] = at;
        }
        for (int64_t kd = 0; kd < 3; ++kd) {
          for (int64_t kh = 0; kh < 3; ++kh) {
            if (kd == 0 && kh == 0) continue;  // the row the maxima start from
            const int64_t base = ((2 * od + kd) * H + 2 * oh + kh) * W;
            for (int64_t w = 0; w < width; ++w) {
              const float v = E::load(vol[base + w]);
              if (v > row[w]) { row[w] = v; arg[w] = base + w; }
            }
          }
        }
        for (int64_t ow = 0; ow < OW; ++ow) {
          int64_t best = arg[2 * ow];
          float m = row[2 * ow];
          if (row[2 * ow + 1] > m) { m = row[2 * ow + 1]; best = arg[2 * ow + 1]; }
          if (row[2 * ow + 2] > m) { best = arg[2 * ow + 2]; }
          out[oh * OW + ow] = vol[best];  // the input element itself: exact, no conversion back
        }
      }
    }
  }
}

}  // namespace

extern "C" {
void maxpool3d_f32(const float* x, float* y, int64_t NC, int64_t D, int64_t H, int64_t W) {
  pool<F32>(x, y, NC, D, H, W);
}
void maxpool3d_bf16(const uint16_t* x, uint16_t* y, int64_t NC, int64_t D, int64_t H, int64_t W) {
  pool<BF16>(x, y, NC, D, H, W);
}
void maxpool3d_f16(const uint16_t* x, uint16_t* y, int64_t NC, int64_t D, int64_t H, int64_t W) {
  pool<F16>(x, y, NC, D, H, W);
}
}
