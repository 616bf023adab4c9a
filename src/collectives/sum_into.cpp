// The reduction kernel of the collectives. Plain loops on purpose: it runs on
// the communication thread and must not enter libtorch's OpenMP pool, which
// belongs to the compute thread (an ATen add_ on a multi-MB buffer would).
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/common/error.h"

namespace bigbatch {
namespace {

template <typename T>
void sumLowPrecision(void* dst, const void* src, size_t count) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  for (size_t i = 0; i < count; ++i) d[i] = T(static_cast<float>(d[i]) + static_cast<float>(s[i]));
}

template <typename T>
void sumPlain(void* dst, const void* src, size_t count) {
  T* __restrict d = static_cast<T*>(dst);
  const T* __restrict s = static_cast<const T*>(src);
  for (size_t i = 0; i < count; ++i) d[i] += s[i];
}

}  // namespace

void sumInto(DataType type, void* dst, const void* src, size_t count) {
  switch (type) {
    case DataType::kFloat32: return sumPlain<float>(dst, src, count);
    case DataType::kBFloat16: return sumLowPrecision<c10::BFloat16>(dst, src, count);
    case DataType::kFloat16: return sumLowPrecision<c10::Half>(dst, src, count);
    case DataType::kInt64: return sumPlain<int64_t>(dst, src, count);
    case DataType::kUInt8: return sumPlain<uint8_t>(dst, src, count);
  }
  BIGBATCH_THROW(InvalidArgument, "sumInto: unknown type {}", static_cast<int>(type));
}

}  // namespace bigbatch
