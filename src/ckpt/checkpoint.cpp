#include "bigbatch/ckpt/checkpoint.h"

#include "bigbatch/ckpt/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "bigbatch/common/error.h"
#include "bigbatch/common/hash.h"

namespace bigbatch {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFormat = "bigbatch-checkpoint";
// The frame around the pickle: 8-byte magic, payload length and FNV-1a 64 of
// the payload (little-endian u64s). Checked before the payload reaches
// libtorch's unpickler, which trusts the lengths inside it (a corrupt one
// made it allocate 9.5 GB under scripts/fuzz).
constexpr char kMagic[8] = {'B', 'B', 'C', 'K', 'P', 'T', '1', '\n'};
constexpr size_t kFrameBytes = 24;

uint64_t readU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

void appendU64(std::vector<char>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

c10::Dict<std::string, at::Tensor> toDict(const NamedTensors& tensors) {
  c10::Dict<std::string, at::Tensor> d;
  for (const auto& [name, t] : tensors) d.insert(name, t.detach().contiguous().cpu().clone());
  return d;
}

// Field access that names the field and the file on any mismatch.
class Reader {
 public:
  Reader(const c10::impl::GenericDict& d, const std::string& origin) : d_(d), origin_(origin) {}

  const c10::IValue& field(const std::string& key) const {
    auto it = d_.find(key);
    BIGBATCH_REQUIRE(it != d_.end(), InvalidArgument,
                     "'{}' is not a complete bigbatch checkpoint: field '{}' is missing", origin_,
                     key);
    return it->value();
  }
  int64_t integer(const std::string& key) const {
    const auto& v = field(key);
    BIGBATCH_REQUIRE(v.isInt(), InvalidArgument,
                     "'{}': checkpoint field '{}' is a {}, not an integer", origin_, key,
                     v.tagKind());
    return v.toInt();
  }
  std::string string(const std::string& key) const {
    const auto& v = field(key);
    BIGBATCH_REQUIRE(v.isString(), InvalidArgument,
                     "'{}': checkpoint field '{}' is a {}, not a string", origin_, key,
                     v.tagKind());
    return v.toStringRef();
  }
  NamedTensors tensors(const c10::IValue& v, const std::string& what) const {
    BIGBATCH_REQUIRE(v.isGenericDict(), InvalidArgument,
                     "'{}': checkpoint field '{}' is a {}, not a dict of tensors", origin_, what,
                     v.tagKind());
    NamedTensors out;
    for (const auto& e : v.toGenericDict()) {
      BIGBATCH_REQUIRE(e.key().isString() && e.value().isTensor(), InvalidArgument,
                       "'{}': checkpoint field '{}' has an entry that is not name -> tensor",
                       origin_, what);
      out.emplace_back(e.key().toStringRef(), e.value().toTensor());
    }
    return out;
  }
  std::vector<c10::IValue> list(const std::string& key) const {
    const auto& v = field(key);
    BIGBATCH_REQUIRE(v.isList(), InvalidArgument, "'{}': checkpoint field '{}' is a {}, not a list",
                     origin_, key, v.tagKind());
    return v.toListRef().vec();
  }

 private:
  const c10::impl::GenericDict& d_;
  const std::string& origin_;
};

std::vector<char> readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  BIGBATCH_REQUIRE(in.good(), IoError, "cannot open checkpoint '{}': {}", path,
                   std::strerror(errno));
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

NamedTensors evaluationBuffers(const Checkpoint& c, bool average) {
  BIGBATCH_REQUIRE(!c.rankBuffers.empty(), InvalidArgument,
                   "the checkpoint holds no rank's buffers");
  NamedTensors out;
  for (size_t i = 0; i < c.rankBuffers[0].size(); ++i) {
    const auto& [name, first] = c.rankBuffers[0][i];
    torch::Tensor t = first.clone();
    bool same = true;  // after an evaluation every rank holds the mean already
    for (size_t r = 1; r < c.rankBuffers.size() && same; ++r) {
      same = torch::equal(first, c.rankBuffers[r].at(i).second);
    }
    if (average && !same && t.is_floating_point()) {
      for (size_t r = 1; r < c.rankBuffers.size(); ++r) t.add_(c.rankBuffers[r].at(i).second);
      t.div_(static_cast<double>(c.rankBuffers.size()));
    }
    out.emplace_back(name, t);
  }
  return out;
}

std::vector<char> serializeCheckpoint(const Checkpoint& c) {
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  d.insert("format", std::string(kFormat));
  d.insert("version", Checkpoint::kVersion);
  d.insert("config", c.config);
  if (!c.runDir.empty()) d.insert("run_dir", c.runDir);
  d.insert("world_size", c.worldSize);
  d.insert("global_batch", c.globalBatch);
  d.insert("epoch", c.epoch);
  d.insert("step_in_epoch", c.stepInEpoch);
  d.insert("global_step", c.globalStep);
  d.insert("parameters", toDict(c.parameters));
  c10::List<c10::Dict<std::string, at::Tensor>> buffers;
  for (const auto& b : c.rankBuffers) buffers.push_back(toDict(b));
  d.insert("rank_buffers", buffers);
  c10::List<at::Tensor> rng;
  for (const auto& t : c.rankRng) rng.push_back(t.contiguous().cpu().clone());
  d.insert("rank_rng", rng);
  if (!c.rankCodec.empty()) {
    c10::List<c10::Dict<std::string, at::Tensor>> codec;
    for (const auto& s : c.rankCodec) codec.push_back(toDict(s));
    d.insert("rank_codec", codec);
  }
  d.insert("optimizer", toDict(c.optimizer));
  c10::Dict<std::string, double> counters;
  for (const auto& [k, v] : c.counters) counters.insert(k, v);
  d.insert("counters", counters);
  const std::vector<char> payload = torch::pickle_save(c10::IValue(d));
  std::vector<char> out(kMagic, kMagic + 8);
  appendU64(out, payload.size());
  appendU64(out, fnv1a64(payload.data(), payload.size()));
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

Checkpoint parseCheckpoint(const std::vector<char>& bytes, const std::string& origin) {
  BIGBATCH_REQUIRE(bytes.size() >= kFrameBytes && std::equal(kMagic, kMagic + 8, bytes.begin()),
                   InvalidArgument,
                   "'{}' is not a bigbatch checkpoint (no BBCKPT1 header; a weights-only file goes "
                   "to --init-from instead)",
                   origin);
  const uint64_t length = readU64(bytes.data() + 8), hash = readU64(bytes.data() + 16);
  BIGBATCH_REQUIRE(
      length == bytes.size() - kFrameBytes, InvalidArgument,
      "'{}' is a truncated or torn checkpoint: its header promises {} bytes, it holds {}", origin,
      length, bytes.size() - kFrameBytes);
  const std::vector<char> payload(bytes.begin() + kFrameBytes, bytes.end());
  BIGBATCH_REQUIRE(fnv1a64(payload.data(), payload.size()) == hash, InvalidArgument,
                   "'{}' is a corrupt checkpoint: its checksum does not match its contents",
                   origin);
  c10::IValue value;
  try {
    value = torch::pickle_load(payload);
  } catch (const std::exception& e) {
    BIGBATCH_THROW(InvalidArgument, "'{}' is not a bigbatch checkpoint (unreadable: {})", origin,
                   std::string(e.what()).substr(0, 200));
  }
  BIGBATCH_REQUIRE(value.isGenericDict(), InvalidArgument,
                   "'{}' is not a bigbatch checkpoint (it holds a {}, not a dict)", origin,
                   value.tagKind());
  const auto d = value.toGenericDict();
  for (const auto& e : d) {
    BIGBATCH_REQUIRE(e.key().isString(), InvalidArgument,
                     "'{}' is not a bigbatch checkpoint (a key is a {})", origin,
                     e.key().tagKind());
  }
  Reader r(d, origin);
  const auto format = d.find("format");
  BIGBATCH_REQUIRE(
      format != d.end() && format->value().isString() && format->value().toStringRef() == kFormat,
      InvalidArgument,
      "'{}' is not a bigbatch checkpoint (no format '{}'; a weights-only file goes to "
      "--init-from instead)",
      origin, kFormat);
  const int64_t version = r.integer("version");
  BIGBATCH_REQUIRE(version == Checkpoint::kVersion, InvalidArgument,
                   "'{}' is a version {} checkpoint; this bigbatch reads version {}", origin,
                   version, Checkpoint::kVersion);
  Checkpoint c;
  c.config = r.string("config");
  if (d.contains("run_dir")) c.runDir = r.string("run_dir");
  c.worldSize = r.integer("world_size");
  c.globalBatch = r.integer("global_batch");
  c.epoch = r.integer("epoch");
  c.stepInEpoch = r.integer("step_in_epoch");
  c.globalStep = r.integer("global_step");
  BIGBATCH_REQUIRE(c.worldSize >= 1 && c.globalBatch >= 1 && c.epoch >= 1 && c.stepInEpoch >= 0 &&
                       c.globalStep >= 0,
                   InvalidArgument,
                   "'{}': checkpoint counters are out of range (world_size {}, global_batch {}, "
                   "epoch {}, step_in_epoch {}, global_step {})",
                   origin, c.worldSize, c.globalBatch, c.epoch, c.stepInEpoch, c.globalStep);
  c.parameters = r.tensors(r.field("parameters"), "parameters");
  for (const auto& b : r.list("rank_buffers")) c.rankBuffers.push_back(r.tensors(b, "rank_buffers"));
  for (const auto& t : r.list("rank_rng")) {
    BIGBATCH_REQUIRE(t.isTensor() && t.toTensor().scalar_type() == torch::kUInt8, InvalidArgument,
                     "'{}': checkpoint field 'rank_rng' holds a non-byte entry", origin);
    c.rankRng.push_back(t.toTensor());
  }
  BIGBATCH_REQUIRE(static_cast<int64_t>(c.rankBuffers.size()) == c.worldSize &&
                       static_cast<int64_t>(c.rankRng.size()) == c.worldSize,
                   InvalidArgument,
                   "'{}': checkpoint of {} ranks holds buffers of {} and RNG states of {} ranks",
                   origin, c.worldSize, c.rankBuffers.size(), c.rankRng.size());
  if (d.contains("rank_codec")) {
    for (const auto& s : r.list("rank_codec")) c.rankCodec.push_back(r.tensors(s, "rank_codec"));
    BIGBATCH_REQUIRE(static_cast<int64_t>(c.rankCodec.size()) == c.worldSize, InvalidArgument,
                     "'{}': checkpoint of {} ranks holds codec states of {} ranks", origin,
                     c.worldSize, c.rankCodec.size());
  }
  c.optimizer = r.tensors(r.field("optimizer"), "optimizer");
  const auto& counters = r.field("counters");
  BIGBATCH_REQUIRE(counters.isGenericDict(), InvalidArgument,
                   "'{}': checkpoint field 'counters' is a {}, not a dict", origin,
                   counters.tagKind());
  for (const auto& e : counters.toGenericDict()) {
    BIGBATCH_REQUIRE(e.key().isString() && e.value().isDouble(), InvalidArgument,
                     "'{}': checkpoint field 'counters' has an entry that is not name -> float",
                     origin);
    c.counters[e.key().toStringRef()] = e.value().toDouble();
  }
  return c;
}

void writeCheckpoint(const Checkpoint& c, const std::string& path, const WriteProgress& progress) {
  const std::vector<char> bytes = serializeCheckpoint(c);
  writeFileAtomically(path, bytes.data(), bytes.size(), progress);
}

Checkpoint readCheckpoint(const std::string& path) { return parseCheckpoint(readFile(path), path); }

CheckpointDir::CheckpointDir(std::string dir, int keep) : dir_(std::move(dir)), keep_(keep) {
  BIGBATCH_REQUIRE(keep_ >= 1, InvalidArgument, "ckpt.keep = {} must be at least 1", keep_);
}

namespace {
// ckpt-<step>.pt files in `dir`, oldest first.
std::vector<std::pair<int64_t, std::string>> listCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) != 0 || e.path().extension() != ".pt") continue;
    const std::string digits = name.substr(5, name.size() - 8);
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
    out.emplace_back(std::stoll(digits), e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

std::string CheckpointDir::save(const Checkpoint& c, const WriteProgress& progress) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  BIGBATCH_REQUIRE(!ec, IoError, "cannot create checkpoint directory '{}': {}", dir_, ec.message());
  const std::string name = fmt::format("ckpt-{:09d}.pt", c.globalStep);
  const std::string path = (fs::path(dir_) / name).string();
  writeCheckpoint(c, path, progress);
  // Its writer, beside it (ownerOf reads this instead of the whole file).
  if (!c.runDir.empty()) {
    const std::string owner = c.runDir + "\n";
    writeFileAtomically(path + ".run", owner.data(), owner.size());
  }
  const std::string latest = name + "\n";
  writeFileAtomically((fs::path(dir_) / "latest").string(), latest.data(), latest.size());
  // Only this step and earlier ones compete for the `keep` places.
  auto all = listCheckpoints(dir_);
  all.erase(std::remove_if(all.begin(), all.end(),
                           [&](const auto& k) { return k.first > c.globalStep; }),
            all.end());
  for (size_t i = 0; i + keep_ < all.size(); ++i) {
    fs::remove(all[i].second, ec);
    fs::remove(all[i].second + ".run", ec);
  }
  return path;
}

namespace {
// The run directory a checkpoint file says wrote it: its .run file, else
// (written before 2026-12-06, or the .run lost) the checkpoint itself; ""
// when it does not say or does not read.
std::string ownerOf(const std::string& path) {
  std::ifstream side(path + ".run");
  std::string owner;
  if (std::getline(side, owner) && !owner.empty()) return owner;
  try {
    return readCheckpoint(path).runDir;
  } catch (const Error&) {
    return "";
  }
}
}  // namespace

int CheckpointDir::removeAll(const std::string& owner) {
  int removed = 0;
  std::error_code ec;
  bool othersLeft = false;
  for (const auto& [step, path] : listCheckpoints(dir_)) {
    if (!owner.empty() && ownerOf(path) != owner) {
      othersLeft = true;
      continue;
    }
    removed += fs::remove(path, ec) ? 1 : 0;
    fs::remove(path + ".run", ec);
  }
  std::ifstream latestIn((fs::path(dir_) / "latest").string());
  std::string named;
  latestIn >> named;
  latestIn.close();
  if (!othersLeft || !fs::exists(fs::path(dir_) / named)) fs::remove(fs::path(dir_) / "latest", ec);
  if (othersLeft) return removed;  // a write's leftover may be another run's, in flight
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) == 0 && e.path().extension() == ".tmp") fs::remove(e.path(), ec);
  }
  return removed;
}

