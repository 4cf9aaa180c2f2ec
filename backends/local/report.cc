// report.json, report.html and the terminal's summary of a run.
#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "backends/local/runner.h"
#include "backends/local/svg_chart.h"
#include "common/config.h"
#include "common/status.h"
#include "core/monitor/causes.h"

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

// The Monitor's cause for a reader: "" when it named none (not a straggler).
std::string CauseName(v1::Cause cause) {
  return cause == v1::CAUSE_UNSPECIFIED ? "" : vocab::CauseLabel(cause);
}

// The values behind a named cause, beside its peers': "cpu_wait_share 0.55,
// peers 0.10"; only the signals of that cause.
std::string CauseEvidence(const v1::StragglerRecord& rec) {
  // The Monitor's own list of each cause's signals; HARDWARE's are labels.
  std::vector<std::string> keys = monitor::SignalKeys(rec.cause());
  if (rec.cause() == v1::HARDWARE) keys = {"device_speed", "hardware_minority"};
  std::vector<std::string> parts;
  for (const std::string& key : keys) {
    auto v = rec.evidence().find(key);
    if (v == rec.evidence().end()) continue;
    std::string part = absl::StrFormat("%s %.2f", key, v->second);
    if (auto p = rec.evidence().find(key + "_peer_median"); p != rec.evidence().end()) {
      // A value no worse than the peers' (one host's pressure) explains nothing.
      const bool lower_is_worse = key == "memory_available_fraction";
      if (lower_is_worse ? v->second >= p->second : v->second <= p->second) continue;
      absl::StrAppendFormat(&part, ", peers %.2f", p->second);
    }
    parts.push_back(part);
  }
  return absl::StrJoin(parts, "; ");
}

// The cause an action shows: its subject's record's, which every section
// shows; the Monitor's view when it decided where no record covers it.
v1::Cause ActionCause(const RunResult& r, const policy::Decision& a) {
  const v1::Cause cause = RecordCauseAt(r, a.subject, policy::AtSeconds(a));
  return cause == v1::CAUSE_UNSPECIFIED ? a.cause : cause;
}

// "stragglers": one object per Monitor record, one per line.
std::string StragglersJson(const RunResult& r) {
  std::string json = "  \"stragglers\": [";
  for (size_t i = 0; i < r.stragglers.size(); ++i) {
    const v1::StragglerRecord& s = r.stragglers[i];
    std::vector<std::string> evidence, windows;
    for (const auto& [key, value] :
         std::map<std::string, double>(s.evidence().begin(), s.evidence().end())) {
      evidence.push_back(absl::StrFormat("\"%s\": %.4g", JsonEscape(key), value));
    }
    for (const auto& [cause, n] :
         std::map<std::string, int32_t>(s.cause_windows().begin(), s.cause_windows().end())) {
      windows.push_back(absl::StrFormat("\"%s\": %d", JsonEscape(cause), n));
    }
    absl::StrAppendFormat(
        &json,
        "%s\n    {\"worker\": \"%s\", \"node\": \"%s\", \"role\": \"%s\", \"class\": \"%s\", "
        "\"compensated\": %s, \"cause\": \"%s\", \"first_seen_seconds\": %.3f, "
        "\"detected_seconds\": %.3f, \"last_seen_seconds\": %.3f, \"active\": %s, "
        "\"windows\": %d, \"cause_windows\": {%s}, \"max_score\": %.3f, "
        "\"max_sample_score\": %.3f, \"evidence\": {%s}}",
        i ? "," : "", JsonEscape(s.worker_id()), JsonEscape(s.node()), JsonEscape(s.role()),
        vocab::Name(s.class_()), s.compensated() ? "true" : "false", vocab::CauseLabel(s.cause()),
        JobSeconds(r, s.first_seen_unix_ms()), JobSeconds(r, s.detected_unix_ms()),
        JobSeconds(r, s.last_seen_unix_ms()), s.active() ? "true" : "false", s.windows(),
        absl::StrJoin(windows, ", "), s.max_score(), s.max_sample_score(),
        absl::StrJoin(evidence, ", "));
  }
  absl::StrAppend(&json, r.stragglers.empty() ? "],\n" : "\n  ],\n");
  return json;
}

