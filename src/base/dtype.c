/* Datatype sizes and names, and reduction operator names: what every layer
 * that prints or sizes a buffer needs (base/dtype.h). */
#include "base/dtype.h"

static const struct {
  size_t size;
  const char *name;
} dtype_info[ncclNumTypes] = {
    {1, "ncclInt8"},    {1, "ncclUint8"},    {4, "ncclInt32"},      {4, "ncclUint32"},
    {8, "ncclInt64"},   {8, "ncclUint64"},   {2, "ncclFloat16"},    {4, "ncclFloat32"},
    {8, "ncclFloat64"}, {2, "ncclBfloat16"}, {1, "ncclFloat8e4m3"}, {1, "ncclFloat8e5m2"},
};

size_t weft_dtype_size(ncclDataType_t dt) {
  return (unsigned)dt < ncclNumTypes ? dtype_info[dt].size : 0;
}

const char *weft_dtype_name(ncclDataType_t dt) {
  return (unsigned)dt < ncclNumTypes ? dtype_info[dt].name : "invalid datatype";
}

const char *weft_op_name(ncclRedOp_t op) {
  static const char *const names[ncclNumOps] = {"ncclSum", "ncclProd", "ncclMax", "ncclMin",
                                                "ncclAvg"};
  if ((unsigned)op < ncclNumOps) return names[op];
  return "user-defined op";
}
