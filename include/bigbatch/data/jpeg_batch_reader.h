// JpegBatchReader: the host half of the GPU decode path (data.decode =
// "gpu") — each batch's JPEG files read, checked whole, and given the CPU
// pipeline's crop and flip. Threading: next(), skipBad() and stats() from
// one consumer thread; the reader threads are internal.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bigbatch/data/image_augment.h"
#include "bigbatch/data/image_source.h"
#include "bigbatch/data/input_pipeline.h"

namespace bigbatch {

struct JpegReaderOptions {
  int readThreads = 2;         // 0: inline, on the caller of next()
  int prefetchBatches = 4;     // batches read ahead of the consumer
  bool skipBadSamples = true;  // false: the first bad sample fails the epoch
};

// One sample as the device decoder takes it.
struct JpegSample {
  int64_t index = 0;  // in the source
  int64_t label = 0;
  ImageSize original;          // from the JPEG header
  CropPlan plan;               // in original pixels (planCrop)
  std::vector<uint8_t> bytes;  // the whole file
};

struct JpegBatch {
  std::vector<JpegSample> samples;  // the good samples, in the batch's order
  int64_t skipped = 0;              // bad samples left out on the host
};

// The host half of the GPU decode path (data.decode = "gpu"): reads each
// batch's JPEG files, checks that each is a whole JPEG (its header parses,
// an end-of-image marker follows the image data) and plans its crop and flip
// with planCrop() from (seed, epoch, sample index) — what the CPU pipeline
// (input_pipeline.h) computes for the same sample — so both paths train on
// the same samples, in the same order, with the same labels, crops and
// flips. The device decodes the bytes (gpu_jpeg_decoder.h).
//
// Bad input found here (an unreadable file, a PNG or other non-JPEG named
// .jpg, a corrupt header, a truncated file) is handled as the CPU pipeline
// handles it: `skip` names the file once in the log, counts it and leaves it
// out of its batch; `fail` ends the epoch with IoError naming the sample and
// path. skipBad() applies the same rule to what the device could not decode.
//
// Threading: next(), skipBad() and stats() from one consumer thread (stats()
// from any); `readThreads` readers each read whole batches, at most
// `prefetchBatches` ahead of the consumer; 0 threads: next() reads inline.
// Destroying the reader mid-epoch stops and joins its threads.
class JpegBatchReader {
 public:
  // `source` must hold JPEG files (a "folder" source); `batches` as for the
  // InputPipeline (ShardPlan::batches, or micro-batches of them). Starts
  // the readers at once. Throws InvalidArgument on another kind of source,
  // bad options or an index out of range.
  JpegBatchReader(std::shared_ptr<const ImageSource> source, ImageAugment augment,
                  JpegReaderOptions options, uint64_t seed, int64_t epoch,
                  std::vector<std::vector<int64_t>> batches);
  ~JpegBatchReader();
  JpegBatchReader(const JpegBatchReader&) = delete;
  JpegBatchReader& operator=(const JpegBatchReader&) = delete;

  // The next batch in order; false after the last. Throws the first error
  // (IoError naming sample and path under `fail`).
  bool next(JpegBatch& out);
  // A sample the device could not decode either: skipped (logged once,
  // counted) or, under `fail`, IoError naming the sample and path.
  void skipBad(int64_t index, const std::string& why);
  // samples: handed out by next() less those skipBad() took back; skipped:
  // both kinds; decoded stays 0 (the device decodes).
  PipelineStats stats() const;

  struct State;  // internal

 private:
  std::shared_ptr<State> state_;
};

}  // namespace bigbatch
