// The input pipeline and its sources: IDX, CIFAR-10 binary batches, class
// folders of JPEGs (including an empty class, a non-image file, a corrupt
// and a truncated JPEG), synthetic; determinism across 1 and 4 threads per
// stage; every sample exactly once per epoch across ranks; the cache budget;
// bad-sample policies; shutdown mid-epoch (also run under AddressSanitizer
// by scripts/sanitize).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <unistd.h>

#include "bigbatch/common/error.h"
#include "bigbatch/data/batch.h"
#include "bigbatch/data/input_pipeline.h"
#include "bigbatch/data/sampler.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

// A smooth RGB picture with some texture, so JPEG sizes are photo-like.
Image picture(int64_t h, int64_t w, int seed) {
  Image img{h, w, 3, std::vector<uint8_t>(static_cast<size_t>(h * w * 3))};
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      for (int64_t c = 0; c < 3; ++c) {
        const int v = static_cast<int>((x * (c + 1) + y * (3 - c)) / 3 + seed * 37 +
                                       ((x * 7 + y * 13 + seed) % 17));
        img.pixels[(y * w + x) * 3 + c] = static_cast<uint8_t>(v & 255);
      }
    }
  }
  return img;
}

void writeFile(const fs::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

class Folder : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("folder_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "b_cat");
    fs::create_directories(root_ / "a_dog");
    fs::create_directories(root_ / "c_empty");
    int seed = 0;
    for (const char* name : {"1.jpg", "2.JPEG", "3.jpeg"}) {
      writeFile(root_ / "a_dog" / name, encodeJpeg(picture(120 + 10 * seed, 160, seed), 90));
      ++seed;
    }
    for (const char* name : {"x.jpg", "y.jpg"}) {
      writeFile(root_ / "b_cat" / name, encodeJpeg(picture(200, 150, seed), 90));
      ++seed;
    }
    writeFile(root_ / "b_cat" / "readme.txt", {'h', 'i'});  // not an image: ignored
    good_ = 5;
  }
  void addBadFiles() {
    const std::string text = "this is not a JPEG";
    writeFile(root_ / "b_cat" / "broken.jpg", std::vector<uint8_t>(text.begin(), text.end()));
    std::vector<uint8_t> jpeg = encodeJpeg(picture(200, 150, 9), 90);
    jpeg.resize(jpeg.size() / 2);
    writeFile(root_ / "b_cat" / "truncated.jpg", jpeg);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
  int64_t good_ = 0;
};

ImageAugment imagenetStyle() {
  ImageAugment a;
  a.outHeight = a.outWidth = 64;
  a.randomResizedCrop = true;
  a.flip = true;
  a.mean = {0.485f, 0.456f, 0.406f};
  a.std = {0.229f, 0.224f, 0.225f};
  return a;
}

std::vector<PipelineBatch> runEpoch(std::shared_ptr<const ImageSource> src, const ImageAugment& a,
                                    PipelineOptions o, int64_t epoch, int64_t batch,
                                    std::shared_ptr<DecodedCache> cache = nullptr,
                                    PipelineStats* stats = nullptr) {
  const ShardPlan plan = planEpoch(src->size(), batch, 0, 1, 7, epoch);
  InputPipeline p(src, a, o, 7, epoch, plan.batches, cache);
  std::vector<PipelineBatch> out;
  PipelineBatch b;
  while (p.next(b)) {
    PipelineBatch copy = b;
    copy.images = b.images.clone();
    copy.labels = b.labels.clone();
    out.push_back(copy);
  }
  if (stats) *stats = p.stats();
  return out;
}

TEST_F(Folder, ClassesSortedEmptyClassKeptOtherFilesIgnored) {
  auto src = makeImageFolderSource(root_.string());
  EXPECT_EQ(src->numClasses(), 3);  // a_dog, b_cat, c_empty
  EXPECT_EQ(src->size(), good_);
  EXPECT_EQ(src->label(0), 0);
  EXPECT_EQ(src->label(4), 1);
  EXPECT_NE(src->where(0).find("a_dog/1.jpg"), std::string::npos) << src->where(0);
  std::vector<uint8_t> bytes;
  src->read(3, bytes);
  EXPECT_EQ(src->peek(bytes).height, 200);
  const Image full = src->decode(bytes, {});
  EXPECT_EQ(full.width, 150);
  EXPECT_EQ(full.channels, 3);
  // DCT scaling: a 100-pixel region needing only 24 pixels decodes at 1/4.
  const Image small = src->decode(bytes, {100, 100, 24, 24});
  EXPECT_EQ(small.height, 50);
  EXPECT_EQ(small.width, 38);  // ceil(150 / 4)
}

TEST_F(Folder, NoImagesAtAllIsAnErrorNamingTheFolder) {
  fs::remove_all(root_ / "a_dog");
  fs::remove_all(root_ / "b_cat");
  try {
    makeImageFolderSource(root_.string());
    FAIL() << "a folder without images was accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(root_.string()), std::string::npos) << e.what();
  }
  EXPECT_THROW(makeImageFolderSource((root_ / "missing").string()), IoError);
}

TEST_F(Folder, BadFilesAreSkippedCountedAndNamed) {
  addBadFiles();
  auto src = makeImageFolderSource(root_.string());
  ASSERT_EQ(src->size(), good_ + 2);
  PipelineStats st, inlineStats;
  PipelineOptions inlined;
  inlined.readThreads = inlined.decodeThreads = inlined.augmentThreads = 0;
  runEpoch(src, imagenetStyle(), inlined, 1, 3, nullptr, &inlineStats);
  EXPECT_EQ(inlineStats.skipped, 2);
  EXPECT_EQ(inlineStats.samples, good_);
  auto batches = runEpoch(src, imagenetStyle(), PipelineOptions{}, 1, 3, nullptr, &st);
  int64_t rows = 0, skipped = 0;
  for (const auto& b : batches) {
    rows += b.size();
    skipped += b.skipped;
    ASSERT_EQ(static_cast<int64_t>(b.indices.size()), b.size());
    for (int64_t r = 0; r < b.size(); ++r) {
      EXPECT_EQ(b.labels[r].item<int64_t>(), src->label(b.indices[r])) << "label misaligned";
      EXPECT_EQ(src->where(b.indices[r]).find(".jpg.") , std::string::npos);
    }
  }
  EXPECT_EQ(rows, good_);
  EXPECT_EQ(skipped, 2);
  EXPECT_EQ(st.skipped, 2);
  ASSERT_EQ(st.skippedWhere.size(), 2u);
  std::set<std::string> names;
  for (const auto& w : st.skippedWhere) names.insert(fs::path(w).filename().string());
  EXPECT_TRUE(names.count("broken.jpg") && names.count("truncated.jpg"));
}

TEST_F(Folder, BadFileFailsTheEpochNamingIndexAndPath) {
  addBadFiles();
  auto src = makeImageFolderSource(root_.string());
  for (int threads : {1, 0}) {
    PipelineOptions o;
    o.skipBadSamples = false;
    o.readThreads = o.decodeThreads = o.augmentThreads = threads;
    try {
      runEpoch(src, imagenetStyle(), o, 1, 2);
      FAIL() << "a corrupt JPEG did not fail the epoch (threads " << threads << ")";
    } catch (const IoError& e) {
      const std::string m = e.what();
      EXPECT_TRUE(m.find("broken.jpg") != std::string::npos ||
                  m.find("truncated.jpg") != std::string::npos) << m;
      EXPECT_NE(m.find("sample "), std::string::npos) << m;
    }
  }
}

// The same epoch with 1 and with 4 threads per stage (and another prefetch
// depth), and inline (no threads), gives bit-identical batches; another
// epoch gives other crops.
TEST_F(Folder, OutputIndependentOfThreadCount) {
  auto src = makeImageFolderSource(root_.string());
  PipelineOptions one, four;
  four.readThreads = four.decodeThreads = four.augmentThreads = 4;
  four.prefetchBatches = 3;
  four.queueSamples = 2;
  const auto a = runEpoch(src, imagenetStyle(), one, 3, 2);
  const auto b = runEpoch(src, imagenetStyle(), four, 3, 2);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i].images, b[i].images)) << "batch " << i;
    EXPECT_TRUE(torch::equal(a[i].labels, b[i].labels));
  }
  PipelineOptions inlined;
  inlined.readThreads = inlined.decodeThreads = inlined.augmentThreads = 0;
  const auto d = runEpoch(src, imagenetStyle(), inlined, 3, 2);
  ASSERT_EQ(a.size(), d.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].images, d[i].images));
  const auto c = runEpoch(src, imagenetStyle(), one, 4, 2);
  EXPECT_FALSE(torch::equal(a[0].images, c[0].images));
  EXPECT_EQ(a[0].images.sizes(), (std::vector<int64_t>{2, 3, 64, 64}));
}