// The recommendations that are about a straggler (not the batch changes that
// only keep the global batch around one), and what they were predicted to save.
double PredictedSaving(const RunResult& r) {
  double total = 0;
  for (const loop::Recommendation& rec : r.recommendations) {
    if (!rec.decision.subject.empty()) total += std::max(0.0, rec.predicted_saving_seconds);
  }
  return total;
}

// "mode", "recommendations" (one per line) and "recommendation_summary": the
// predicted saving beside what the job lost to stragglers (the time ledger).
std::string RecommendationsJson(const RunResult& r) {
  std::string json =
      absl::StrFormat("  \"mode\": \"%s\",\n  \"recommendations\": [", vocab::Name(r.mode));
  for (size_t i = 0; i < r.recommendations.size(); ++i) {
    const loop::Recommendation& rec = r.recommendations[i];
    absl::StrAppendFormat(
        &json,
        "%s\n    {\"at_seconds\": %.3f, \"action\": \"%s\", \"worker\": \"%s\", "
        "\"rule\": \"%s\", \"subject\": \"%s\", \"predicted_saving_seconds\": %.3f, "
        "\"cost_seconds\": %.3f, \"times\": %d, \"reason\": \"%s\"}",
        i ? "," : "", policy::AtSeconds(rec.decision), policy::ActionName(rec.decision.action),
        JsonEscape(policy::ActionTarget(rec.decision.action)), JsonEscape(rec.decision.rule),
        JsonEscape(rec.decision.subject), rec.predicted_saving_seconds, rec.cost_seconds, rec.times,
        JsonEscape(rec.decision.reason));
  }
  absl::StrAppend(&json, r.recommendations.empty() ? "],\n" : "\n  ],\n");
  absl::StrAppendFormat(&json,
                        "  \"recommendation_summary\": {\"predicted_saving_seconds\": %.3f, "
                        "\"lost_to_stragglers_seconds\": %.3f},\n",
                        PredictedSaving(r), r.estimated_lost_seconds);
  return json;
}

