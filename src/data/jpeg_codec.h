// libturbojpeg behind three calls; internal to src/data. Each thread keeps
// its own decompressor handle (a handle is not thread-safe; creating one per
// image costs more than a small decode).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bigbatch/data/image_source.h"

namespace bigbatch::data_detail {

// Width and height from the JPEG header; throws IoError.
ImageSize jpegSize(const uint8_t* data, size_t size);
// Decodes to RGB at the smallest scale M/8 with region * M/8 >= min in both
// directions (full size when request is zero). Warnings (a truncated file)
// are errors. Throws IoError.
Image decodeJpeg(const uint8_t* data, size_t size, const DecodeRequest& request);
std::vector<uint8_t> encodeJpegImage(const Image& image, int quality);

}  // namespace bigbatch::data_detail