TEST_F(Folder, CacheSkipsDecodingWithinItsBudgetAndChangesNothing) {
  auto src = makeImageFolderSource(root_.string());
  // Room for two of the five decoded images (the largest is 200x150x3).
  auto cache = std::make_shared<DecodedCache>(src->size(), 2 * 200 * 150 * 3, 0);
  PipelineStats s1, s2, s3;
  const auto e1 = runEpoch(src, imagenetStyle(), PipelineOptions{}, 1, 2, cache, &s1);
  EXPECT_EQ(s1.cacheHits, 0);
  EXPECT_EQ(s1.decoded, good_);
  EXPECT_LE(cache->bytes(), cache->budgetBytes());
  EXPECT_EQ(cache->entries(), 2);
  const auto e2 = runEpoch(src, imagenetStyle(), PipelineOptions{}, 2, 2, cache, &s2);
  EXPECT_EQ(s2.cacheHits, 2);
  EXPECT_EQ(s2.decoded, good_ - 2);
  // Without a cache, epoch 2 is the same (full-resolution decode either way).
  auto noCache = std::make_shared<DecodedCache>(src->size(), 0, 0);
  const auto e2b = runEpoch(src, imagenetStyle(), PipelineOptions{}, 2, 2, noCache, &s3);
  ASSERT_EQ(e2.size(), e2b.size());
  for (size_t i = 0; i < e2.size(); ++i) EXPECT_TRUE(torch::equal(e2[i].images, e2b[i].images));
}