// One action or timeline point per line, so a reader greps an action whole.
std::string ReportJson(const RunResult& r) {
  std::string json = absl::StrFormat(
      "{\n  \"job\": \"%s\",\n  \"policy\": \"%s\",\n  \"jct_seconds\": %.3f,\n"
      "  \"records_committed\": %d,\n  \"exactly_once\": %s,\n  \"exactly_once_checked\": %s,\n"
      "  \"steps\": %d,\n  \"leases_shortened\": %s,\n  \"first_loss\": %.6f,\n  \"final_loss\": "
      "%.6f,\n"
      "  \"held_out_log_loss\": %.6f,\n  \"held_out_accuracy\": %.6f,\n"
      "  \"estimated_saved_seconds\": %.3f,\n  \"estimated_lost_seconds\": %.3f,\n"
      "  \"none_jct_seconds\": %s,\n  \"actions\": [",
      JsonEscape(r.job), JsonEscape(r.policy), r.jct_seconds, r.records_committed,
      !r.journals_checked             ? "null"
      : r.verification.exactly_once() ? "true"
                                      : "false",
      r.journals_checked ? "true" : "false", r.steps,
      r.leases_shortened < 0 ? std::string("null") : absl::StrCat(r.leases_shortened), r.first_loss,
      r.final_loss, r.held_out_log_loss, r.held_out_accuracy, r.estimated_saved_seconds,
      r.estimated_lost_seconds,
      r.none_jct_seconds < 0 ? "null" : absl::StrFormat("%.3f", r.none_jct_seconds));
  for (size_t i = 0; i < r.actions.size(); ++i) {
    const policy::Decision& a = r.actions[i];
    absl::StrAppendFormat(&json,
                          "%s\n    {\"at_seconds\": %.3f, \"action\": \"%s\", \"worker\": \"%s\", "
                          "\"rule\": \"%s\", \"subject\": \"%s\", \"cause\": \"%s\", "
                          "\"reason\": \"%s\", \"description\": \"%s\"}",
                          i ? "," : "", policy::AtSeconds(a), policy::ActionName(a.action),
                          JsonEscape(policy::ActionTarget(a.action)), JsonEscape(a.rule),
                          JsonEscape(a.subject), CauseName(ActionCause(r, a)), JsonEscape(a.reason),
                          JsonEscape(Description(a)));
  }
  absl::StrAppend(&json, r.actions.empty() ? "],\n" : "\n  ],\n", RecommendationsJson(r),
                  StragglersJson(r), "  \"timeline\": [");
  for (size_t i = 0; i < r.timeline.size(); ++i) {
    const ThroughputPoint& p = r.timeline[i];
    absl::StrAppendFormat(&json,
                          "%s\n    {\"t\": %.2f, \"worker\": \"%s\", \"role\": \"%s\", "
                          "\"samples_per_second\": %.2f, \"score\": %.3f, \"class\": \"%s\", "
                          "\"cause\": \"%s\", \"sample_score\": %.3f, \"speed_class\": \"%s\", "
                          "\"compensated\": %s}",
                          i ? "," : "", p.at_seconds, JsonEscape(p.worker), JsonEscape(p.role),
                          p.samples_per_second, p.score, vocab::Name(p.straggler_class),
                          CauseName(p.cause), p.sample_score, vocab::Name(p.speed_class),
                          p.compensated ? "true" : "false");
  }
  absl::StrAppend(&json, r.timeline.empty() ? "],\n" : "\n  ],\n", "  \"loss_curve\": [");
  for (size_t i = 0; i < r.loss_curve.size(); ++i) {
    absl::StrAppendFormat(&json, "%s[%.3f, %.6f]", i ? ", " : "", r.loss_curve[i].first,
                          r.loss_curve[i].second);
  }
  absl::StrAppend(&json, "]\n}\n");
  return json;
}

// Each worker's samples/s over time (parameter servers have none), the
// listed actions as numbered marks.
std::string ThroughputSvg(const RunResult& r) {
  LineChart chart;
  chart.x_label = "time since the job started (s)";
  chart.y_label = "throughput of each worker (samples/s)";
  chart.x_max = r.jct_seconds;
  std::map<std::string, std::vector<std::pair<double, double>>> series;
  for (const ThroughputPoint& p : r.timeline) {
    if (p.role == "worker") series[p.worker].emplace_back(p.at_seconds, p.samples_per_second);
  }
  for (auto& [worker, points] : series) chart.series.push_back({worker, std::move(points)});
  for (const policy::Decision& a : r.actions) {
    if (policy::IsRebalance(a)) continue;
    chart.marks.push_back(
        {policy::AtSeconds(a),
         absl::StrFormat("%.1f s %s %s", policy::AtSeconds(a), policy::ActionName(a.action),
                         policy::ActionTarget(a.action)),
         std::holds_alternative<policy::KillRestart>(a.action) ? "#d62728" : "#333"});
  }
  return LineChartSvg(chart);
}

// "7.7 s (Controller's estimate)", and against policy none when a benchmark ran it.
std::string TimeSaved(const RunResult& r) {
  std::string out = absl::StrFormat(
      "time saved (Controller's estimate): %.1f s, so without AntDT's actions "
      "about %.1f s; lost to stragglers: %.1f s",
      r.estimated_saved_seconds, r.jct_seconds + r.estimated_saved_seconds,
      r.estimated_lost_seconds);
  if (r.none_jct_seconds >= 0) {
    absl::StrAppendFormat(&out, "; measured against policy none (%.1f s): %.1f s",
                          r.none_jct_seconds, r.none_jct_seconds - r.jct_seconds);
  }
  return out;
}

