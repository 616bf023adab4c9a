// The GPU decode path's host half (jpeg_batch_reader.h) against the CPU
// pipeline: the same samples, order, labels, crops and flips for the same
// seed, epoch and shard; the bad files skipped, counted and named as the CPU
// path skips them; jpegStreamProblem() on whole and cut-short files.
#include "bigbatch/data/jpeg_batch_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "../../src/data/jpeg_codec.h"
#include "bigbatch/common/error.h"
#include "bigbatch/data/gpu_jpeg_decoder.h"
#include "bigbatch/data/input_pipeline.h"
#include "bigbatch/data/sampler.h"
#include "jpeg_fixtures.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;
namespace fx = test_fixtures;

class JpegFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("bigbatch-jpeg-reader-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // n small images over 3 classes, of varied sizes (34..57 x 26..45): small
  // enough that the CPU pipeline decodes them whole (no DCT scaling: each
  // crop is under the 64x64 output), so rendering a plan from a full-size
  // decode must reproduce its batches bit for bit.
  void writeGood(int n) {
    for (int i = 0; i < n; ++i) {
      const int w = 34 + (i * 7) % 24, h = 26 + (i * 5) % 20;
      fx::write(root_ / ("c" + std::to_string(i % 3)) / ("img" + std::to_string(100 + i) + ".jpg"),
                fx::smoothJpeg(w, h, static_cast<uint64_t>(i)));
    }
  }

  static ImageAugment trainAugment() {
    ImageAugment a;
    a.outHeight = a.outWidth = 64;
    a.randomResizedCrop = true;
    a.flip = true;
    a.mean = {0.485f, 0.456f, 0.406f};
    a.std = {0.229f, 0.224f, 0.225f};
    return a;
  }

  fs::path root_;
};

// The batch the reader's plans give when rendered by the CPU augmenter from
// a full-size libjpeg-turbo decode: what the GPU path must reproduce (the
// decoders aside).
torch::Tensor renderOnCpu(const ImageSource& source, const JpegBatch& b, const ImageAugment& a) {
  torch::Tensor out =
      torch::empty({static_cast<int64_t>(b.samples.size()), 3, a.outHeight, a.outWidth});
  for (size_t i = 0; i < b.samples.size(); ++i) {
    const JpegSample& s = b.samples[i];
    const Image image = source.decode(s.bytes, DecodeRequest{});
    augmentInto(image, s.original, s.plan, a, out[static_cast<int64_t>(i)]);
  }
  return out;
}

TEST_F(JpegFolder, SameSamplesOrderLabelsCropsAndFlipsAsTheCpuPipeline) {
  writeGood(45);
  const auto source = makeImageFolderSource(root_.string());
  const ImageAugment a = trainAugment();
  int64_t flipped = 0, cropped = 0, compared = 0;
  const std::vector<std::tuple<int, int, int>> runs = {{1, 0, 1}, {2, 0, 1}, {3, 1, 2}};
  for (const auto& [epoch, rank, world] : runs) {
    const uint64_t seed = 7;
    const ShardPlan plan = planEpoch(source->size(), 8, rank, world, seed, epoch);
    PipelineOptions p;
    p.readThreads = p.decodeThreads = p.augmentThreads = 2;
    InputPipeline cpu(source, a, p, seed, epoch, plan.batches);
    JpegReaderOptions r;
    r.readThreads = 3;
    r.prefetchBatches = 2;
    JpegBatchReader reader(source, a, r, seed, epoch, plan.batches);
    PipelineBatch expected;
    JpegBatch got;
    while (cpu.next(expected)) {
      ASSERT_TRUE(reader.next(got));
      ASSERT_EQ(got.samples.size(), expected.indices.size());
      EXPECT_EQ(got.skipped, 0);
      for (size_t i = 0; i < got.samples.size(); ++i) {
        const JpegSample& s = got.samples[i];
        EXPECT_EQ(s.index, expected.indices[i]) << "epoch " << epoch << " row " << i;
        EXPECT_EQ(s.label, expected.labels[static_cast<int64_t>(i)].item<int64_t>());
        EXPECT_EQ(s.label, source->label(s.index));
        flipped += s.plan.flip;
        cropped += s.plan.height < s.original.height || s.plan.width < s.original.width;
      }
      const torch::Tensor rendered = renderOnCpu(*source, got, a);
      // Exact: the same plan rendered from the same pixels by the same code.
      EXPECT_TRUE(torch::equal(rendered, expected.images))
          << "epoch " << epoch << ": max difference "
          << (rendered - expected.images).abs().max().item<float>();
      compared += static_cast<int64_t>(got.samples.size());
    }
    EXPECT_FALSE(reader.next(got)) << "the reader has batches the CPU pipeline does not";
    EXPECT_EQ(reader.stats().samples, cpu.stats().samples);
  }
  EXPECT_EQ(compared, 45 + 45 + 45 / 2 + 1);  // rank 1 of 2 takes the larger halves of odd batches
  // The comparison covers both flips and real crops.
  EXPECT_GT(flipped, 0);
  EXPECT_LT(flipped, compared);
  EXPECT_GT(cropped, 0);
}