// Every sample once per epoch across 3 ranks, with an uneven last batch.
TEST(InputPipeline, EverySampleOncePerEpochAcrossRanks) {
  auto src = makeSyntheticSource(103, 1, 8, 8, 10, 5);
  for (int64_t epoch = 1; epoch <= 2; ++epoch) {
    std::multiset<int64_t> seen;
    for (int rank = 0; rank < 3; ++rank) {
      const ShardPlan plan = planEpoch(src->size(), 12, rank, 3, 9, epoch);
      PipelineOptions o;
      o.decodeThreads = 2;
      InputPipeline p(src, ImageAugment{}, o, 9, epoch, plan.batches);
      PipelineBatch b;
      int64_t steps = 0;
      while (p.next(b)) {
        ++steps;
        for (int64_t i : b.indices) seen.insert(i);
        for (int64_t r = 0; r < b.size(); ++r) EXPECT_EQ(b.labels[r].item<int64_t>(), b.indices[r] % 10);
      }
      EXPECT_EQ(steps, plan.steps);
    }
    ASSERT_EQ(seen.size(), 103u);
    for (int64_t i = 0; i < 103; ++i) EXPECT_EQ(seen.count(i), 1u) << "sample " << i;
  }
}

// IDX tensors through the pipeline equal the trainer's assembleBatch path:
// uint8 -> (x / 255 - mean) / std, no augmentation.
TEST(InputPipeline, IdxSourceNormalises) {
  Dataset d;
  d.name = "tiny";
  d.images = torch::randint(0, 256, {10, 1, 4, 5}, torch::kUInt8);
  d.labels = torch::arange(10, torch::kInt64) % 3;
  d.numClasses = 3;
  auto src = makeIdxSource(d);
  ImageAugment a;
  a.mean = {0.5f};
  a.std = {0.25f};
  InputPipeline p(src, a, PipelineOptions{}, 1, 1, {{3, 7}});
  PipelineBatch b;
  ASSERT_TRUE(p.next(b));
  const torch::Tensor want = (d.images.index_select(0, torch::tensor({3, 7})).to(torch::kFloat) / 255.0 - 0.5) / 0.25;
  EXPECT_TRUE(torch::allclose(b.images, want, 1e-5, 1e-5));
  EXPECT_EQ(b.labels[1].item<int64_t>(), 1);
  EXPECT_FALSE(p.next(b));
}