int Rebalances(const RunResult& r) {
  return static_cast<int>(
      std::count_if(r.actions.begin(), r.actions.end(),
                    [](const policy::Decision& a) { return policy::IsRebalance(a); }));
}

// One row of the actions table: the sentence, the raw fields behind a toggle.
std::string ActionRow(const std::string& number, const policy::Decision& a, v1::Cause cause) {
  return absl::StrFormat(
      "<tr><td>%s</td><td>%.1f s</td><td>%s</td><td>%s</td><td>%s</td><td>%s<details><summary>"
      "evidence</summary><code>%s</code></details></td></tr>\n",
      number, policy::AtSeconds(a), policy::ActionName(a.action),
      HtmlEscape(policy::ActionTarget(a.action)), CauseName(cause), HtmlEscape(a.reason),
      HtmlEscape(Description(a)));
}

// The listed actions numbered as on the chart; the batch changes that only
// keep the global batch in a table of their own, folded.
std::string ActionsHtml(const RunResult& r) {
  const std::string head =
      "<table><tr><th>#</th><th>at</th><th>action</th><th>worker</th><th>cause</th>"
      "<th>why</th></tr>\n";
  std::string listed, folded;
  int number = 0;
  for (const policy::Decision& a : r.actions) {
    if (policy::IsRebalance(a)) {
      absl::StrAppend(&folded, ActionRow("", a, ActionCause(r, a)));
    } else {
      absl::StrAppend(&listed, ActionRow(std::to_string(++number), a, ActionCause(r, a)));
    }
  }
  std::string html = number ? absl::StrCat(head, listed, "</table>") : "<p>none</p>";
  if (!folded.empty()) {
    absl::StrAppendFormat(&html,
                          "<details><summary>%d batch changes that only keep the global batch"
                          "</summary>%s%s</table></details>",
                          Rebalances(r), head, folded);
  }
  return html;
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
      "td,th{padding:2px 8px;text-align:left;vertical-align:top;white-space:nowrap}"
      "td:last-child{white-space:normal}pre{background:#f4f4f4;padding:8px}</style></head>"
      "<body><h1>AntDT job ",
      HtmlEscape(r.job), "</h1>",
      absl::StrFormat("<p>policy <b>%s</b>: %.1f s, %d records committed, %s, %d steps, loss "
                      "%.4f &rarr; %.4f</p><p>%s</p>",
                      HtmlEscape(r.policy), r.jct_seconds, r.records_committed, VerificationLine(r),
                      r.steps, r.first_loss, r.final_loss, HtmlEscape(TimeSaved(r))),
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
  absl::StrAppend(&html, "<h2>Stragglers</h2>");
  if (r.stragglers.empty()) absl::StrAppend(&html, "<p>none</p>");
  for (const v1::StragglerRecord& s : r.stragglers) {
    absl::StrAppend(&html, "<p>", HtmlEscape(StragglerLine(r, s)), "</p>");
  }
  absl::StrAppend(&html, "<h2>Actions</h2>", ActionsHtml(r), "<h2>Exactly-once check</h2><pre>",
                  HtmlEscape(VerificationText(r)), "</pre></body></html>\n");
  return html;
}

}  // namespace

std::string VerificationText(const RunResult& r) {
  if (r.journals_checked) return r.verification.Summary();
  return "exactly-once: not checked (plain: the trainer reads with torch's DistributedSampler, "
         "not the sharding service, and writes no journal)\n";
}

