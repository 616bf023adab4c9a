// IDX reader: good files (plain and gzip), and each way a file can be bad.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "bigbatch/common/error.h"
#include "bigbatch/data/dataset.h"
#include "bigbatch/data/idx_reader.h"

namespace bigbatch {
namespace {

std::string idxBytes(std::vector<uint32_t> dims, const std::vector<uint8_t>& data,
                     uint8_t type = 0x08) {
  std::string s = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int b = 3; b >= 0; --b) s.push_back(static_cast<char>((d >> (8 * b)) & 0xff));
  }
  s.append(data.begin(), data.end());
  return s;
}

std::string writeFile(const std::string& name, const std::string& bytes, bool gzip = false) {
  const std::string path = ::testing::TempDir() + "/" + name;
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  return path;
}

template <typename Fn>
std::string ioErrorMessage(Fn fn) {
  try {
    fn();
  } catch (const IoError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected IoError";
  return "";
}

TEST(IdxReader, ReadsPlainAndGzip) {
  std::vector<uint8_t> values = {1, 2, 3, 4, 5, 6};
  for (bool gz : {false, true}) {
    const auto path = writeFile(gz ? "ok.idx.gz" : "ok.idx", idxBytes({2, 3}, values), gz);
    torch::Tensor t = readIdx(path, 2);
    ASSERT_EQ(t.sizes(), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(t.dtype(), torch::kUInt8);
    EXPECT_EQ(t[1][2].item<int>(), 6);
    EXPECT_EQ(t[0][1].item<int>(), 2);
  }
}

TEST(IdxReader, TruncatedFilesAreNamed) {
  const auto path = writeFile("trunc.idx", idxBytes({2, 3}, {1, 2, 3}));
  std::string msg = ioErrorMessage([&] { readIdx(path); });
  EXPECT_NE(msg.find("trunc.idx"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("6 values"), std::string::npos) << msg;

  const auto header = writeFile("short_header.idx", std::string("\0\0\x08\x03\0\0", 6));
  msg = ioErrorMessage([&] { readIdx(header); });
  EXPECT_NE(msg.find("header"), std::string::npos) << msg;

  // A gzip stream cut in half.
  const auto full = writeFile("cut.idx.gz", idxBytes({100, 100}, std::vector<uint8_t>(10000, 7)), true);
  std::ifstream in(full, std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)), {});
  const auto cut = writeFile("cut2.idx.gz", gz.substr(0, gz.size() / 2));
  msg = ioErrorMessage([&] { readIdx(cut); });
  EXPECT_NE(msg.find("truncated or corrupt gzip"), std::string::npos) << msg;
}

// maxItems reads the first rows and decompresses no further: a file cut
// after them still reads; asking past the cut is named as truncation; the
// header's own count is reported.
TEST(IdxReader, TheFirstItemsOnlyAreReadAndTheRestIsNotNeeded) {
  std::vector<uint8_t> values(1000 * 100);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<uint8_t>((i * 2654435761u) >> 24);
  const std::string bytes = idxBytes({1000, 100}, values);
  for (bool gz : {false, true}) {
    const auto path = writeFile(gz ? "rows.idx.gz" : "rows.idx", bytes, gz);
    std::ifstream in(path, std::ios::binary);
    const std::string file((std::istreambuf_iterator<char>(in)), {});
    const auto cut =
        writeFile(gz ? "rows_cut.idx.gz" : "rows_cut.idx", file.substr(0, file.size() / 2));
    int64_t inFile = 0;
    const torch::Tensor whole = readIdx(path, 2);
    const torch::Tensor first = readIdx(cut, 2, 10, &inFile);
    EXPECT_EQ(inFile, 1000);
    ASSERT_EQ(first.sizes(), (std::vector<int64_t>{10, 100}));
    EXPECT_TRUE(first.equal(whole.narrow(0, 0, 10)));
    EXPECT_TRUE(readIdx(path, 2, 5000).equal(whole)) << "a limit past the end is the whole file";
    const std::string msg = ioErrorMessage([&] { readIdx(cut, 2, 1000); });
    EXPECT_NE(msg.find(gz ? "truncated or corrupt gzip" : "truncated"), std::string::npos) << msg;
    EXPECT_NE(ioErrorMessage([&] { readIdx(cut); }).find("truncated"), std::string::npos);
  }
  // In memory: a clipped parse accepts the bytes beyond its rows, a whole one does not.
  EXPECT_EQ(parseIdx(bytes + "x", "extra.idx", 2, 3).size(0), 3);
  EXPECT_NE(ioErrorMessage([&] {
              parseIdx(bytes + "x", "extra.idx", 2, 1000);
            }).find("longer than its header says"),
            std::string::npos);
}

TEST(IdxReader, WrongMagicTypeAndRank) {
  auto path = writeFile("magic.idx", "PK\x03\x04garbage");
  EXPECT_NE(ioErrorMessage([&] { readIdx(path); }).find("bad magic"), std::string::npos);
  path = writeFile("type.idx", idxBytes({2}, {0, 0, 0, 0, 0, 0, 0, 0}, 0x0d));
  EXPECT_NE(ioErrorMessage([&] { readIdx(path); }).find("0x0d"), std::string::npos);
  path = writeFile("rank.idx", idxBytes({2, 2}, {1, 2, 3, 4}));
  EXPECT_NE(ioErrorMessage([&] { readIdx(path, 3); }).find("2 dimensions, expected 3"),
            std::string::npos);
  EXPECT_THROW(readIdx(::testing::TempDir() + "/does-not-exist.idx"), IoError);
  EXPECT_NE(ioErrorMessage([&] { readIdx(::testing::TempDir()); }).find("is a directory"),
            std::string::npos);
}

TEST(FashionMnist, LabelCountMismatchIsNamed) {
  const std::string dir = ::testing::TempDir() + "/fm_bad";
  std::filesystem::create_directories(dir);
  writeFile("fm_bad/train-images-idx3-ubyte", idxBytes({3, 28, 28}, std::vector<uint8_t>(3 * 784)));
  writeFile("fm_bad/train-labels-idx1-ubyte", idxBytes({2}, {1, 2}));
  const std::string msg = ioErrorMessage([&] { loadFashionMnist(dir, "train"); });
  EXPECT_NE(msg.find("label count 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("image count 3"), std::string::npos) << msg;
}

TEST(FashionMnist, MissingDirectorySaysHowToInstall) {
  const std::string msg = ioErrorMessage([&] { loadFashionMnist("/nonexistent", "test"); });
  EXPECT_NE(msg.find("apt-get install dataset-fashion-mnist"), std::string::npos) << msg;
}

TEST(FashionMnist, LoadsTheDebianPackage) {
  Dataset test = loadFashionMnist("", "test");
  ASSERT_EQ(test.size(), 10000);
  EXPECT_EQ(test.images.sizes(), (std::vector<int64_t>{10000, 1, 28, 28}));
  EXPECT_EQ(test.labels.max().item<int64_t>(), 9);
  // Fashion-MNIST's test set is balanced: 1000 images per class.
  EXPECT_EQ(torch::bincount(test.labels).eq(1000).all().item<bool>(), true);
}

// The subset a run asks for (data.train_samples) is the first samples of
// the whole set, exactly as takeFirst cuts them.
TEST(FashionMnist, ALimitLoadsTheFirstSamplesOfTheWholeSet) {
  const Dataset whole = loadFashionMnist("", "train");
  const Dataset first = loadFashionMnist("", "train", 1000);
  ASSERT_EQ(first.size(), 1000);
  EXPECT_TRUE(first.images.equal(takeFirst(whole, 1000).images));
  EXPECT_TRUE(first.labels.equal(takeFirst(whole, 1000).labels));
  EXPECT_EQ(first.mean, whole.mean);
  EXPECT_EQ(first.numClasses, 10);
}

// Four dimensions of 2^28 multiply past 64 bits; the reader must call the
// file truncated, not wrap around and allocate (seen while writing the IDX
// fuzz target).
TEST(Idx, HugeDimensionsAreTruncationNotOverflow) {
  std::string bytes("\x00\x00\x08\x04", 4);
  for (int d = 0; d < 4; ++d) bytes += std::string("\x10\x00\x00\x00", 4);
  bytes += "abcd";
  try {
    parseIdx(bytes, "huge.idx");
    FAIL() << "parsed";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bigbatch