// The whole-image path (no crop, no resize: Fashion-MNIST, synthetic data)
// for 1, 2 and 3 channels (the copy, the general and the RGB planes-to-
// pixels gather of the IDX source), into plain and channels-last batches,
// flipped per sample as planCrop says: bit for bit x * (1 / (255 std)) -
// mean / std in ATen, each a float multiply then a float add.
TEST(InputPipeline, WholeImagePathEqualsAtenForEveryLayoutAndChannelCount) {
  for (int64_t channels : {1, 2, 3}) {
    const Dataset d = makeSyntheticDataset(12, channels, 9, 13, 5, 3 + channels);
    ImageAugment a;
    a.flip = true;
    a.mean = {0.3f, 0.45f, 0.6f};
    a.std = {0.2f, 0.27f, 0.31f};
    if (channels < 3) {
      a.mean.resize(1);
      a.std.resize(1);
    }
    const std::vector<int64_t> idx = {5, 0, 11, 7, 2, 9};
    std::vector<float> scale, shift;
    for (int64_t c = 0; c < channels; ++c) {
      const size_t k = a.mean.size() == 1 ? 0 : static_cast<size_t>(c);
      scale.push_back(1.f / (255.f * a.std[k]));
      shift.push_back(-a.mean[k] / a.std[k]);
    }
    const torch::Tensor scaleT = torch::tensor(scale).view({channels, 1, 1});
    const torch::Tensor shiftT = torch::tensor(shift).view({channels, 1, 1});
    for (bool channelsLast : {false, true}) {
      PipelineOptions o;
      o.channelsLast = channelsLast;
      InputPipeline p(makeIdxSource(d), a, o, 21, 2, {idx});
      PipelineBatch b;
      ASSERT_TRUE(p.next(b));
      ASSERT_TRUE(b.images.is_contiguous(channelsLast ? at::MemoryFormat::ChannelsLast
                                                      : at::MemoryFormat::Contiguous));
      int flips = 0;
      for (size_t r = 0; r < idx.size(); ++r) {
        torch::Tensor x = d.images[idx[r]].to(torch::kFloat);
        if (planCrop({9, 13}, a, 21, 2, idx[r]).flip) {
          x = x.flip({2});
          ++flips;
        }
        const torch::Tensor want = x.mul(scaleT).add(shiftT);
        EXPECT_TRUE(torch::equal(b.images[static_cast<int64_t>(r)], want))
            << channels << " channel(s), channels-last " << channelsLast << ", row " << r
            << ": max difference "
            << (b.images[static_cast<int64_t>(r)] - want).abs().max().item<float>();
      }
      EXPECT_GT(flips, 0);
      EXPECT_LT(flips, static_cast<int>(idx.size()));
    }
  }
}