std::string EvidenceText(const policy::Decision& a) {
  if (a.cause == v1::CAUSE_UNSPECIFIED && !a.evidence.count("saved_seconds")) return "";
  std::vector<std::string> parts;
  if (a.cause != v1::CAUSE_UNSPECIFIED) parts.push_back(absl::StrCat("cause ", CauseName(a.cause)));
  auto field = [&](const char* key) {
    const auto it = a.evidence.find(key);
    return it == a.evidence.end() ? std::optional<double>() : it->second;
  };
  if (auto score = field("score")) parts.push_back(absl::StrFormat("score %.2f", *score));
  if (auto windows = field("windows_slow"); windows && *windows > 0) {
    parts.push_back(absl::StrFormat("%.0f slow window%s", *windows, *windows == 1 ? "" : "s"));
  }
  if (auto saved = field("saved_seconds"))
    parts.push_back(absl::StrFormat("saves ~%.1f s", *saved));
  if (auto cost = field("cost_seconds")) parts.push_back(absl::StrFormat("costs %.1f s", *cost));
  return absl::StrJoin(parts, ", ");
}

double JobSeconds(const RunResult& r, int64_t unix_ms) {
  return static_cast<double>(unix_ms - r.start_unix_ms) / 1000.0;
}

namespace {

// The record an action on `worker` at `at_seconds` was decided on: the
// latest of its records detected by then.
const v1::StragglerRecord* RecordAt(const RunResult& r, const std::string& worker,
                                    double at_seconds) {
  const v1::StragglerRecord* best = nullptr;
  for (const v1::StragglerRecord& s : r.stragglers) {
    if (s.worker_id() == worker && JobSeconds(r, s.detected_unix_ms()) <= at_seconds + 1e-3) {
      best = &s;
    }
  }
  return best;
}

}  // namespace

v1::Cause RecordCauseAt(const RunResult& r, const std::string& worker, double at_seconds) {
  const v1::StragglerRecord* s = RecordAt(r, worker, at_seconds);
  return s == nullptr ? v1::CAUSE_UNSPECIFIED : s->cause();
}

std::string StragglerLine(const RunResult& r, const v1::StragglerRecord& s) {
  std::string out = absl::StrFormat(
      "%s on %s %s: slow from %.1f s, detected at %.1f s, %s", s.worker_id(), s.node(),
      v1::StragglerClass_Name(s.class_()), JobSeconds(r, s.first_seen_unix_ms()),
      JobSeconds(r, s.detected_unix_ms()),
      s.active() ? std::string("to the end")
                 : absl::StrFormat("until %.1f s", JobSeconds(r, s.last_seen_unix_ms())));
  if (s.role() == "ps") {
    absl::StrAppendFormat(&out, "; parameter server, step time score up to %.2f", s.max_score());
  } else if (s.max_sample_score() > 0) {
    absl::StrAppendFormat(&out, "; up to %.2fx slower per sample (batch time score up to %.2f)",
                          s.max_sample_score(), s.max_score());
  } else {
    absl::StrAppendFormat(&out, "; batch time score up to %.2f", s.max_score());
  }
  if (s.compensated()) absl::StrAppend(&out, ", compensated by a smaller batch");
  absl::StrAppend(&out, "; cause ", vocab::CauseLabel(s.cause()));
  if (const std::string evidence = CauseEvidence(s); !evidence.empty()) {
    absl::StrAppend(&out, " (", evidence, ")");
  }
  std::vector<std::string> done;
  for (const policy::Decision& a : r.actions) {
    if (!a.subject.empty() && !policy::IsRebalance(a) &&
        RecordAt(r, a.subject, policy::AtSeconds(a)) == &s) {
      done.push_back(
          absl::StrFormat("%s at %.1f s", policy::ActionName(a.action), policy::AtSeconds(a)));
    }
  }
  absl::StrAppend(&out, done.empty() ? "; nothing done" : "; done: " + absl::StrJoin(done, ", "));
  return out;
}

