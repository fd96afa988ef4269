// The per-kernel-kind summary of decode_step_bench --ktrace: from the trace records of several
// replays of one step's graph (kernels/ktrace.h), the mean time of each segment of a kind's
// launches. Host only.   Test: tests/unit/cuda/ktrace_report_test.cpp
#pragma once

#include <string>
#include <vector>

#include "backends/cuda/kernels/ktrace.h"

namespace flint::cuda {

// Means in microseconds over every launch of the kind in every replay.
struct KTraceRow {
  std::string kind;     // "tag grid.x x grid.y x grid.z"
  double per_step = 0;  // launches per replay
  double prologue = 0;  // start -> wait begin (before the PDL wait)
  double wait = 0;      // wait begin -> wait end
  double seg[3] = {};   // wait end -> mark A -> mark B -> mark C (an unset mark: 0)
  double tail = 0;      // last mark (or wait end) -> end
  double to_next = 0;   // end -> the next launch's wait end (stragglers and the hand-off)
  // to_next in two, over the cycles whose next record read the latest warp end (prev_last_end):
  double straggle = 0;  // the recording block's end -> the launch's last warp end
  double handoff = 0;   // the last warp end -> the next launch's wait end
  int split_cycles = 0;
  // The recording block's start relative to the previous launch's last warp end (its own
  // prev_last_end), signed: negative when it started while that launch still ran (an early PDL
  // launch), positive when it got an SM only after. Over the launches that read prev_last_end.
  double start_after_prev = 0;
  int start_cycles = 0;
  double cycle = 0;  // wait end -> the next launch's wait end: what the launch costs the step
  int cycles = 0;    // launches that had a next one (those cycle and to_next average over)
};

// `replays`: each replay's records in the order they were taken. Kinds in order of first launch.
std::vector<KTraceRow> summarize_ktrace(const std::vector<std::vector<KTraceRecord>>& replays);

}  // namespace flint::cuda