// With flip and pad-and-crop, the pipeline's batch of an IDX dataset is
// bit-identical to assembleBatch's (the trainer's former path), so moving
// the trainer onto the pipeline changed no result.
TEST(InputPipeline, IdxBatchEqualsAssembleBatch) {
  Dataset d = makeSyntheticDataset(50, 1, 28, 28, 10, 4);
  d.mean = 0.286f;
  d.std = 0.353f;
  const std::vector<int64_t> idx = {3, 17, 8, 44, 0, 21, 9};
  for (int64_t pad : {0, 2}) {  // the flip-only fast path and the pad-and-crop path
    ImageAugment a;
    a.flip = true;
    a.padCrop = pad;
    a.mean = {d.mean};
    a.std = {d.std};
    for (int64_t epoch = 1; epoch <= 3; ++epoch) {
      InputPipeline p(makeIdxSource(d), a, PipelineOptions{}, 11, epoch, {idx});
      PipelineBatch b;
      ASSERT_TRUE(p.next(b));
      const Batch want = assembleBatch(d, idx, AugmentOptions{true, pad}, 11, epoch, false);
      EXPECT_TRUE(torch::equal(b.images, want.images)) << "pad " << pad << " epoch " << epoch;
      EXPECT_TRUE(torch::equal(b.labels, want.labels));
    }
  }
}

TEST(InputPipeline, Cifar10BinaryBatches) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("cifar_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<uint8_t> records;
  for (int r = 0; r < 4; ++r) {
    records.push_back(static_cast<uint8_t>(r * 3 % 10));
    for (int k = 0; k < 3072; ++k) records.push_back(static_cast<uint8_t>((k / 1024) * 80 + r));
  }
  writeFile(dir / "test_batch.bin", records);
  auto src = makeCifar10Source(dir.string(), "test");
  ASSERT_EQ(src->size(), 4);
  EXPECT_EQ(src->label(2), 6);
  EXPECT_NE(src->where(3).find("test_batch.bin record 3"), std::string::npos);
  std::vector<uint8_t> bytes;
  src->read(1, bytes);
  const Image img = src->decode(bytes, {});
  // R, G, B planes -> interleaved HWC.
  EXPECT_EQ(img.pixels[0], 1);
  EXPECT_EQ(img.pixels[1], 81);
  EXPECT_EQ(img.pixels[2], 161);
  ImageAugment a;
  a.padCrop = 4;
  a.flip = true;
  InputPipeline p(src, a, PipelineOptions{}, 1, 1, {{0, 1, 2, 3}});
  PipelineBatch b;
  ASSERT_TRUE(p.next(b));
  EXPECT_EQ(b.images.sizes(), (std::vector<int64_t>{4, 3, 32, 32}));
  // A truncated file is refused naming it; so is the missing train split.
  records.resize(records.size() - 100);
  writeFile(dir / "test_batch.bin", records);
  try {
    makeCifar10Source(dir.string(), "test");
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("test_batch.bin"), std::string::npos) << e.what();
  }
  EXPECT_THROW(makeCifar10Source(dir.string(), "train"), IoError);
  fs::remove_all(dir);
}

// Stopping mid-epoch (destroying the pipeline with work queued in every
// stage and batches ready) joins every thread without hanging or leaking.
TEST(InputPipeline, ShutdownMidEpoch) {
  auto src = makeSyntheticSource(4000, 3, 32, 32, 10, 1);
  for (int trial = 0; trial < 20; ++trial) {
    PipelineOptions o;
    o.readThreads = 2;
    o.decodeThreads = 3;
    o.augmentThreads = 2;
    o.queueSamples = 16;
    o.prefetchBatches = 3;
    const ShardPlan plan = planEpoch(src->size(), 64, 0, 1, 3, trial);
    InputPipeline p(src, ImageAugment{}, o, 3, trial, plan.batches);
    PipelineBatch b;
    for (int k = 0; k < trial % 4; ++k) ASSERT_TRUE(p.next(b));
  }
}

