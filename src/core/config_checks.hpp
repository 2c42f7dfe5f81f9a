// The checks a run configuration passes before anything runs (core/config_checks.cpp): each key's
// range and family from the table (core/config_keys.hpp), then the rules that tie keys together.
#pragma once

#include "core/config.hpp"

#include <functional>
#include <set>
#include <string>

namespace meshtrain {

// The keys given on the command line or in the config file, whatever their values (empty for a
// stored config, which lists every key).
using GivenKeys = std::set<std::string, std::less<>>;

// Throws InputError naming the key and its value (and the valid ones, or the key it disagrees
// with) for the first key that is out of its range, outside its family, or at odds with another.
void check_config(const Config& c, const GivenKeys& given);

// InputError where parallel.cp > 1 cannot split this model's sequences (check_config applies it; `plan
// --search` asks it of each candidate): 2·cp must divide model.seq_len and attention be fused.
void check_context_parallel(const Config& c);
// InputError where parallel.schedule = zb-h1 meets what does not split its backward (experts, LoRA); `plan
// --search` asks it before trying the schedule.
void check_pipeline_schedule(const Config& c);

}  // namespace meshtrain
