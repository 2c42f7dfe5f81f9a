// CheckpointReader's root attributes: strings, integers and reals, and their names.
#include "io/checkpoint/impl/hdf5_selection.hpp"
#include "io/checkpoint/impl/reader_impl.hpp"

#include <algorithm>
#include <cstring>
#include <optional>

namespace meshtrain::io {
namespace {

using detail::class_name;

herr_t collect_attribute(hid_t /*location*/, const char* name, const H5A_info_t* /*info*/, void* data) {
  try {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  } catch (...) {
    return -1;
  }
  return 0;
}

// The attribute, or nothing; InputError if it does not hold exactly one value.
std::optional<h5::Attribute> open_attribute(hid_t file, const std::string& path, const std::string& name) {
  if (MESHTRAIN_H5_CHECK(H5Aexists(file, name.c_str()), "attribute names must be non-empty") <= 0) return std::nullopt;
  h5::Attribute attr{MESHTRAIN_H5_CHECK(H5Aopen(file, name.c_str(), H5P_DEFAULT), "damaged file?")};
  h5::Dataspace space{MESHTRAIN_H5_CHECK(H5Aget_space(attr.get()), "damaged file?")};
  const hssize_t n = MESHTRAIN_H5_CHECK(H5Sget_simple_extent_npoints(space.get()), "damaged file?");
  if (n != 1) input_error("{}: attribute {} holds {} values, expected one", path, name, n);
  return attr;
}

}  // namespace

std::optional<std::string> CheckpointReader::string_attribute(const std::string& name) const {
  return impl_->guarded(path_, [&]() -> std::optional<std::string> {
    const auto attr = open_attribute(impl_->file.get(), path_, name);
    if (!attr) return std::nullopt;
    h5::Datatype type{MESHTRAIN_H5_CHECK(H5Aget_type(attr->get()), "damaged file?")};
    const H5T_class_t cls = H5Tget_class(type.get());
    if (cls != H5T_STRING) input_error("{}: attribute {} is {}, expected a string", path_, name, class_name(cls));
    if (MESHTRAIN_H5_CHECK(H5Tis_variable_str(type.get()), "damaged file?") > 0) {
      h5::Datatype memory{MESHTRAIN_H5_CHECK(H5Tcopy(H5T_C_S1), "out of memory?")};
      MESHTRAIN_H5_CHECK(H5Tset_size(memory.get(), H5T_VARIABLE), "internal: string type");
      MESHTRAIN_H5_CHECK(H5Tset_cset(memory.get(), H5Tget_cset(type.get())), "internal: string type");
      char* text = nullptr;
      MESHTRAIN_H5_CHECK(H5Aread(attr->get(), memory.get(), &text), "damaged file?");
      std::string value = text != nullptr ? text : "";
      H5free_memory(text);
      return value;
    }
    const std::size_t size = H5Tget_size(type.get());
    if (size == 0) input_error("{}: attribute {} is a string of size 0", path_, name);
    std::string buffer(size, '\0');
    MESHTRAIN_H5_CHECK(H5Aread(attr->get(), type.get(), buffer.data()), "damaged file?");
    buffer.resize(std::strlen(buffer.c_str()));  // fixed-length strings are NUL-padded or terminated
    if (H5Tget_strpad(type.get()) == H5T_STR_SPACEPAD) buffer.erase(buffer.find_last_not_of(' ') + 1);
    return buffer;
  });
}

std::optional<std::int64_t> CheckpointReader::int_attribute(const std::string& name) const {
  return impl_->guarded(path_, [&]() -> std::optional<std::int64_t> {
    const auto attr = open_attribute(impl_->file.get(), path_, name);
    if (!attr) return std::nullopt;
    h5::Datatype type{MESHTRAIN_H5_CHECK(H5Aget_type(attr->get()), "damaged file?")};
    const H5T_class_t cls = H5Tget_class(type.get());
    if (cls != H5T_INTEGER) input_error("{}: attribute {} is {}, expected an integer", path_, name, class_name(cls));
    std::int64_t value = 0;
    MESHTRAIN_H5_CHECK(H5Aread(attr->get(), H5T_NATIVE_INT64, &value), "damaged file?");
    return value;
  });
}

std::optional<double> CheckpointReader::double_attribute(const std::string& name) const {
  return impl_->guarded(path_, [&]() -> std::optional<double> {
    const auto attr = open_attribute(impl_->file.get(), path_, name);
    if (!attr) return std::nullopt;
    h5::Datatype type{MESHTRAIN_H5_CHECK(H5Aget_type(attr->get()), "damaged file?")};
    const H5T_class_t cls = H5Tget_class(type.get());
    if (cls != H5T_FLOAT && cls != H5T_INTEGER) {
      input_error("{}: attribute {} is {}, expected a number", path_, name, class_name(cls));
    }
    double value = 0;
    MESHTRAIN_H5_CHECK(H5Aread(attr->get(), H5T_NATIVE_DOUBLE, &value), "damaged file?");
    return value;
  });
}

std::vector<std::string> CheckpointReader::attribute_names() const {
  return impl_->guarded(path_, [&] {
    std::vector<std::string> names;
    hsize_t index = 0;
    MESHTRAIN_H5_CHECK(H5Aiterate2(impl_->file.get(), H5_INDEX_NAME, H5_ITER_INC, &index, collect_attribute, &names),
                       "damaged file?");
    std::sort(names.begin(), names.end());
    return names;
  });
}

}  // namespace meshtrain::io