TEST_F(JpegFolder, InlineReadingGivesTheSameBatches) {
  writeGood(20);
  const auto source = makeImageFolderSource(root_.string());
  const ImageAugment a = trainAugment();
  const ShardPlan plan = planEpoch(source->size(), 6, 0, 1, 3, 1);
  JpegReaderOptions threaded, inlined;
  inlined.readThreads = 0;
  JpegBatchReader x(source, a, threaded, 3, 1, plan.batches);
  JpegBatchReader y(source, a, inlined, 3, 1, plan.batches);
  JpegBatch bx, by;
  int batches = 0;
  while (x.next(bx)) {
    ASSERT_TRUE(y.next(by));
    ASSERT_EQ(bx.samples.size(), by.samples.size());
    for (size_t i = 0; i < bx.samples.size(); ++i) {
      EXPECT_EQ(bx.samples[i].index, by.samples[i].index);
      EXPECT_EQ(bx.samples[i].bytes, by.samples[i].bytes);
      EXPECT_EQ(bx.samples[i].plan.top, by.samples[i].plan.top);
      EXPECT_EQ(bx.samples[i].plan.flip, by.samples[i].plan.flip);
    }
    ++batches;
  }
  EXPECT_FALSE(y.next(by));
  EXPECT_EQ(batches, 4);
}

// The bad files of issue 56: the host rejects what is not a whole JPEG (as
// libjpeg-turbo does on the CPU path), each named once and counted; CMYK,
// greyscale and 1x1 JPEGs are whole files and go on to the decoder.
TEST_F(JpegFolder, BadFilesAreSkippedCountedAndNamedOnce) {
  const std::vector<uint8_t> good = fx::smoothJpeg(200, 150, 1);  // cut at 60 %: in its scan
  const std::map<std::string, std::vector<uint8_t>> files = {
      {"a_good.jpg", good},
      {"b_png_named.jpg", fx::png(20, 10, 2)},
      {"c_truncated.jpg", fx::truncated(good, 60)},
      {"d_corrupt_header.jpg", fx::corruptHeader(good)},
      {"e_empty.jpg", {}},
      {"f_grey.jpg", fx::encode(std::vector<uint8_t>(30 * 20, 90), 30, 20, 1, {})},
      {"g_cmyk.jpg", fx::encode(fx::smoothImage(24, 16, 4, 3), 24, 16, 4, {TJSAMP_444})},
      {"h_one_pixel.jpg", fx::smoothJpeg(1, 1, 4)},
      {"i_good.jpg", fx::smoothJpeg(40, 30, 5)}};
  for (const auto& [name, bytes] : files) fx::write(root_ / "only" / name, bytes);
  const auto source = makeImageFolderSource(root_.string());
  ASSERT_EQ(source->size(), 9);
  const std::vector<std::vector<int64_t>> batches = {{0, 1, 2, 3, 4}, {5, 6, 7, 8}};
  JpegBatchReader reader(source, trainAugment(), {}, 1, 1, batches);
  JpegBatch b;
  std::vector<std::string> kept;
  int64_t skippedInBatches = 0;
  while (reader.next(b)) {
    for (const JpegSample& s : b.samples)
      kept.push_back(fs::path(source->where(s.index)).filename());
    skippedInBatches += b.skipped;
  }
  EXPECT_EQ(kept, (std::vector<std::string>{"a_good.jpg", "f_grey.jpg", "g_cmyk.jpg",
                                            "h_one_pixel.jpg", "i_good.jpg"}));
  const PipelineStats st = reader.stats();
  EXPECT_EQ(st.skipped, 4);
  EXPECT_EQ(skippedInBatches, 4);
  EXPECT_EQ(st.samples, 5);
  std::multiset<std::string> named;
  for (const auto& w : st.skippedWhere) named.insert(fs::path(w).filename());
  EXPECT_EQ(named, (std::multiset<std::string>{"b_png_named.jpg", "c_truncated.jpg",
                                               "d_corrupt_header.jpg", "e_empty.jpg"}));
  // A failure on the device goes through the same rule.
  reader.skipBad(0, "the device could not decode it");
  EXPECT_EQ(reader.stats().skipped, 5);
  EXPECT_EQ(reader.stats().samples, 4);
}

