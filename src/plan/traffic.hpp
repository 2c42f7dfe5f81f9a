// The communication of one training step, predicted per group and kind (calls and bytes, as the
// counting Comm counts them: parallel/counting_comm.hpp) for the rank at a grid position, from the
// model's layout and the trainer's rules. `meshtrain plan --json` gives it per rank, the step-time
// model (plan/step_time.hpp) prices it, and the traffic test compares it, number for number, with
// what `meshtrain train` counts under `log.traffic` (tests/plan/test_traffic.py).
//
// The rules, each from the code that makes the calls:
//   dp    the loss sum (one double; train/trainer.cpp). ZeRO 0 and dp > 1: one all-reduce per
//         gradient bucket of parallel.bucket_mb, cut from the end of the fp32 gradient buffer (fp32
//         under bf16/fp16 too; state/gradient_reduction.cpp). ZeRO 1: one reduce-scatter of fp32 per
//         shard unit in the step's last pass; ZeRO 2–3: in every micro-batch's backward (the
//         stage's rules: state/zero_stage.hpp). After the update every unit is all-gathered
//         (ZeRO 1–2), or the non-block units (ZeRO 3), in the compute type: fp32, or the 16-bit
//         copy's own gathers in 16 bits (state/working_copy.hpp); ZeRO 3 also gathers blocks
//         (zero3_block_gathers).
//   edp   (parallel.ep > 1) the dp rules' share of the routed experts' units: their buckets (cut
//         apart from the dense units'), reduce-scatters and gathers go over the expert-data-parallel
//         group of dp / ep ranks instead (state/unit_groups.hpp).
//   tp    (tp > 1; model/families/gpt2_*.cpp and llama_*.cpp make the same sums) per micro-batch, of
//         b·T·C elements of the compute type: the vocabulary-parallel embedding (first stage), two
//         per block forward (the row-parallel projections: gpt2's two c_proj, llama's o_proj and
//         down_proj), the head's input gradient (last stage), two per block backward (the inputs
//         of the column-parallel products: c_attn and c_fc, q|k|v and gate|up), one more per
//         block whose forward full recomputation reruns; the vocabulary-parallel loss's row
//         maxima (b·T floats) and partial sums (2·b·T floats) on the last stage.
//         Under parallel.sequence_parallel every end of a region is a collective of the same b·T·C
//         elements (counted whole): an exit (the row-parallel sums, the embedding) a reduce-scatter
//         forward and an all-gather backward, an entry (the norms' outputs, the head's input) the
//         reverse; the embedding's backward gathers only where the embedding trains; a recomputed
//         forward repeats its two entries and its attention's exit; each block's backward sums its
//         norms' weight gradients (gpt2 4·C, llama 2·C elements), the last stage the final norm's.
//         An MoE block's backward also sums its gate weights' gradient, b·T·k floats (the gates
//         are a dot product with this rank's partial expert outputs; model/families/llama_moe.cpp).
//   pp    (pp > 1) the loss sum (one double); every send and receive of the stage's schedule,
//         b·T·C elements of the compute type each, b·T·C / tp under sequence parallelism
//         (train/pipeline_executor.cpp).
//   ep    (parallel.ep > 1) per MoE block of the stage and micro-batch, the token exchange's
//         all-to-alls (model/impl/expert_exchange.hpp), counted as the sender's bytes to the other
//         ranks: forward the kept counts, (ep − 1) · E/ep int64, and two alltoallv of token rows
//         (to the experts' ranks and back), backward two more; a forward that full recomputation
//         reruns repeats its three; under lora.dropout on the routed experts a forward also sends
//         its rows' assignment ids, 2 int64 a row. The rows depend on the routing:
//         planned_exchange_rows.
//   cp    (parallel.cp > 1) the ring of every block's attention (model/impl/context_ring.hpp), per pass:
//         forward cp − 1 K/V blocks sent to the next rank and as many received, each b·T/cp rows of
//         2 · kv_heads/tp · head_size elements of the compute type; backward the same, and cp dK/dV
//         partial sums of as many elements in fp32 (accum_t); a forward that full recomputation
//         reruns goes round again. Under context parallelism every b·T above is a rank's b·T/cp
//         rows, and dp and edp span the replicas (dp × cp, edp × cp ranks: Layout::replicas).
//   tied  (gpt2, pp > 1, first and last stage) one all-reduce of the wte gradient in fp32: the
//         tensor (ZeRO 0) or the rank's shard of its unit (state/model_state.cpp). llama's untied
//         lm_head has no such group (ModelConfig::ties_output_head).
//   LoRA  (model.lora; plan/lora_plan.hpp) dp and edp reduce and gather the adapters' units only
//         (the frozen base has no gradients and is held whole); tp adds per targeted module of
//         each block one all-reduce of b·T·r elements of the compute type, in forward for the
//         row-parallel modules (o_proj, down_proj: again when full recomputation reruns the
//         block), in backward for the column-parallel ones; an MoE block's router none
//         (replicated), its routed experts one per targeted module of planned_received_rows · r
//         elements (down in forward, again when recomputed; gate and up in backward); no tied
//         group.
#pragma once