std::vector<std::string> CheckpointDir::otherOwners(const std::string& owner) const {
  std::vector<std::string> out;
  for (const auto& [step, path] : listCheckpoints(dir_)) {
    const std::string o = ownerOf(path);
    if (o != owner && std::find(out.begin(), out.end(), o) == out.end()) out.push_back(o);
  }
  return out;
}

std::optional<std::string> CheckpointDir::latest() const {
  auto loads = [](const std::string& path) {
    try {
      readCheckpoint(path);
      return true;
    } catch (const Error&) {
      return false;
    }
  };
  std::ifstream in((fs::path(dir_) / "latest").string());
  std::string name;
  if (in >> name) {
    const std::string path = (fs::path(dir_) / name).string();
    if (name.find('/') == std::string::npos && fs::exists(path) && loads(path)) return path;
  }
  // No usable "latest": the newest written that loads. Not the highest
  // step: a run resumed from an earlier checkpoint keeps the later files of
  // the trajectory it left (save() prunes only steps up to its own).
  auto all = listCheckpoints(dir_);
  // Highest step first, so that among files of one modification time (a
  // coarse clock, a copied directory) the highest step wins.
  std::reverse(all.begin(), all.end());
  std::vector<std::pair<fs::file_time_type, std::string>> byTime;
  for (const auto& [step, path] : all) {
    std::error_code ec;
    const auto written = fs::last_write_time(path, ec);
    if (!ec) byTime.emplace_back(written, path);
  }
  std::stable_sort(byTime.begin(), byTime.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [written, path] : byTime) {
    if (loads(path)) return path;
  }
  return std::nullopt;
}

}  // namespace bigbatch
