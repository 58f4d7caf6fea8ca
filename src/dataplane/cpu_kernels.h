// Reference kernels on a host arena: plain loops, the oracle the CUDA kernels
// are tested against (byte-identical for append, copy_blocks and gather; within
// tolerance for attention). Arguments and shapes: kernel_params.h.
#pragma once

#include "dataplane/kernel_params.h"

namespace kvreplay {

// Scatters the staging rows into their slots, every layer.
void cpu_append(const ArenaView& arena, const AppendParams& params);

// Copies whole blocks (every layer, every slot), pair by pair.
void cpu_copy_blocks(const ArenaView& arena, const CopyBlocksParams& params);

// Paged -> dense: item i's positions land in rows [out_indptr[i], out_indptr[i+1]).
void cpu_gather(const ArenaView& arena, const PagedBatchView& batch, const GatherParams& params);

// Paged decode attention in fp32 (see AttentionParams).
void cpu_attention(const ArenaView& arena, const PagedBatchView& batch,
                   const AttentionParams& params);

}  // namespace kvreplay
