#include "bigbatch/data/input_pipeline.h"

#include <condition_variable>
#include <map>
#include <thread>

#include "bigbatch/common/error.h"
#include "bigbatch/common/logging.h"
#include "bounded_queue.h"

namespace bigbatch {

using data_detail::BoundedQueue;

// --- DecodedCache ------------------------------------------------------------

DecodedCache::DecodedCache(int64_t samples, int64_t budgetBytes, int64_t shortSide)
    : images_(static_cast<size_t>(std::max<int64_t>(samples, 0))),
      budget_(budgetBytes),
      shortSide_(shortSide) {}

std::shared_ptr<const DecodedImage> DecodedCache::find(int64_t index) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index >= 0 && index < static_cast<int64_t>(images_.size()) ? images_[index] : nullptr;
}

bool DecodedCache::insert(int64_t index, std::shared_ptr<const DecodedImage> image) {
  const int64_t size = static_cast<int64_t>(image->image.bytes());
  std::lock_guard<std::mutex> lock(mu_);
  if (index < 0 || index >= static_cast<int64_t>(images_.size()) || images_[index]) return false;
  if (bytes_.load() + size > budget_) return false;
  bytes_ += size;
  ++entries_;
  images_[index] = std::move(image);
  return true;
}

// --- InputPipeline -----------------------------------------------------------

namespace {

struct Work {
  int64_t batch = 0;
  size_t slot = 0;     // batch buffer
  int64_t row = 0;     // position in the batch
  int64_t index = 0;   // sample
  std::vector<uint8_t> bytes;
  std::shared_ptr<const DecodedImage> image;
  CropPlan plan;
};
using WorkPtr = std::unique_ptr<Work>;

}  // namespace

struct InputPipeline::State {
  std::shared_ptr<const ImageSource> source;
  ImageAugment augment;
  PipelineOptions o;
  uint64_t seed;
  int64_t epoch;
  std::vector<std::vector<int64_t>> batches;
  std::shared_ptr<DecodedCache> cache;
  int64_t channels = 0;
  ImageSize out;

  BoundedQueue<WorkPtr> readQ, decodeQ, augmentQ;

  struct Slot {
    torch::Tensor images, labels, flips;  // flips: uint8Batches only
    std::vector<char> ok;
    std::atomic<int64_t> remaining{0};
    int64_t batch = -1;
  };
  std::vector<Slot> slots;

  std::mutex mu;
  std::condition_variable cv;
  std::vector<size_t> freeSlots;
  std::map<int64_t, size_t> done;  // finished batch -> its slot
  int64_t nextOut = 0;
  std::optional<size_t> held;      // slot of the batch last handed out
  std::exception_ptr error;
  bool stopping = false;
  bool inlineMode = false;  // no threads: next() runs every step itself
  std::vector<std::string> skippedWhere;

  std::atomic<int64_t> delivered{0}, skipped{0}, decoded{0}, cacheHits{0};
  std::atomic<int> readersLeft{0}, decodersLeft{0};
  std::vector<std::thread> threads;

  State(size_t q) : readQ(q), decodeQ(q), augmentQ(q) {}

