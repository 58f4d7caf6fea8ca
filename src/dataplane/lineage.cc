#include "dataplane/lineage.h"

#include <algorithm>
#include <cassert>

namespace kvreplay {

Lineage::Lineage(const Lineage& source, std::uint32_t length, std::uint32_t writer)
    : writer_(writer) {
  assert(length <= source.length());
  for (const WriterRun& run : source.runs_) {
    if (run.begin >= length) break;
    runs_.push_back({run.begin, std::min(run.end, length), run.writer});
  }
}

void Lineage::append(std::uint32_t tokens) {
  if (tokens == 0) return;
  const std::uint32_t begin = length();
  if (!runs_.empty() && runs_.back().writer == writer_) {
    runs_.back().end += tokens;
  } else {
    runs_.push_back({begin, begin + tokens, writer_});
  }
}

void Lineage::adopt(std::span<const WriterRun> runs) {
  for (const WriterRun& run : runs) {
    assert(run.begin == length() && run.end > run.begin);
    if (!runs_.empty() && runs_.back().writer == run.writer) {
      runs_.back().end = run.end;
    } else {
      runs_.push_back(run);
    }
  }
}

std::vector<WriterRun> Lineage::runs_between(std::uint32_t begin, std::uint32_t end) const {
  assert(begin < end && end <= length());
  std::vector<WriterRun> out;
  auto it = std::upper_bound(runs_.begin(), runs_.end(), begin,
                             [](std::uint32_t p, const WriterRun& run) { return p < run.end; });
  for (; it != runs_.end() && it->begin < end; ++it) {
    out.push_back({std::max(it->begin, begin), std::min(it->end, end), it->writer});
  }
  return out;
}

std::uint32_t Lineage::writer_at(std::uint32_t position) const {
  assert(position < length());
  auto it = std::upper_bound(runs_.begin(), runs_.end(), position,
                             [](std::uint32_t p, const WriterRun& run) { return p < run.end; });
  return it->writer;
}

bool Lineage::check() const {
  std::uint32_t expected_begin = 0;
  for (std::size_t i = 0; i < runs_.size(); ++i) {
    const WriterRun& run = runs_[i];
    if (run.begin != expected_begin || run.end <= run.begin || run.writer == 0) return false;
    if (i > 0 && runs_[i - 1].writer == run.writer) return false;
    expected_begin = run.end;
  }
  return true;
}

}  // namespace kvreplay
