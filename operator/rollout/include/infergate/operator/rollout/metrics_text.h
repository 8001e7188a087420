// The Prometheus text exposition format as the rollout reads it from serving pods, and the histogram
// arithmetic of its performance gate: bucket deltas between two scrapes and quantiles interpolated
// within a bucket, the way Prometheus' histogram_quantile() computes them.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/result.h"

namespace infergate::op::rollout {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses text format 0.0.4: comments and blank lines skipped, `name{a="b",...} value [timestamp]`,
// escaped label values, +Inf/-Inf/NaN. A malformed line is an error naming its line number (a pod that
// answers garbage is not measured, rather than measured wrong). Caps: 1,000,000 samples.
Result<std::vector<Sample>> parse_prometheus_text(std::string_view text);

// A cumulative histogram: (upper bound, count of observations <= bound), sorted, +Inf last.
struct Histogram {
  std::vector<std::pair<double, double>> buckets;
  double sum = 0;
  double count = 0;
  bool empty() const { return count <= 0; }
};

// Per label, the values a series may have: a series matches when each listed label has one of its
// values (empty: every series).
using LabelFilter = std::map<std::string, std::vector<std::string>>;

// The histogram `name` (from name_bucket / name_sum / name_count), every series that matches `labels`
// added together. nullopt when the exposition has no such histogram.
std::optional<Histogram> extract_histogram(const std::vector<Sample>& samples, std::string_view name,
                                           const LabelFilter& labels = {});
// The sum of every series of `name` matching `labels` (a counter or gauge); nullopt when there is none.
std::optional<double> sum_of(const std::vector<Sample>& samples, std::string_view name,
                             const LabelFilter& labels = {});

// after - before, bucket by bucket. A counter that went down means the process restarted: then `after`
// is what happened since (Prometheus' rate() treats resets the same way). Buckets are matched by bound.
Histogram delta(const Histogram& before, const Histogram& after);
Histogram add(const Histogram& a, const Histogram& b);

// The q-quantile (0 < q < 1) by linear interpolation inside the bucket holding it; when it falls in
// the +Inf bucket, the largest finite bound. nullopt for an empty histogram.
std::optional<double> quantile(double q, const Histogram& h);

}  // namespace infergate::op::rollout
