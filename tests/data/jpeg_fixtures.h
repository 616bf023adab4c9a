// Fixture files for the GPU decode path's tests, made by the tests
// themselves (libturbojpeg, zlib): smooth photo-like images encoded at a
// chosen chroma subsampling, progressive or not, greyscale, CMYK, and the
// bad inputs — a PNG named .jpg, a truncated JPEG, a corrupt header, an
// empty file. Each image is a function of its seed alone. Header-only;
// thread-safe (no shared state).
#pragma once

#include <turbojpeg.h>
#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bigbatch/data/sampler.h"

namespace bigbatch::test_fixtures {

// A smooth colour field (a gradient plus a few soft blobs), the content
// JPEG encodes near-losslessly, so the decoders' differences — not the
// encoder's losses — dominate a comparison. `channels` 3 (RGB) or 4 (CMYK).
inline std::vector<uint8_t> smoothImage(int width, int height, int channels, uint64_t seed) {
  std::vector<uint8_t> px(static_cast<size_t>(width) * height * channels);
  uint64_t r = splitmix64(seed);
  double cx[3], cy[3], amp[3][4];
  for (int b = 0; b < 3; ++b) {
    r = splitmix64(r);
    cx[b] = static_cast<double>(r % 1000) / 1000.0;
    r = splitmix64(r);
    cy[b] = static_cast<double>(r % 1000) / 1000.0;
    for (int c = 0; c < 4; ++c) {
      r = splitmix64(r);
      amp[b][c] = static_cast<double>(r % 200) - 100.0;
    }
  }
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const double u = (x + 0.5) / width, v = (y + 0.5) / height;
      for (int c = 0; c < channels; ++c) {
        double value = 60.0 + 120.0 * (c % 2 == 0 ? u : v) + 20.0 * c;
        for (int b = 0; b < 3; ++b) {
          const double d2 = (u - cx[b]) * (u - cx[b]) + (v - cy[b]) * (v - cy[b]);
          value += amp[b][c] * std::exp(-d2 / 0.02);
        }
        px[(static_cast<size_t>(y) * width + x) * channels + c] =
            static_cast<uint8_t>(std::lround(std::fmin(255.0, std::fmax(0.0, value))));
      }
    }
  }
  return px;
}

// A plain gradient, cheap at any size (the 10,000 x 10,000 fixture).
inline std::vector<uint8_t> gradientImage(int width, int height) {
  std::vector<uint8_t> px(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      uint8_t* p = &px[(static_cast<size_t>(y) * width + x) * 3];
      p[0] = static_cast<uint8_t>(40 + 170LL * x / width);
      p[1] = static_cast<uint8_t>(40 + 170LL * y / height);
      p[2] = static_cast<uint8_t>(40 + 85LL * (x + y) / (width + height));
    }
  }
  return px;
}

struct JpegOptions {
  int subsampling = TJSAMP_420;  // TJSAMP_444, TJSAMP_422, TJSAMP_GRAY, ...
  bool progressive = false;
  int quality = 90;
};

// `pixels` RGB (3 channels), grey (1) or CMYK (4), encoded by libturbojpeg.
inline std::vector<uint8_t> encode(const std::vector<uint8_t>& pixels, int width, int height,
                                   int channels, const JpegOptions& o) {
  const int format = channels == 4 ? TJPF_CMYK : channels == 1 ? TJPF_GRAY : TJPF_RGB;
  tjhandle c = tjInitCompress();
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(c, pixels.data(), width, 0, height, format, &buffer, &size,
                             channels == 1 ? TJSAMP_GRAY : o.subsampling, o.quality,
                             o.progressive ? TJFLAG_PROGRESSIVE : 0);
  const std::string error = rc != 0 ? tjGetErrorStr2(c) : "";
  tjDestroy(c);
  if (rc != 0) throw std::runtime_error("fixture JPEG: " + error);
  std::vector<uint8_t> out(buffer, buffer + size);
  tjFree(buffer);
  return out;
}

inline std::vector<uint8_t> smoothJpeg(int width, int height, uint64_t seed,
                                       const JpegOptions& o = {}) {
  return encode(smoothImage(width, height, 3, seed), width, height, 3, o);
}

// A real PNG (8-bit RGB, one IDAT), for "a PNG named .jpg".
inline std::vector<uint8_t> png(int width, int height, uint64_t seed) {
  const std::vector<uint8_t> rgb = smoothImage(width, height, 3, seed);
  std::vector<uint8_t> raw;
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);  // filter: none
    raw.insert(raw.end(), rgb.begin() + static_cast<long>(y) * width * 3,
               rgb.begin() + static_cast<long>(y + 1) * width * 3);
  }
  uLongf packedSize = compressBound(static_cast<uLong>(raw.size()));
  std::vector<uint8_t> packed(packedSize);
  compress(packed.data(), &packedSize, raw.data(), static_cast<uLong>(raw.size()));
  packed.resize(packedSize);
  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
  auto chunk = [&out](const char* type, const std::vector<uint8_t>& data) {
    const uint32_t n = static_cast<uint32_t>(data.size());
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(n >> s));
    std::vector<uint8_t> body(type, type + 4);
    body.insert(body.end(), data.begin(), data.end());
    out.insert(out.end(), body.begin(), body.end());
    const uint32_t crc =
        static_cast<uint32_t>(crc32(0, body.data(), static_cast<uInt>(body.size())));
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(crc >> s));
  };
  std::vector<uint8_t> header;
  for (const uint32_t v : {static_cast<uint32_t>(width), static_cast<uint32_t>(height)}) {
    for (int s = 24; s >= 0; s -= 8) header.push_back(static_cast<uint8_t>(v >> s));
  }
  header.insert(header.end(), {8, 2, 0, 0, 0});  // 8 bits, RGB, deflate, no filter, no interlace
  chunk("IHDR", header);
  chunk("IDAT", packed);
  chunk("IEND", {});
  return out;
}

// The first `keep` of every 100 bytes of `jpeg`, cut short (a download that stopped).
inline std::vector<uint8_t> truncated(std::vector<uint8_t> jpeg, int keepPercent) {
  jpeg.resize(jpeg.size() * static_cast<size_t>(keepPercent) / 100);
  return jpeg;
}

// A header overwritten with a pattern no JPEG segment holds.
inline std::vector<uint8_t> corruptHeader(std::vector<uint8_t> jpeg) {
  for (size_t i = 2; i < 40 && i < jpeg.size(); ++i) jpeg[i] = static_cast<uint8_t>(0x5a ^ i);
  return jpeg;
}

inline void write(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write fixture " + path.string());
}

}  // namespace bigbatch::test_fixtures