#include "core/config.hpp"
#include "parallel/counting_comm.hpp"
#include "parallel/topology.hpp"

#include <cstdint>
#include <vector>

namespace meshtrain {

// The loss sums' one double (train/trainer.cpp): dp's and pp's all-reduce of it.
constexpr std::int64_t loss_sum_bytes = 8;

// One block of a pipeline stage as the model asks for it: before its forward or its backward.
struct BlockVisit {
  int block;  // the stage's block index
  bool backward;
};

// ZeRO-3's gather policy (state/block_gatherer.hpp): the blocks gathered, in order, for a step's
// visits to a stage of `blocks` blocks. Two working rooms (one for a one-block stage) hold block b
// in room b mod rooms; a visit gathers its block unless its room holds it, then prefetches the
// next block of its pass the same way — the pass walks up after a lower block, down after a
// higher one, and turns when a block is visited twice in a row. A step starts with no room filled
// (the update's gathers refill only the non-block units), or with `kept` as the same visits left
// them a step before (LoRA's frozen base, whose rooms no update empties).
std::vector<int> zero3_block_gathers(const std::vector<BlockVisit>& visits, int blocks, bool kept = false);

// The rows of b·T = `tokens` tokens that one of an MoE block's four token all-to-alls sends from a
// rank to the other `ep` − 1 ranks of its group (each row C elements of the compute type). The
// routing decides it at run time; the plan assumes an even load: every expert at its capacity when
// model.capacity_factor sets one (min(N·k, E · capacity) rows kept, the rest dropped), else all N·k
// assignments kept, spread evenly over the E experts, so that (ep − 1)/ep of the kept rows belong to
// other ranks' experts and as many come back. Under a capacity that binds (E · capacity ≤ N·k) an
// upper bound — no rank sends another more than capacity rows per expert — reached when every
// expert overflows in every micro-batch; dropless, the mean an unbiased router gives. Under
// model.pad_to_capacity exact: every expert's rows padded to E · capacity, whatever the routing.
std::int64_t planned_exchange_rows(const ModelConfig& model, std::int64_t tokens, int ep);
// The rows a rank's experts receive of an MoE block, under the same even load: the kept rows
// min(N·k, E · capacity) (N·k dropless, E · capacity padded: core/model_sizes.hpp's expert_rows),
// whatever ep (each of the ep senders keeps up to capacity
// rows for each of the rank's E / ep experts). LoRA's routed experts' tp sums are this many rows.
std::int64_t planned_received_rows(const ModelConfig& model, std::int64_t tokens);

// Every call of one step of the rank at `position`, by group and kind. Each count is affine in the
// micro-batches once there are affine_micros(grid) of them (the pipeline's warm-up and cool-down
// whole, every further micro-batch a steady pass like the one before): predicted_traffic
// enumerates the passes of at most affine_micros + 1 micro-batches and extrapolates, so its cost
// does not grow with the accumulation steps (test_planner holds it to enumerated_traffic).
RankTraffic predicted_traffic(const Config& cfg, const Layout& grid, const GridPosition& position);
int affine_micros(const Layout& grid);
// The same with every pass of `micros` micro-batches enumerated: O(micros · blocks).
RankTraffic enumerated_traffic(const Config& cfg, const Layout& grid, const GridPosition& position, int micros);
// The part of the dp and edp all-gathers that ZeRO 1–3 make after the update (every unit the model reads
// whole; ZeRO 3: its non-block units), which the next step's forward waits for: the rest of a ZeRO-3
// step's gathers are its blocks', prefetched (zero3_block_gathers). Empty without sharding.
RankTraffic post_update_gathers(const Config& cfg, const Layout& grid, const GridPosition& position);

}  // namespace meshtrain