// Validation's centre crop: the centred `centerCrop` of the shorter side at
// the output's aspect ratio ("resize 256, crop 224" = 0.875), the same for
// every seed, epoch and index.
TEST(InputPipeline, CenterCropIsTheCentredFractionOfTheShorterSide) {
  ImageAugment a;
  a.outHeight = a.outWidth = 224;
  a.centerCrop = 0.875;
  const CropPlan p = planCrop({256, 320}, a, 1, 2, 3);
  EXPECT_EQ(p.height, 224);
  EXPECT_EQ(p.width, 224);
  EXPECT_EQ(p.top, 16);   // (256 - 224) / 2
  EXPECT_EQ(p.left, 48);  // (320 - 224) / 2
  EXPECT_FALSE(p.flip);
  const CropPlan q = planCrop({256, 320}, a, 9, 7, 5);
  EXPECT_EQ(q.top, p.top);
  EXPECT_EQ(q.left, p.left);
  // A wide output takes a wide region; 1.0 keeps the whole shorter side.
  a.outWidth = 448;
  a.centerCrop = 1.0;
  const CropPlan wide = planCrop({300, 1000}, a, 1, 1, 1);
  EXPECT_EQ(wide.height, 300);
  EXPECT_EQ(wide.width, 600);
  EXPECT_EQ(wide.left, 200);
}

// The fused crop + resize + flip + normalise equals the ATen route
// (upsample_bilinear2d, align_corners = false) it replaces, for shrinking,
// enlarging and same-size crops.
TEST(InputPipeline, FusedResizeMatchesAten) {
  const Image img = picture(90, 120, 3);
  ImageAugment a;
  a.mean = {0.4f, 0.5f, 0.6f};
  a.std = {0.2f, 0.25f, 0.3f};
  struct Case {
    CropPlan plan;
    int64_t oh, ow;
  };
  const Case cases[] = {{{10, 20, 70, 90, 0, 0, true}, 32, 40},
                        {{0, 0, 90, 120, 0, 0, false}, 90, 120},
                        {{5, 7, 20, 30, 0, 0, false}, 64, 64}};
  for (const auto& k : cases) {
    torch::Tensor got = torch::empty({3, k.oh, k.ow});
    augmentInto(img, {90, 120}, k.plan, a, got);
    torch::Tensor t = torch::from_blob(const_cast<uint8_t*>(img.pixels.data()), {90, 120, 3},
                                       torch::kUInt8)
                          .slice(0, 10 * 0 + static_cast<int64_t>(k.plan.top),
                                 static_cast<int64_t>(k.plan.top + k.plan.height))
                          .slice(1, static_cast<int64_t>(k.plan.left),
                                 static_cast<int64_t>(k.plan.left + k.plan.width))
                          .permute({2, 0, 1})
                          .to(torch::kFloat)
                          .unsqueeze(0);
    t = at::upsample_bilinear2d(t, {k.oh, k.ow}, false).squeeze(0);
    if (k.plan.flip) t = t.flip({2});
    const torch::Tensor mean = torch::tensor({0.4f, 0.5f, 0.6f}).view({3, 1, 1});
    const torch::Tensor stdv = torch::tensor({0.2f, 0.25f, 0.3f}).view({3, 1, 1});
    const torch::Tensor want = (t / 255.0 - mean) / stdv;
    EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-4))
        << "max difference " << (got - want).abs().max().item<float>();
  }
}

TEST(InputPipeline, BadOptionsAreRefused) {
  auto src = makeSyntheticSource(10, 1, 4, 4, 2, 1);
  PipelineOptions o;
  o.decodeThreads = 0;
  EXPECT_THROW(InputPipeline(src, ImageAugment{}, o, 1, 1, {{0}}), InvalidArgument);
  EXPECT_THROW(InputPipeline(src, ImageAugment{}, PipelineOptions{}, 1, 1, {{10}}), InvalidArgument);
}

}  // namespace
}  // namespace bigbatch
