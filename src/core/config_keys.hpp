// The run configuration's keys as one table of data (core/config_keys.cpp): per key its name, the
// field it binds (and so its type, and its default as a default-constructed Config holds it), the
// values it may take, the setting it belongs to and its `--help` text. Boost's option table and
// `--help` (core/config.cpp), the INI that checkpoints store (Config::to_ini), `meshtrain config
// --get` (config_value) and the checks (core/config_checks.cpp) all read this one table, so none of
// them can know a key that another lacks.
#pragma once

#include "core/config.hpp"

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <variant>

namespace meshtrain {

// The values a number key may take; the checks refuse any other, naming the key, its value and the
// range. NaN lies outside every bound, so a key with a range never takes it.
struct KeyRange {
  static constexpr double unbounded = std::numeric_limits<double>::infinity();
  double min = -unbounded;
  double max = unbounded;
  bool min_open = false;  // min itself refused: (min, …
  bool max_open = false;  // max itself refused: …, max)
  bool finite = false;    // ±inf refused (an integer is finite anyway)
  const char* note = "";  // what a special value means, "(0: off)": added to the refusal's message
};

// The setting a key belongs to. Where its setting is off the key is read by nothing, so the checks
// hold it at its default (a llama key under gpt2, a [lora] key under lora.rank = 0: not even given),
// since a value there says the run is not the one its author meant.
enum class KeyFamily {
  always,
  llama,         // a family with llama's keys (model.arch = llama)
  moe,           // within llama: model.experts > 0
  rope_scaling,  // within llama: model.rope_scaling = linear or llama3
  rope_llama3,   // within rope_scaling: model.rope_scaling = llama3
  lora,          // lora.rank > 0
};

template <class... T>
struct FieldTypes {
  using Pointer = std::variant<T*...>;
  using ConstPointer = std::variant<const T*...>;
};
// Every type a key's field has, one alternative each: a visit of a key's field is one generic lambda,
// instantiated once per type.
using KeyFieldTypes = FieldTypes<int, std::int64_t, double, bool, std::string, Arch, AttentionKernel, RopeScaling,
                                 Precision, Recompute, NonFinite, LrDecay, PipelineSchedule, CommBackend, SampleOrder,
                                 OverlongRecords, TokenizerChange, CheckpointIo, ResumeFrom>;

struct ConfigKey {
  const char* name;  // "section.key": the INI's [section] and key, the command line's --section.key
  KeyFieldTypes::Pointer (*field)(Config&);
  KeyFieldTypes::ConstPointer (*value)(const Config&);
  KeyRange range;  // number keys only; the others take whatever their type parses
  KeyFamily family;
  const char* help;  // a choice key's has a {} where its names go (key_help)
};

// The keys in `--help` order, which is also their order within an INI section.
std::span<const ConfigKey> config_keys();

// The key named `name` exactly, or null.
const ConfigKey* find_config_key(std::string_view name);

// The key's value in `c` as the INI writes it: fmt's "{}", the shortest text that reads back the same.
std::string key_value_text(const ConfigKey& key, const Config& c);

// Whether the key's value in `c` equals its value in a default-constructed Config.
bool at_default(const ConfigKey& key, const Config& c);

// The key's `--help` text, a choice key's names filled in. The storage lasts as long as the program:
// Boost's option table keeps the pointer.
const char* key_help(const ConfigKey& key);

}  // namespace meshtrain