  void stop(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (e && !error) error = e;
      stopping = true;
    }
    cv.notify_all();
    readQ.close(true);
    decodeQ.close(true);
    augmentQ.close(true);
  }

  void finish(const Work& w, bool ok) {
    Slot& s = slots[w.slot];
    s.ok[w.row] = ok ? 1 : 0;
    if (--s.remaining == 0) {
      std::lock_guard<std::mutex> lock(mu);
      done[w.batch] = w.slot;
      cv.notify_all();
    }
  }

  // A sample that cannot be read or decoded: skipped, or the end of the epoch.
  void bad(const Work& w, const std::exception& e) {
    const std::string where = source->where(w.index);
    if (!o.skipBadSamples) {
      stop(std::make_exception_ptr(IoError(fmt::format(
          "sample {} ({}): {}; set data.bad_samples = \"skip\" to leave bad samples out",
          w.index, where, e.what()))));
      return;
    }
    log().warn("skipping sample {} ({}): {}", w.index, where, e.what());
    ++skipped;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (skippedWhere.size() < 100) skippedWhere.push_back(where);
    }
    if (!inlineMode) finish(w, false);
  }

  // Feeder: takes a free buffer for each batch, then queues its samples.
  void feed() {
    for (int64_t b = 0; b < static_cast<int64_t>(batches.size()); ++b) {
      size_t slot;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stopping || !freeSlots.empty(); });
        if (stopping) return;
        slot = freeSlots.back();
        freeSlots.pop_back();
      }
      const int64_t n = static_cast<int64_t>(batches[b].size());
      prepare(slot, b);
      if (n == 0) {
        std::lock_guard<std::mutex> lock(mu);
        done[b] = slot;
        cv.notify_all();
        continue;
      }
      for (int64_t r = 0; r < n; ++r) {
        auto w = std::make_unique<Work>();
        w->batch = b;
        w->slot = slot;
        w->row = r;
        w->index = batches[b][r];
        if (!readQ.push(std::move(w))) return;
      }
    }
  }

  // The three per-sample steps; false: the sample was bad (handled by bad()).
  bool readStep(Work& x) {
    try {
      if (cache) x.image = cache->find(x.index);
      if (x.image) {
        ++cacheHits;
      } else {
        source->read(x.index, x.bytes);
      }
    } catch (const std::exception& e) {
      bad(x, e);
      return false;
    }
    return true;
  }

  bool decodeStep(Work& x) {
    try {
      if (!x.image) {
        auto d = std::make_shared<DecodedImage>();
        d->original = source->peek(x.bytes);
        BIGBATCH_REQUIRE(d->original.height > 0 && d->original.width > 0, IoError,
                         "image of size {}x{}", d->original.height, d->original.width);
        DecodeRequest request;
        if (cache && cache->shortSide() > 0) {
          // Cached: keep enough resolution for any later crop.
          const double side = static_cast<double>(
              std::min(d->original.height, d->original.width));
          request = {side, side, cache->shortSide(), cache->shortSide()};
        } else if (!cache) {
          x.plan = planCrop(d->original, augment, seed, epoch, x.index);
          const ImageSize o2 = outputSize(d->original, augment);
          request = {x.plan.height, x.plan.width, o2.height, o2.width};
        }
        d->image = source->decode(x.bytes, request);
        BIGBATCH_REQUIRE(d->image.channels == channels, IoError,
                         "{} channels where the source has {}", d->image.channels, channels);
        ++decoded;
        std::vector<uint8_t>().swap(x.bytes);
        if (cache) cache->insert(x.index, d);
        x.image = std::move(d);
      }
      if (cache || x.plan.height == 0) {
        x.plan = planCrop(x.image->original, augment, seed, epoch, x.index);
      }
    } catch (const std::exception& e) {
      bad(x, e);
      return false;
    }
    return true;
  }

  bool augmentStep(Work& x) {
    Slot& s = slots[x.slot];
    try {
      if (o.uint8Batches) {  // the flip and normalisation are the consumer's
        augmentBytesInto(x.image->image, x.image->original, x.plan, augment, s.images[x.row]);
        s.flips.data_ptr<uint8_t>()[x.row] = x.plan.flip ? 1 : 0;
      } else {
        augmentInto(x.image->image, x.image->original, x.plan, augment, s.images[x.row]);
      }
      s.labels.data_ptr<int64_t>()[x.row] = source->label(x.index);
    } catch (const std::exception& e) {
      bad(x, e);
      return false;
    }
    x.image.reset();
    return true;
  }

  void readLoop() {
    while (auto w = readQ.pop()) {
      if (readStep(**w) && !decodeQ.push(std::move(*w))) break;
    }
    if (--readersLeft == 0) decodeQ.close();
  }

  void decodeLoop() {
    while (auto w = decodeQ.pop()) {
      if (decodeStep(**w) && !augmentQ.push(std::move(*w))) break;
    }
    if (--decodersLeft == 0) augmentQ.close();
  }

  void augmentLoop() {
    while (auto w = augmentQ.pop()) {
      if (augmentStep(**w)) finish(**w, true);
    }
  }

  // Sets up slot `slot` for batch b (reusing its buffers when nobody else
  // holds them and they are not pinned: see PipelineOptions::pinMemory).
  void prepare(size_t slot, int64_t b) {
    Slot& s = slots[slot];
    const int64_t n = static_cast<int64_t>(batches[b].size());
    const bool reuse = !o.pinMemory;
    if (!reuse || !s.images.defined() || s.images.size(0) != n || s.images.use_count() > 1) {
      s.images = torch::empty(
          {n, channels, out.height, out.width},
          torch::TensorOptions(o.uint8Batches ? torch::kUInt8 : torch::kFloat)
              .pinned_memory(o.pinMemory),
          o.channelsLast ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous);
    }
    if (!reuse || !s.labels.defined() || s.labels.size(0) != n || s.labels.use_count() > 1) {
      s.labels = torch::empty({n}, torch::TensorOptions(torch::kInt64).pinned_memory(o.pinMemory));
    }
    if (o.uint8Batches &&
        (!reuse || !s.flips.defined() || s.flips.size(0) != n || s.flips.use_count() > 1)) {
      s.flips = torch::empty({n}, torch::TensorOptions(torch::kUInt8).pinned_memory(o.pinMemory));
    }
    s.ok.assign(static_cast<size_t>(n), 0);
    s.batch = b;
    s.remaining = n;
  }

  // Inline mode: the consumer runs every step of batch b itself.
  void runInline(size_t slot, int64_t b) {
    prepare(slot, b);
    for (int64_t r = 0; r < static_cast<int64_t>(batches[b].size()); ++r) {
      Work w;
      w.batch = b;
      w.slot = slot;
      w.row = r;
      w.index = batches[b][r];
      if (readStep(w) && decodeStep(w) && augmentStep(w)) slots[slot].ok[r] = 1;
      if (error) std::rethrow_exception(error);
    }
  }

  template <class Fn>
  void spawn(Fn fn) {
    threads.emplace_back([this, fn] {
      try {
        (this->*fn)();
      } catch (...) {
        stop(std::current_exception());
      }
    });
  }
};

