// A local job seen in Prometheus: the targets of every process that serves
// /metrics (file-based service discovery) and Debian's prometheus on them.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace antdt::local {

struct ScrapeTarget {
  std::string address;                        // HOST:PORT of /metrics
  std::map<std::string, std::string> labels;  // e.g. component=agent, node=node-1
};

// `targets` in the file_sd format (a JSON list of {targets, labels}), written
// atomically: Prometheus rereads the file when it changes.
absl::Status WriteScrapeTargets(const std::string& path, const std::vector<ScrapeTarget>& targets);

// prometheus.yml for a local job: every target of `targets_path` scraped each
// second with its own `job` and `namespace` labels kept (honor_labels) and no
// `job` label of the scrape's (a series without its own, such as a node's,
// has none: `job` always names an AntDTJob), the rules of `rules_path` (none
// when empty) evaluated each second.
std::string LocalPrometheusConfig(const std::string& targets_path, const std::string& rules_path);

// The HTTP API path of a query that counts the targets Prometheus has
// scraped and found up (count(up == 1)), and that count from its answer (0
// when there is none, or the answer is not one).
std::string ScrapedTargetsPath();
int ScrapedTargets(const std::string& answer);

// The rule file shipped beside the binaries (<bin_dir>/../share/antdt/
// antdt-rules.yaml); empty when there is none.
std::string ShippedRulesFile(const std::string& bin_dir);

}  // namespace antdt::local
