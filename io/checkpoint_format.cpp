// The checkpoint format both directions share (see checkpoint_format.hpp).
#include "io/checkpoint_format.hpp"

#include <zlib.h>

#include <cstring>

#include "core/error.hpp"
#include "io/crc32.hpp"

namespace shardtrain {
namespace ckpt {

std::string check_precision(const std::string& precision) {
  if (enum_named<PrecisionMode>(precision)) return {};
  return "is '" + precision + "', expected fp32, fp16 or bf16";
}

std::string check_loss_scale(double loss_scale) {
  if (loss_scale > 0 && loss_scale <= 3.4e38) return {};
  return "must be a positive finite float, got " + std::to_string(loss_scale);
}

std::uint32_t crc_of(const void* p, std::uint64_t bytes, std::uint32_t crc) {
  return crc32_ieee(crc, p, static_cast<std::size_t>(bytes));
}

void CrcPiece::add(const void* p, std::uint64_t n) {
  if (n == 0) return;
  const std::uint32_t c = crc_of(p, n);
  crc = bytes == 0 ? c : static_cast<std::uint32_t>(crc32_combine(crc, c, static_cast<z_off_t>(n)));
  bytes += n;
}

std::vector<CrcPiece> combine_pieces(MPI_Comm comm, const std::vector<CrcPiece>& mine) {
  int n = 1;
  MPI_Comm_size(comm, &n);
  const std::size_t k = mine.size();
  std::vector<std::uint64_t> send(2 * k), all(2 * k * static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < k; ++i) {
    send[2 * i] = mine[i].crc;
    send[2 * i + 1] = mine[i].bytes;
  }
  if (k > 0)
    MPI_Allgather(send.data(), static_cast<int>(2 * k), MPI_UINT64_T, all.data(), static_cast<int>(2 * k),
                  MPI_UINT64_T, comm);
  std::vector<CrcPiece> out(k);
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < k; ++i) {
      const std::uint64_t c = all[(static_cast<std::size_t>(r) * k + i) * 2];
      const std::uint64_t b = all[(static_cast<std::size_t>(r) * k + i) * 2 + 1];
      if (b == 0) continue;
      out[i].crc = out[i].bytes == 0
                       ? static_cast<std::uint32_t>(c)
                       : static_cast<std::uint32_t>(crc32_combine(out[i].crc, static_cast<uLong>(c),
                                                                  static_cast<z_off_t>(b)));
      out[i].bytes += b;
    }
  return out;
}

H5Datatype make_type(DType t) {
  SHARDTRAIN_CHECK(t == DType::F32 || t == DType::F16 || t == DType::BF16,
                   "a checkpoint's state vectors hold float32, float16 or bfloat16");
  H5Datatype ft(SHARDTRAIN_H5_CHECK(H5Tcopy(H5T_IEEE_F32LE)));
  if (t == DType::F16) {  // IEEE binary16: what h5py and numpy call float16
    SHARDTRAIN_H5_CHECK(H5Tset_fields(ft, 15, 10, 5, 0, 10));
    SHARDTRAIN_H5_CHECK(H5Tset_size(ft, 2));
    SHARDTRAIN_H5_CHECK(H5Tset_ebias(ft, 15));
  } else if (t == DType::BF16) {  // bfloat16: the top half of an fp32
    SHARDTRAIN_H5_CHECK(H5Tset_fields(ft, 15, 7, 8, 0, 7));
    SHARDTRAIN_H5_CHECK(H5Tset_size(ft, 2));
    SHARDTRAIN_H5_CHECK(H5Tset_ebias(ft, 127));
  }
  return ft;
}

std::optional<DType> type_of(hid_t t) {
  if (H5Tget_class(t) != H5T_FLOAT) return std::nullopt;
  if (H5Tget_order(t) != H5T_ORDER_LE) return std::nullopt;
  size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  if (H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) < 0) return std::nullopt;
  const size_t size = H5Tget_size(t), bias = H5Tget_ebias(t);
  if (size == 4 && spos == 31 && esize == 8 && msize == 23 && bias == 127 && mpos == 0)
    return DType::F32;
  if (size == 2 && spos == 15 && esize == 5 && msize == 10 && bias == 15 && mpos == 0)
    return DType::F16;
  if (size == 2 && spos == 15 && esize == 8 && msize == 7 && bias == 127 && mpos == 0)
    return DType::BF16;
  return std::nullopt;
}

void select_range(hid_t space, std::int64_t lo, std::int64_t hi) {
  if (hi <= lo) {
    SHARDTRAIN_H5_CHECK(H5Sselect_none(space));
    return;
  }
  const hsize_t start = static_cast<hsize_t>(lo), count = static_cast<hsize_t>(hi - lo);
  SHARDTRAIN_H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, nullptr, &count, nullptr));
}

}  // namespace ckpt

std::uint32_t checkpoint_meta_crc(const CheckpointMeta& m) {
  // "name=value\n" per root attribute, in file order; doubles by their bit pattern.
  struct Text {
    std::string text;
    void i64(const char* name, std::int64_t v, std::int64_t = 0, std::int64_t = 0) {
      text += std::string(name) + "=" + std::to_string(v) + "\n";
    }
    void u64(const char* name, std::uint64_t v) { i64(name, static_cast<std::int64_t>(v)); }
    void f64(const char* name, double v, std::string (*)(double)) {
      std::uint64_t bits = 0;
      std::memcpy(&bits, &v, sizeof bits);
      i64(name, static_cast<std::int64_t>(bits));
    }
    void str(const char* name, const std::string& v, std::string (*)(const std::string&) = nullptr) {
      text += std::string(name) + "=" + v + "\n";
    }
    void optional_str(const char* name, const std::string& v) { str(name, v); }
  } t;
  t.str("format", std::string(kCheckpointFormat));
  t.i64("schema_version", kCheckpointSchema);
  ckpt::visit_meta(m, t);
  return ckpt::crc_of(t.text.data(), t.text.size());
}

}  // namespace shardtrain