std::string Description(const policy::Decision& a) {
  if (const auto* b = std::get_if<policy::UseBackupWorkers>(&a.action)) {
    return absl::StrCat("backups=", b->backups, " (set on the parameter servers)");
  }
  if (a.rule == kPsRestoreRule) {
    auto field = [&](const char* key) {
      const auto it = a.evidence.find(key);
      return it == a.evidence.end() ? 0.0 : it->second;
    };
    return absl::StrFormat("restored_step=%d seconds=%.2f",
                           static_cast<int64_t>(field("restored_step")), field("seconds"));
  }
  return policy::Describe(a);
}

std::string ActionLine(const policy::Decision& a) {
  return absl::StrFormat("%.1f s %s %s: %s", policy::AtSeconds(a), policy::ActionName(a.action),
                         policy::ActionTarget(a.action), a.reason);
}

// Mode Recommend: what was recommended, and the predicted saving against
// what the job lost.
std::string RecommendationsText(const RunResult& r) {
  int listed = 0;
  for (const loop::Recommendation& rec : r.recommendations)
    listed += rec.decision.subject.empty() ? 0 : 1;
  std::string out = absl::StrFormat(
      "recommended, not carried out (mode Recommend): %d; predicted to save %.1f s, the job "
      "lost %.1f s to stragglers (Controller's estimate)\n",
      listed, PredictedSaving(r), r.estimated_lost_seconds);
  for (const loop::Recommendation& rec : r.recommendations) {
    if (rec.decision.subject.empty()) continue;
    absl::StrAppendFormat(&out, "  %.1fs %s %s (rule %s%s): saves ~%.1f s, costs %.1f s; %s\n",
                          policy::AtSeconds(rec.decision), policy::ActionName(rec.decision.action),
                          policy::ActionTarget(rec.decision.action), rec.decision.rule,
                          rec.times > 1 ? absl::StrFormat(", decided %d times", rec.times) : "",
                          rec.predicted_saving_seconds, rec.cost_seconds, rec.decision.reason);
  }
  return out;
}

std::string ReportText(const RunResult& r) {
  std::string out = absl::StrFormat(
      "job %s under policy %s%s: %.1f s, %d records committed, %d steps, loss %.4f -> %.4f\n%s\n",
      r.job, r.policy,
      r.mode == vocab::Mode::kRecommend ? " (mode Recommend: nothing carried out)" : "",
      r.jct_seconds, r.records_committed, r.steps, r.first_loss, r.final_loss, TimeSaved(r));
  if (r.held_out_log_loss >= 0) {
    absl::StrAppendFormat(&out, "held-out data: log-loss %.4f, accuracy %.4f\n",
                          r.held_out_log_loss, r.held_out_accuracy);
  }
  absl::StrAppendFormat(&out, "stragglers: %d%s\n", r.stragglers.size(),
                        r.stragglers.empty() ? "" : ", as the Monitor recorded them:");
  for (const v1::StragglerRecord& s : r.stragglers) {
    absl::StrAppend(&out, "  ", StragglerLine(r, s), "\n");
  }
  const int rebalances = Rebalances(r);
  const int listed = static_cast<int>(r.actions.size()) - rebalances;
  absl::StrAppendFormat(&out, "actions: %d", listed);
  if (rebalances > 0) {
    absl::StrAppendFormat(&out,
                          " (and %d batch changes that only keep the global batch, in the "
                          "report)",
                          rebalances);
  }
  absl::StrAppend(&out, listed ? ", in seconds since the job started:\n" : "\n");
  for (const policy::Decision& a : r.actions) {
    if (policy::IsRebalance(a)) continue;
    absl::StrAppend(&out, "  ", ActionLine(a), "\n");
    policy::Decision shown = a;
    shown.cause = ActionCause(r, a);  // the record's, as every section shows it
    if (const std::string evidence = EvidenceText(shown); !evidence.empty()) {
      absl::StrAppend(&out, "      ", evidence, "\n");
    }
  }
  if (r.mode == vocab::Mode::kRecommend) absl::StrAppend(&out, RecommendationsText(r));
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
