// Micro-batch assembly from windows of the token stream.
#include "train/batch_loader.hpp"

namespace meshtrain {

BatchLoader::BatchLoader(const io::TokenStream& stream, DataOrder& order, int micro_batch, int seq_len, int first_micro)
    : stream_(stream),
      order_(order),
      micro_batch_(micro_batch),
      seq_len_(seq_len),
      first_micro_(first_micro),
      window_("meshtrain::data::window", seq_len + 1),
      inputs_("meshtrain::data::inputs", std::size_t(micro_batch) * seq_len),
      targets_("meshtrain::data::targets", std::size_t(micro_batch) * seq_len),
      host_inputs_(Kokkos::create_mirror_view(inputs_)),
      host_targets_(Kokkos::create_mirror_view(targets_)) {}

void BatchLoader::load(std::int64_t step, int micro) {
  const std::size_t T = seq_len_;
  for (int b = 0; b < micro_batch_; ++b) {
    const std::uint64_t w = order_.window(step, (first_micro_ + micro) * micro_batch_ + b);
    stream_.copy(w * T, T + 1, window_.data());
    for (std::size_t t = 0; t < T; ++t) {
      host_inputs_(b * T + t) = window_(t);
      host_targets_(b * T + t) = window_(t + 1);
    }
  }
  Kokkos::deep_copy(inputs_, host_inputs_);
  Kokkos::deep_copy(targets_, host_targets_);
}

}  // namespace meshtrain
