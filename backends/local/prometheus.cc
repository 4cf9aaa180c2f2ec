#include "backends/local/prometheus.h"

#include <filesystem>

#include "absl/strings/numbers.h"
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
      "scrape_configs:\n  - job_name: antdt-local\n    honor_labels: true\n",
      "    # `job` is the AntDTJob's: the series that have one keep it (honor_labels),\n"
      "    # the others (nodes, agents, the Monitor's ingest) get none from the scrape.\n"
      "    relabel_configs:\n      - action: labeldrop\n        regex: job\n",
      "    file_sd_configs:\n      - files: [", nlohmann::json(targets_path).dump(),
      "]\n        refresh_interval: 1s\n");
  if (!rules_path.empty()) {
    absl::StrAppend(&config, "rule_files: [", nlohmann::json(rules_path).dump(), "]\n");
  }
  return config;
}

std::string ScrapedTargetsPath() { return "/api/v1/query?query=count%28up%3D%3D1%29"; }

int ScrapedTargets(const std::string& answer) {
  // {"status":"success","data":{"resultType":"vector","result":[{"metric":{},
  // "value":[1700000000.1,"3"]}]}}; no result while none is up.
  const nlohmann::json j = nlohmann::json::parse(answer, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("status", "") != "success") return 0;
  const nlohmann::json* result = &j;
  for (const char* key : {"data", "result"}) {
    if (!result->is_object() || !result->contains(key)) return 0;
    result = &(*result)[key];
  }
  if (!result->is_array() || result->empty()) return 0;
  const nlohmann::json& value = (*result)[0]["value"];
  if (!value.is_array() || value.size() != 2 || !value[1].is_string()) return 0;
  int count = 0;
  return absl::SimpleAtoi(value[1].get<std::string>(), &count) ? count : 0;
}

std::string ShippedRulesFile(const std::string& bin_dir) {
  const std::filesystem::path p =
      std::filesystem::path(bin_dir) / ".." / "share" / "antdt" / "antdt-rules.yaml";
  std::error_code ec;
  return std::filesystem::exists(p, ec) ? std::filesystem::weakly_canonical(p, ec).string() : "";
}

}  // namespace antdt::local