InputPipeline::InputPipeline(std::shared_ptr<const ImageSource> source, ImageAugment augment,
                             PipelineOptions o, uint64_t seed, int64_t epoch,
                             std::vector<std::vector<int64_t>> batches,
                             std::shared_ptr<DecodedCache> cache) {
  BIGBATCH_REQUIRE(source != nullptr, InvalidArgument, "input pipeline: no source");
  const bool inlineMode = o.readThreads == 0 && o.decodeThreads == 0 && o.augmentThreads == 0;
  BIGBATCH_REQUIRE(
      (inlineMode || (o.readThreads >= 1 && o.decodeThreads >= 1 && o.augmentThreads >= 1)) &&
          o.prefetchBatches >= 1 && o.queueSamples >= 1,
      InvalidArgument,
      "input pipeline: threads per stage must all be >= 1 (or all 0: inline), prefetch "
      "depth and queue size >= 1 (read {}, decode {}, augment {}, prefetch {}, queue {})",
      o.readThreads, o.decodeThreads, o.augmentThreads, o.prefetchBatches, o.queueSamples);
  const ImageSize fixed = source->fixedSize();
  BIGBATCH_REQUIRE((augment.outHeight > 0 && augment.outWidth > 0) || fixed.height > 0,
                   InvalidArgument,
                   "input pipeline: the {} source's images differ in size; give an output size "
                   "(e.g. a random resized crop to 224 x 224)",
                   source->kind());
  for (const auto& b : batches) {
    for (int64_t i : b) {
      BIGBATCH_REQUIRE(i >= 0 && i < source->size(), InvalidArgument,
                       "input pipeline: sample index {} outside the source's {} samples", i,
                       source->size());
    }
  }
  state_ = std::make_shared<State>(static_cast<size_t>(o.queueSamples));
  State& s = *state_;
  s.source = std::move(source);
  s.augment = std::move(augment);
  s.o = o;
  s.seed = seed;
  s.epoch = epoch;
  s.batches = std::move(batches);
  s.cache = std::move(cache);
  s.channels = s.source->channels();
  s.out = outputSize(fixed, s.augment);
  s.slots = std::vector<State::Slot>(static_cast<size_t>(o.prefetchBatches));
  for (size_t i = 0; i < s.slots.size(); ++i) s.freeSlots.push_back(s.slots.size() - 1 - i);
  s.inlineMode = inlineMode;
  if (inlineMode) return;
  s.readersLeft = o.readThreads;
  s.decodersLeft = o.decodeThreads;
  s.spawn(&State::feed);
  for (int i = 0; i < o.readThreads; ++i) s.spawn(&State::readLoop);
  for (int i = 0; i < o.decodeThreads; ++i) s.spawn(&State::decodeLoop);
  for (int i = 0; i < o.augmentThreads; ++i) s.spawn(&State::augmentLoop);
}

