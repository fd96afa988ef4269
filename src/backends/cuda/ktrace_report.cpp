#include "backends/cuda/ktrace_report.h"

#include <fmt/format.h>

#include <cstdint>
#include <map>

namespace flint::cuda {

std::vector<KTraceRow> summarize_ktrace(const std::vector<std::vector<KTraceRecord>>& replays) {
  std::vector<KTraceRow> rows;
  std::map<std::string, size_t> index;
  auto us = [](uint64_t from, uint64_t to) {
    return from != 0 && to >= from ? static_cast<double>(to - from) * 1e-3 : 0.0;
  };
  for (const auto& recs : replays) {
    for (size_t i = 0; i < recs.size(); ++i) {
      const KTraceRecord& r = recs[i];
      const std::string kind = fmt::format("{} {}x{}x{}", ktag_name(static_cast<KTag>(r.tag)),
                                           r.grid_x, r.grid_y, r.grid_z);
      auto [it, fresh] = index.try_emplace(kind, rows.size());
      if (fresh) rows.push_back(KTraceRow{kind});
      KTraceRow& row = rows[it->second];
      row.per_step += 1;
      const uint64_t* t = r.t;
      row.prologue += us(t[kKtStart], t[kKtWaitBegin]);
      row.wait += us(t[kKtWaitBegin], t[kKtWaitEnd]);
      uint64_t last = t[kKtWaitEnd];
      for (int m = 0; m < 3; ++m) {
        const uint64_t v = t[kKtMarkA + m];
        if (v == 0) continue;
        row.seg[m] += us(last, v);
        last = v;
      }
      row.tail += us(last, t[kKtEnd]);
      if (r.prev_last_end != 0 && t[kKtStart] != 0) {
        row.start_after_prev +=
            static_cast<double>(static_cast<int64_t>(t[kKtStart] - r.prev_last_end)) * 1e-3;
        row.start_cycles += 1;
      }
      if (i + 1 < recs.size() && recs[i + 1].t[kKtWaitEnd] != 0) {
        const uint64_t next = recs[i + 1].t[kKtWaitEnd];
        row.to_next += us(t[kKtEnd], next);
        row.cycle += us(t[kKtWaitEnd], next);
        row.cycles += 1;
        const uint64_t last = recs[i + 1].prev_last_end;
        if (last != 0 && last >= t[kKtEnd] && last <= next) {
          row.straggle += us(t[kKtEnd], last);
          row.handoff += us(last, next);
          row.split_cycles += 1;
        }
      }
    }
  }
  for (KTraceRow& row : rows) {
    const double n = row.per_step;
    row.prologue /= n;
    row.wait /= n;
    for (double& s : row.seg) s /= n;
    row.tail /= n;
    if (row.cycles > 0) {
      row.to_next /= row.cycles;
      row.cycle /= row.cycles;
    }
    if (row.start_cycles > 0) row.start_after_prev /= row.start_cycles;
    if (row.split_cycles > 0) {
      row.straggle /= row.split_cycles;
      row.handoff /= row.split_cycles;
    }
    row.per_step = replays.empty() ? 0 : n / static_cast<double>(replays.size());
  }
  return rows;
}

}  // namespace flint::cuda