TEST_F(JpegFolder, FailModeNamesTheFirstBadFile) {
  fx::write(root_ / "c" / "a.jpg", fx::smoothJpeg(40, 30, 1));
  fx::write(root_ / "c" / "b.jpg", fx::truncated(fx::smoothJpeg(200, 150, 2), 70));
  const auto source = makeImageFolderSource(root_.string());
  for (const int threads : {0, 2}) {
    JpegReaderOptions o;
    o.readThreads = threads;
    o.skipBadSamples = false;
    JpegBatchReader reader(source, trainAugment(), o, 1, 1, {{0, 1}});
    JpegBatch b;
    try {
      reader.next(b);
      FAIL() << "a truncated file under data.bad_samples = fail must end the epoch";
    } catch (const IoError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("b.jpg"), std::string::npos) << what;
      EXPECT_NE(what.find("truncated"), std::string::npos) << what;
      EXPECT_NE(what.find("data.bad_samples"), std::string::npos) << what;
    }
  }
}

TEST_F(JpegFolder, RefusesWhatIsNotAJpegFolder) {
  const auto idx = makeIdxSource(makeSyntheticDataset(8, 3, 16, 16, 2, 1));
  try {
    JpegBatchReader reader(idx, trainAugment(), {}, 1, 1, {{0, 1}});
    FAIL() << "an in-memory source has no JPEG files";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("data.decode"), std::string::npos) << e.what();
  }
}

TEST(JpegStreamProblem, WholeFilesPassAndCutFilesDoNot) {
  const std::vector<fx::JpegOptions> encodings = {{}, {TJSAMP_444, true, 95}};
  for (const fx::JpegOptions& o : encodings) {
    const std::vector<uint8_t> jpeg = fx::smoothJpeg(64, 48, 9, o);
    EXPECT_EQ(data_detail::jpegStreamProblem(jpeg.data(), jpeg.size()), "");
    std::vector<uint8_t> trailing = jpeg;
    trailing.insert(trailing.end(), {0x00, 0x12, 0x34});  // bytes after EOI: still whole
    EXPECT_EQ(data_detail::jpegStreamProblem(trailing.data(), trailing.size()), "");
    for (size_t cut = 0; cut < jpeg.size(); cut += 1 + cut / 8) {
      EXPECT_NE(data_detail::jpegStreamProblem(jpeg.data(), cut), "") << "cut at " << cut;
    }
    EXPECT_NE(data_detail::jpegStreamProblem(jpeg.data(), jpeg.size() - 1), "");
  }
  const std::vector<uint8_t> png = fx::png(8, 8, 1);
  EXPECT_NE(data_detail::jpegStreamProblem(png.data(), png.size()).find("not a JPEG"),
            std::string::npos);
}

// Where this build cannot decode on the GPU, the decoder says what is
// missing and the fix rather than failing later.
TEST(GpuJpegDecoder, ABuildWithoutItRefusesNamingTheFix) {
  const GpuDecodeSupport support = gpuJpegDecodeSupport();
  if (support.built)
    GTEST_SKIP() << "this build decodes on the GPU (the cuda-labelled tests cover it)";
#ifndef BIGBATCH_WITH_CUDA
  EXPECT_NE(support.missing.find("CPU build"), std::string::npos) << support.missing;
  EXPECT_NE(support.fix.find("scripts/build-cuda"), std::string::npos) << support.fix;
#else
  EXPECT_NE(support.missing.find("nvJPEG"), std::string::npos) << support.missing;
  EXPECT_NE(support.fix.find("NVJPEG_ROOT"), std::string::npos) << support.fix;
#endif
  EXPECT_NE(support.fix.find("data.decode = \"cpu\""), std::string::npos) << support.fix;
  try {
    GpuJpegDecoder decoder(torch::Device(torch::kCUDA, 0));
    FAIL() << "made a GPU decoder in a build without one";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(support.missing), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bigbatch
