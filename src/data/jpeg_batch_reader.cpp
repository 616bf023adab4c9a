#include "bigbatch/data/jpeg_batch_reader.h"

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "bigbatch/common/error.h"
#include "bigbatch/common/logging.h"
#include "jpeg_codec.h"

namespace bigbatch {

struct JpegBatchReader::State {
  std::shared_ptr<const ImageSource> source;
  ImageAugment augment;
  JpegReaderOptions o;
  uint64_t seed = 0;
  int64_t epoch = 0;
  std::vector<std::vector<int64_t>> batches;

  // Guarded by mu: the batches read and not yet handed out, the next batch
  // a reader takes and the next the consumer takes, the first error.
  mutable std::mutex mu;
  std::condition_variable cv;
  std::map<int64_t, JpegBatch> ready;
  int64_t nextRead = 0, nextOut = 0;
  std::exception_ptr error;
  bool stopping = false;
  std::vector<std::string> skippedWhere;  // the first 100
  int64_t delivered = 0, skipped = 0;
  std::vector<std::thread> threads;

  void stop(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (e && !error) error = e;
      stopping = true;
    }
    cv.notify_all();
  }

  // The bad-sample rule, shared by the host checks and the device's
  // failures: throws IoError under `fail`.
  void bad(int64_t index, const std::string& why) {
    const std::string where = source->where(index);
    BIGBATCH_REQUIRE(o.skipBadSamples, IoError,
                     "sample {} ({}): {}; set data.bad_samples = \"skip\" to leave bad samples out",
                     index, where, why);
    log().warn("skipping sample {} ({}): {}", index, where, why);
    std::lock_guard<std::mutex> lock(mu);
    ++skipped;
    if (skippedWhere.size() < 100) skippedWhere.push_back(where);
  }

  // One sample's bytes, size and plan; false when it was bad (and skipped).
  bool readSample(int64_t index, JpegSample& s) {
    try {
      source->read(index, s.bytes);
      // The file's structure first (its message names what is wrong: not a
      // JPEG, a corrupt header, cut short), then the size from its header.
      const std::string problem = data_detail::jpegStreamProblem(s.bytes.data(), s.bytes.size());
      BIGBATCH_REQUIRE(problem.empty(), IoError, "{}", problem);
      s.original = source->peek(s.bytes);  // throws IoError: a header libjpeg-turbo rejects
      BIGBATCH_REQUIRE(s.original.height > 0 && s.original.width > 0, IoError,
                       "image of size {}x{} (corrupt JPEG header)", s.original.height,
                       s.original.width);
    } catch (const IoError& e) {
      bad(index, e.what());
      return false;
    }
    s.index = index;
    s.label = source->label(index);
    s.plan = planCrop(s.original, augment, seed, epoch, index);
    return true;
  }

  JpegBatch readBatch(int64_t b) {
    JpegBatch out;
    out.samples.reserve(batches[b].size());
    for (int64_t index : batches[b]) {
      JpegSample s;
      if (readSample(index, s)) {
        out.samples.push_back(std::move(s));
      } else {
        ++out.skipped;
      }
    }
    return out;
  }

  // A reader: takes the next batch not yet claimed, at most prefetchBatches
  // ahead of the consumer, reads it whole and files it under its number.
  void readLoop() {
    for (;;) {
      int64_t b;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] {
          return stopping || nextRead >= static_cast<int64_t>(batches.size()) ||
                 nextRead < nextOut + o.prefetchBatches;
        });
        if (stopping || nextRead >= static_cast<int64_t>(batches.size())) return;
        b = nextRead++;
      }
      JpegBatch batch = readBatch(b);
      {
        std::lock_guard<std::mutex> lock(mu);
        ready.emplace(b, std::move(batch));
      }
      cv.notify_all();
    }
  }
};

JpegBatchReader::JpegBatchReader(std::shared_ptr<const ImageSource> source, ImageAugment augment,
                                 JpegReaderOptions o, uint64_t seed, int64_t epoch,
                                 std::vector<std::vector<int64_t>> batches) {
  BIGBATCH_REQUIRE(source != nullptr, InvalidArgument, "JPEG batch reader: no source");
  BIGBATCH_REQUIRE(source->kind() == "folder", InvalidArgument,
                   "the GPU decode path reads folders of JPEG files, not a {} source; set "
                   "data.decode = \"cpu\" or data.dataset = \"folder\"",
                   source->kind());
  BIGBATCH_REQUIRE(o.readThreads >= 0 && o.prefetchBatches >= 1, InvalidArgument,
                   "JPEG batch reader: read threads {} (>= 0) and prefetch depth {} (>= 1)",
                   o.readThreads, o.prefetchBatches);
  BIGBATCH_REQUIRE(augment.outHeight > 0 && augment.outWidth > 0 && augment.padCrop == 0,
                   InvalidArgument,
                   "the GPU decode path needs an output size and no pad-crop (a folder's crop to "
                   "model.image_size; data.pad_crop = 0)");
  for (const auto& b : batches) {
    for (int64_t i : b) {
      BIGBATCH_REQUIRE(i >= 0 && i < source->size(), InvalidArgument,
                       "JPEG batch reader: sample index {} outside the source's {} samples", i,
                       source->size());
    }
  }
  state_ = std::make_shared<State>();
  State& s = *state_;
  s.source = std::move(source);
  s.augment = std::move(augment);
  s.o = o;
  s.seed = seed;
  s.epoch = epoch;
  s.batches = std::move(batches);
  for (int i = 0; i < o.readThreads; ++i) {
    s.threads.emplace_back([&s] {
      try {
        s.readLoop();
      } catch (...) {
        s.stop(std::current_exception());
      }
    });
  }
}

JpegBatchReader::~JpegBatchReader() {
  if (!state_) return;
  state_->stop(nullptr);
  for (auto& t : state_->threads) t.join();
}

bool JpegBatchReader::next(JpegBatch& out) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (s.error) std::rethrow_exception(s.error);
  if (s.nextOut >= static_cast<int64_t>(s.batches.size())) return false;
  if (s.threads.empty()) {
    const int64_t b = s.nextOut;
    lock.unlock();
    out = s.readBatch(b);  // a bad sample under `fail` throws from here
    lock.lock();
  } else {
    s.cv.wait(lock, [&] { return s.error || s.stopping || s.ready.count(s.nextOut); });
    if (s.error) std::rethrow_exception(s.error);
    BIGBATCH_CHECK(!s.stopping, Error, "JPEG batch reader: next() after it stopped");
    out = std::move(s.ready.at(s.nextOut));
    s.ready.erase(s.nextOut);
  }
  ++s.nextOut;
  s.delivered += static_cast<int64_t>(out.samples.size());
  lock.unlock();
  s.cv.notify_all();  // a reader may take the next batch
  return true;
}

void JpegBatchReader::skipBad(int64_t index, const std::string& why) {
  State& s = *state_;
  s.bad(index, why);
  std::lock_guard<std::mutex> lock(s.mu);
  --s.delivered;
}

PipelineStats JpegBatchReader::stats() const {
  const State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  PipelineStats st;
  st.samples = s.delivered;
  st.skipped = s.skipped;
  st.skippedWhere = s.skippedWhere;
  return st;
}

}  // namespace bigbatch
