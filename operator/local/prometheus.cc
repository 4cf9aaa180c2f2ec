#include "operator/local/prometheus.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "nlohmann/json.hpp"

namespace antdt::local {

absl::Status WriteScrapeTargets(const std::string& path, const std::vector<ScrapeTarget>& targets) {
  nlohmann::json groups = nlohmann::json::array();
  for (const ScrapeTarget& t : targets) {
    groups.push_back({{"targets", {t.address}}, {"labels", t.labels}});
  }
  return WriteFileAtomically(path, groups.dump(2) + "\n");
}

std::string LocalPrometheusConfig(const std::string& targets_path, const std::string& rules_path) {
  // JSON is YAML: the paths are quoted whatever they hold.
  std::string config = absl::StrCat(
      "# Written by antdt run: the job's processes, scraped each second.\n"
      "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n",
      "scrape_configs:\n  - job_name: antdt-local\n    honor_labels: true\n"
      "    file_sd_configs:\n      - files: [",
      nlohmann::json(targets_path).dump(), "]\n        refresh_interval: 1s\n");
  if (!rules_path.empty()) {
    absl::StrAppend(&config, "rule_files: [", nlohmann::json(rules_path).dump(), "]\n");
  }
  return config;
}

std::string ShippedRulesFile(const std::string& bin_dir) {
  const std::filesystem::path p =
      std::filesystem::path(bin_dir) / ".." / "share" / "antdt" / "antdt-rules.yaml";
  std::error_code ec;
  return std::filesystem::exists(p, ec) ? std::filesystem::weakly_canonical(p, ec).string() : "";
}

}  // namespace antdt::local
