// TorchScript module files — what Python's `torch.jit.script(model).save(f)`
// (or `torch.jit.trace`) writes — read with the checks a file from a user
// needs, and written back atomically.
//
// A TorchScript file is a zip archive holding the module's code
// (`code/...`), its constants and its tensors. libtorch reads the files of
// its own version and older ones; a newer PyTorch may write operators or
// records this one does not know, so a file is refused, naming both
// versions and the fix, when
//   - its file-format version (`version` record) is above what this libtorch
//     reads, or
//   - it carries the `.data/serialization_id` record that every archive
//     PyTorch 2.1 and newer writes, and this build's libtorch is older than
//     2.1 (the default build: Debian's libtorch 1.13).
// A torch.save file (a state dict, a pickled module) is a zip archive too,
// without code: it is refused as "not TorchScript", with the line that
// makes one.
//
// Thread-compatible: a loaded module belongs to the thread that uses it.
#pragma once

#include <torch/script.h>

#include <string>

#include "bigbatch/ckpt/checkpoint.h"

namespace bigbatch {

// This build's libtorch, "1.13.0".
std::string libtorchVersion();

// Whether `path` is a zip archive with TorchScript code in it (no other
// check; never throws for a readable file).
bool isTorchScriptFile(const std::string& path);

// The module of `path`, its tensors on the CPU, in training mode as saved.
// `what` names the file's role in messages ("model.path", "--init-from").
// Throws InvalidArgument or IoError naming the file, the problem and the fix.
torch::jit::Module loadTorchScript(const std::string& path, const std::string& what);

// The named parameters and buffers of the module in `path` (CPU), in the
// module's order: what `--init-from FILE.jit.pt` copies into a model.
NamedTensors readTorchScriptTensors(const std::string& path, const std::string& what);

// Writes `module` to `path` atomically (temporary file, fsync, rename).
void saveTorchScript(const torch::jit::Module& module, const std::string& path);

}  // namespace bigbatch
