#include "bigbatch/ckpt/torchscript_file.h"

#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/versions.h>
#include <torch/version.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>

#include "bigbatch/ckpt/atomic_file.h"
#include "bigbatch/common/error.h"

namespace bigbatch {
namespace {

// PyTorch 2.1 and newer end every archive with this record; 1.13 never
// writes it (caffe2/serialize/inline_container.h, kSerializationIdRecordName).
constexpr const char* kSerializationIdRecord = ".data/serialization_id";
constexpr bool kReadsSerializationId = TORCH_VERSION_MAJOR > 2 ||
                                       (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1);

std::string firstLine(const std::string& text) {
  const size_t end = text.find('\n');
  return end == std::string::npos ? text : text.substr(0, end);
}

std::string saveHint() {
  return "save the module from Python with torch.jit.script(model).save(FILE) (or "
         "torch.jit.trace(model, example).save(FILE))";
}

std::string newerPyTorchFix() {
  return fmt::format(
      "script and save it with PyTorch {} (the default build's: Debian's python3-torch, "
      "/usr/bin/python3), or build bigbatch's CUDA variant against that newer PyTorch's "
      "libtorch (docs/GPU.md)",
      libtorchVersion());
}

// What a zip archive holds, as far as telling a module from other files
// goes.
struct ArchiveFacts {
  bool code = false;             // code/...: TorchScript's source
  bool constants = false;        // constants.pkl
  bool serializationId = false;  // PyTorch >= 2.1's end-of-archive record
};

// Whether a record name (as this libtorch lists it: relative to the
// archive's folder, or with the folder) lies under code/.
bool underCode(const std::string& name) {
  if (name.rfind("code/", 0) == 0) return true;
  const size_t slash = name.find('/');
  return slash != std::string::npos && name.compare(slash + 1, 5, "code/") == 0;
}

// The archive's facts, or nullopt when the file is not a zip archive at
// all. Throws for a format version this libtorch cannot read.
std::optional<ArchiveFacts> readArchive(const std::string& path, const std::string& what) {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    if (message.find("maximum supported version") != std::string::npos) {
      BIGBATCH_THROW(InvalidArgument,
                     "{} '{}' was saved by a PyTorch newer than this build's libtorch {} ({}); {}",
                     what, path, libtorchVersion(), firstLine(message), newerPyTorchFix());
    }
    return std::nullopt;
  }
  ArchiveFacts facts;
  for (const std::string& name : reader->getAllRecords())
    facts.code = facts.code || underCode(name);
  facts.constants = reader->hasRecord("constants.pkl");
  facts.serializationId = reader->hasRecord(kSerializationIdRecord);
  return facts;
}

// Everything about the file that can be said before libtorch parses it.
void checkArchive(const std::string& path, const std::string& what) {
  BIGBATCH_REQUIRE(std::filesystem::is_regular_file(path), IoError,
                   "{} '{}' does not exist or is not a file; {}", what, path, saveHint());
  const auto facts = readArchive(path, what);
  BIGBATCH_REQUIRE(facts.has_value(), InvalidArgument,
                   "{} '{}' is not a TorchScript file (not a zip archive); {}", what, path,
                   saveHint());
  BIGBATCH_REQUIRE(facts->code && facts->constants, InvalidArgument,
                   "{} '{}' is a torch.save file (a state dict or a pickled module), not a "
                   "TorchScript module: it holds no code; {}",
                   what, path, saveHint());
  BIGBATCH_REQUIRE(kReadsSerializationId || !facts->serializationId, InvalidArgument,
                   "{} '{}' was saved by PyTorch 2.1 or newer (it has the '{}' record those "
                   "versions write), which is newer than this build's libtorch {}; {}",
                   what, path, kSerializationIdRecord, libtorchVersion(), newerPyTorchFix());
}

}  // namespace

std::string libtorchVersion() { return TORCH_VERSION; }

bool isTorchScriptFile(const std::string& path) {
  try {
    const auto facts = readArchive(path, path);
    return facts && facts->code;
  } catch (const Error&) {
    return true;  // a TorchScript archive of a newer format: loadTorchScript says so
  }
}

torch::jit::Module loadTorchScript(const std::string& path, const std::string& what) {
  checkArchive(path, what);
  try {
    return torch::jit::load(path, torch::Device(torch::kCPU));
  } catch (const c10::Error& e) {
    BIGBATCH_THROW(InvalidArgument,
                   "{} '{}': this build's libtorch {} cannot load the TorchScript module ({}); "
                   "if a newer PyTorch saved it, {}",
                   what, path, libtorchVersion(), firstLine(e.what_without_backtrace()),
                   newerPyTorchFix());
  }
}

NamedTensors readTorchScriptTensors(const std::string& path, const std::string& what) {
  const torch::jit::Module module = loadTorchScript(path, what);
  NamedTensors out;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    out.emplace_back(p.name, p.value.detach());
  }
  for (const auto& b : module.named_buffers(/*recurse=*/true)) {
    out.emplace_back(b.name, b.value.detach());
  }
  return out;
}

void saveTorchScript(const torch::jit::Module& module, const std::string& path) {
  std::ostringstream bytes;
  module.save(bytes);
  const std::string data = std::move(bytes).str();
  writeFileAtomically(path, data.data(), data.size());
}

}  // namespace bigbatch
