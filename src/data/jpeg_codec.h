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
// What makes `data` not a whole JPEG file, or "" when it is one: a start-of-
// image marker, header segments that fit in the file up to the first scan,
// and an end-of-image marker after it (entropy-coded data never holds
// 0xFF 0xD9, so a file cut short has none). Cheap — no decode; the GPU path
// (jpeg_batch_reader.h) runs it on the host because a device decoder may
// decode a truncated file without an error, where libjpeg-turbo (the CPU
// path) stops on the warning.
std::string jpegStreamProblem(const uint8_t* data, size_t size);

}  // namespace bigbatch::data_detail
