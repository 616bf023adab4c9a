#include "jpeg_codec.h"

#include <fmt/format.h>
#include <turbojpeg.h>

#include <algorithm>
#include <memory>

#include "bigbatch/common/error.h"

namespace bigbatch::data_detail {
namespace {

struct Handle {
  tjhandle h;
  explicit Handle(tjhandle x) : h(x) {}
  ~Handle() {
    if (h) tjDestroy(h);
  }
};

tjhandle decompressor() {
  thread_local Handle handle(tjInitDecompress());
  BIGBATCH_REQUIRE(handle.h != nullptr, IoError, "libturbojpeg: cannot create a decompressor");
  return handle.h;
}

}  // namespace

ImageSize jpegSize(const uint8_t* data, size_t size) {
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  tjhandle d = decompressor();
  if (tjDecompressHeader3(d, data, static_cast<unsigned long>(size), &w, &h, &subsamp,
                          &colorspace) != 0) {
    BIGBATCH_THROW(IoError, "not a readable JPEG ({})", tjGetErrorStr2(d));
  }
  return {h, w};
}

Image decodeJpeg(const uint8_t* data, size_t size, const DecodeRequest& request) {
  const ImageSize full = jpegSize(data, size);
  tjhandle d = decompressor();
  // The smallest factor num/denom that keeps the region at least min pixels.
  int count = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&count);
  tjscalingfactor best{1, 1};
  if (request.minHeight > 0 && request.minWidth > 0 && request.regionHeight > 0 &&
      request.regionWidth > 0) {
    double bestValue = 1.0;
    for (int i = 0; i < count; ++i) {
      const double f = static_cast<double>(factors[i].num) / factors[i].denom;
      if (f > 1.0 || f >= bestValue) continue;
      if (request.regionHeight * f >= static_cast<double>(request.minHeight) &&
          request.regionWidth * f >= static_cast<double>(request.minWidth)) {
        best = factors[i];
        bestValue = f;
      }
    }
  }
  Image out;
  out.width = TJSCALED(static_cast<int>(full.width), best);
  out.height = TJSCALED(static_cast<int>(full.height), best);
  out.channels = 3;
  out.pixels.resize(static_cast<size_t>(out.width * out.height * 3));
  if (tjDecompress2(d, data, static_cast<unsigned long>(size), out.pixels.data(),
                    static_cast<int>(out.width), 0, static_cast<int>(out.height), TJPF_RGB,
                    TJFLAG_STOPONWARNING) != 0) {
    BIGBATCH_THROW(IoError, "corrupt or truncated JPEG ({})", tjGetErrorStr2(d));
  }
  return out;
}

std::vector<uint8_t> encodeJpegImage(const Image& image, int quality) {
  BIGBATCH_REQUIRE(image.channels == 1 || image.channels == 3, InvalidArgument,
                   "encodeJpeg: {} channels; 1 or 3 supported", image.channels);
  BIGBATCH_REQUIRE(
      static_cast<int64_t>(image.pixels.size()) == image.height * image.width * image.channels,
      InvalidArgument, "encodeJpeg: {} bytes for a {}x{}x{} image", image.pixels.size(),
      image.height, image.width, image.channels);
  std::unique_ptr<void, int (*)(tjhandle)> c(tjInitCompress(), tjDestroy);
  BIGBATCH_REQUIRE(c != nullptr, IoError, "libturbojpeg: cannot create a compressor");
  unsigned char* buf = nullptr;
  unsigned long len = 0;
  const int rc = tjCompress2(c.get(), image.pixels.data(), static_cast<int>(image.width), 0,
                             static_cast<int>(image.height),
                             image.channels == 3 ? TJPF_RGB : TJPF_GRAY, &buf, &len,
                             image.channels == 3 ? TJSAMP_420 : TJSAMP_GRAY, quality, 0);
  if (rc != 0) {
    if (buf) tjFree(buf);
    BIGBATCH_THROW(IoError, "JPEG encoding failed ({})", tjGetErrorStr2(c.get()));
  }
  std::vector<uint8_t> out(buf, buf + len);
  tjFree(buf);
  return out;
}

std::string jpegStreamProblem(const uint8_t* d, size_t n) {
  if (n < 4 || d[0] != 0xFF || d[1] != 0xD8) {
    return "no start-of-image marker (not a JPEG file)";
  }
  // The marker segments from SOI to the first start of scan (SOS).
  size_t p = 2, scan = 0;
  while (p + 4 <= n) {
    if (d[p] != 0xFF) return fmt::format("no marker at byte {} of the header (corrupt JPEG)", p);
    const uint8_t m = d[p + 1];
    if (m == 0xFF) {  // a fill byte before a marker
      ++p;
      continue;
    }
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD8)) {  // markers without a length
      p += 2;
      continue;
    }
    if (m == 0xD9) return "an end-of-image marker before any image data (corrupt JPEG)";
    const size_t length = (static_cast<size_t>(d[p + 2]) << 8) | d[p + 3];
    if (length < 2 || p + 2 + length > n) {
      return fmt::format("header segment 0xFF{:02X} at byte {} runs past the end of the file "
                         "(truncated JPEG)",
                         m, p);
    }
    if (m == 0xDA) {
      scan = p + 2 + length;
      break;
    }
    p += 2 + length;
  }
  if (scan == 0) return "the file ends in its header, before any image data (truncated JPEG)";
  for (size_t q = n - 1; q > scan; --q) {
    if (d[q] == 0xD9 && d[q - 1] == 0xFF) return "";
  }
  return "no end-of-image marker after the image data (truncated JPEG)";
}

}  // namespace bigbatch::data_detail
