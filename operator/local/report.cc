// report.json, report.html and the terminal's summary of a run.
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/config.h"
#include "common/status.h"
#include "operator/local/runner.h"
#include "operator/local/svg_chart.h"

namespace antdt::local {
namespace {

namespace fs = std::filesystem;

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

// One action or timeline point per line, so a reader greps an action whole.
std::string ReportJson(const RunResult& r) {
  std::string json = absl::StrFormat(
      "{\n  \"job\": \"%s\",\n  \"policy\": \"%s\",\n  \"jct_seconds\": %.3f,\n"
      "  \"records_committed\": %d,\n  \"exactly_once\": %s,\n  \"exactly_once_checked\": %s,\n"
      "  \"steps\": %d,\n  \"first_loss\": %.6f,\n  \"final_loss\": %.6f,\n"
      "  \"held_out_log_loss\": %.6f,\n  \"held_out_accuracy\": %.6f,\n  \"actions\": [",
      JsonEscape(r.job), JsonEscape(r.policy), r.jct_seconds, r.records_committed,
      !r.journals_checked             ? "null"
      : r.verification.exactly_once() ? "true"
                                      : "false",
      r.journals_checked ? "true" : "false", r.steps, r.first_loss, r.final_loss,
      r.held_out_log_loss, r.held_out_accuracy);
  for (size_t i = 0; i < r.actions.size(); ++i) {
    const ActionRecord& a = r.actions[i];
    absl::StrAppendFormat(&json,
                          "%s\n    {\"at_seconds\": %.3f, \"action\": \"%s\", \"worker\": \"%s\", "
                          "\"rule\": \"%s\", \"reason\": \"%s\", \"description\": \"%s\"}",
                          i ? "," : "", a.at_seconds, vocab::Name(a.action), JsonEscape(a.worker),
                          JsonEscape(a.rule), JsonEscape(a.reason), JsonEscape(a.description));
  }
  absl::StrAppend(&json, r.actions.empty() ? "],\n" : "\n  ],\n", "  \"timeline\": [");
  for (size_t i = 0; i < r.timeline.size(); ++i) {
    const ThroughputPoint& p = r.timeline[i];
    absl::StrAppendFormat(&json,
                          "%s\n    {\"t\": %.2f, \"worker\": \"%s\", \"samples_per_second\": %.2f, "
                          "\"score\": %.3f, \"class\": \"%s\", \"cause\": \"%s\"}",
                          i ? "," : "", p.at_seconds, JsonEscape(p.worker), p.samples_per_second,
                          p.score, vocab::Name(p.klass), v1::Cause_Name(p.cause));
  }
  absl::StrAppend(&json, r.timeline.empty() ? "],\n" : "\n  ],\n", "  \"loss_curve\": [");
  for (size_t i = 0; i < r.loss_curve.size(); ++i) {
    absl::StrAppendFormat(&json, "%s[%.3f, %.6f]", i ? ", " : "", r.loss_curve[i].first,
                          r.loss_curve[i].second);
  }
  absl::StrAppend(&json, "]\n}\n");
  return json;
}

// Each worker's samples/s over time, the actions as marks.
std::string ThroughputSvg(const RunResult& r) {
  LineChart chart;
  chart.x_label = "time since the job started (s)";
  chart.y_label = "samples/s of each worker";
  chart.x_max = r.jct_seconds;
  std::map<std::string, std::vector<std::pair<double, double>>> series;
  for (const ThroughputPoint& p : r.timeline) {
    series[p.worker].emplace_back(p.at_seconds, p.samples_per_second);
  }
  for (auto& [worker, points] : series) chart.series.push_back({worker, std::move(points)});
  for (const ActionRecord& a : r.actions) {
    chart.marks.push_back({a.at_seconds, absl::StrCat(vocab::Name(a.action), " ", a.worker)});
  }
  return LineChartSvg(chart);
}

std::string VerificationLine(const RunResult& r) {
  if (!r.journals_checked) return "exactly-once not checked (plain: no journals)";
  return r.verification.exactly_once() ? "every record exactly once"
                                       : "<b>records lost or committed twice</b>";
}

std::string ReportHtml(const RunResult& r) {
  std::string html = absl::StrCat(
      "<!doctype html><html><head><meta charset=\"utf-8\"><title>AntDT report: ", HtmlEscape(r.job),
      "</title><style>body{font-family:sans-serif;margin:2em}"
      "td,th{padding:2px 8px;text-align:left}pre{background:#f4f4f4;padding:8px}</style></head>"
      "<body><h1>AntDT job ",
      HtmlEscape(r.job), "</h1>",
      absl::StrFormat("<p>policy <b>%s</b>: %.1f s, %d records committed, %s, %d steps, loss "
                      "%.4f &rarr; %.4f</p>",
                      HtmlEscape(r.policy), r.jct_seconds, r.records_committed, VerificationLine(r),
                      r.steps, r.first_loss, r.final_loss),
      "<h2>Throughput of each worker</h2>", ThroughputSvg(r));
  if (!r.loss_curve.empty()) {
    LineChart loss;
    loss.x_label = "time since the job started (s)";
    loss.y_label = "loss (worker-0)";
    loss.x_max = r.jct_seconds;
    loss.y_from_zero = false;
    loss.series.push_back({r.policy, r.loss_curve});
    absl::StrAppend(&html, "<h2>Loss</h2>", LineChartSvg(loss));
  }
  absl::StrAppend(&html,
                  "<h2>Actions</h2><table><tr><th>at</th>"
                  "<th>action</th><th>worker</th><th>why</th></tr>");
  for (const ActionRecord& a : r.actions) {
    absl::StrAppendFormat(&html, "<tr><td>%.1f s</td><td>%s</td><td>%s</td><td>%s</td></tr>",
                          a.at_seconds, vocab::Name(a.action), HtmlEscape(a.worker),
                          HtmlEscape(a.description));
  }
  absl::StrAppend(&html, "</table><h2>Exactly-once check</h2><pre>",
                  HtmlEscape(VerificationText(r)), "</pre></body></html>\n");
  return html;
}

}  // namespace

std::string VerificationText(const RunResult& r) {
  if (r.journals_checked) return r.verification.Summary();
  return "exactly-once: not checked (plain: the trainer reads with torch's DistributedSampler, "
         "not the sharding service, and writes no journal)\n";
}

std::string ReportText(const RunResult& r) {
  std::string out = absl::StrFormat(
      "job %s under policy %s: %.1f s, %d records committed, %d steps, loss %.4f -> %.4f\n", r.job,
      r.policy, r.jct_seconds, r.records_committed, r.steps, r.first_loss, r.final_loss);
  if (r.held_out_log_loss >= 0) {
    absl::StrAppendFormat(&out, "held-out data: log-loss %.4f, accuracy %.4f\n",
                          r.held_out_log_loss, r.held_out_accuracy);
  }
  if (r.actions.empty()) {
    absl::StrAppend(&out, "actions: none\n");
  } else {
    absl::StrAppend(&out,
                    "actions (batch changes that only keep the global batch are in the report):\n");
    for (const ActionRecord& a : r.actions) {
      if (a.action == vocab::ActionKind::kAdjustBatchSize && a.subject.empty()) continue;
      absl::StrAppendFormat(&out, "  %6.1fs %-14s %-10s %s\n", a.at_seconds, vocab::Name(a.action),
                            a.worker, a.reason);
    }
  }
  absl::StrAppend(&out, VerificationText(r));
  return out;
}

absl::Status WriteReport(const RunResult& r, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InvalidArgumentError("--report: cannot create " + dir);
  RETURN_IF_ERROR(WriteFileAtomically(dir + "/report.json", ReportJson(r)));
  return WriteFileAtomically(dir + "/report.html", ReportHtml(r));
}

}  // namespace antdt::local