InputPipeline::~InputPipeline() {
  if (!state_) return;
  state_->stop(nullptr);
  for (auto& t : state_->threads) t.join();
}

bool InputPipeline::next(PipelineBatch& out) {
  State& s = *state_;
  out = PipelineBatch{};  // drop the last batch's buffers so they can be reused
  std::unique_lock<std::mutex> lock(s.mu);
  if (s.held) {
    s.freeSlots.push_back(*s.held);
    s.held.reset();
    s.cv.notify_all();
  }
  if (s.nextOut >= static_cast<int64_t>(s.batches.size())) return false;
  if (s.inlineMode) {
    const size_t slot = s.freeSlots.back();
    s.freeSlots.pop_back();
    lock.unlock();
    s.runInline(slot, s.nextOut);
    lock.lock();
    s.done[s.nextOut] = slot;
  }
  s.cv.wait(lock, [&] { return s.error || s.stopping || s.done.count(s.nextOut); });
  if (s.error) std::rethrow_exception(s.error);
  BIGBATCH_CHECK(!s.stopping, Error, "input pipeline: next() after the pipeline stopped");
  const size_t slot = s.done.at(s.nextOut);
  s.done.erase(s.nextOut);
  State::Slot& b = s.slots[slot];
  const std::vector<int64_t>& idx = s.batches[s.nextOut];
  std::vector<int64_t> keep;
  for (size_t r = 0; r < b.ok.size(); ++r) {
    if (b.ok[r]) keep.push_back(static_cast<int64_t>(r));
  }
  if (keep.size() == b.ok.size()) {
    out.images = b.images;
    out.labels = b.labels;
    out.flips = b.flips;
    out.indices = idx;
  } else {
    const torch::Tensor rows = torch::tensor(keep, torch::kInt64);
    out.images = b.images.index_select(0, rows);
    if (s.o.channelsLast) out.images = out.images.contiguous(at::MemoryFormat::ChannelsLast);
    out.labels = b.labels.index_select(0, rows);
    if (b.flips.defined()) out.flips = b.flips.index_select(0, rows);
    for (int64_t r : keep) out.indices.push_back(idx[r]);
    out.skipped = static_cast<int64_t>(b.ok.size() - keep.size());
  }
  s.held = slot;
  ++s.nextOut;
  s.delivered += static_cast<int64_t>(keep.size());
  return true;
}

bool InputPipeline::uint8Batches() const { return state_->o.uint8Batches; }

Normalisation InputPipeline::normalisation() const {
  return normalisationOf(state_->augment, state_->channels);
}

PipelineStats InputPipeline::stats() const {
  const State& s = *state_;
  PipelineStats st;
  st.samples = s.delivered.load();
  st.skipped = s.skipped.load();
  st.decoded = s.decoded.load();
  st.cacheHits = s.cacheHits.load();
  std::lock_guard<std::mutex> lock(const_cast<State&>(s).mu);
  st.skippedWhere = s.skippedWhere;
  return st;
}

}  // namespace bigbatch
