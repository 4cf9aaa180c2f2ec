#include "backends/kubernetes/client/selectors.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace antdt::kube {
namespace {

using json = nlohmann::json;

// Splits on commas that are not inside parentheses.
std::vector<std::string> SplitTopLevel(const std::string& text) {
  std::vector<std::string> parts;
  std::string cur;
  int depth = 0;
  for (char c : text) {
    if (c == '(') depth++;
    if (c == ')') depth--;
    if (c == ',' && depth == 0) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  parts.push_back(cur);
  return parts;
}

std::string Trim(absl::string_view s) { return std::string(absl::StripAsciiWhitespace(s)); }

bool ValidKey(const std::string& key) {
  if (key.empty()) return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '/';
  });
}

absl::StatusOr<Requirement> ParseSetRequirement(const std::string& term, size_t pos, size_t len,
                                                Requirement::Op op) {
  Requirement r;
  r.key = Trim(term.substr(0, pos));
  r.op = op;
  std::string rest = Trim(term.substr(pos + len));
  if (rest.size() < 2 || rest.front() != '(' || rest.back() != ')') {
    return absl::InvalidArgumentError("unable to parse requirement: \"" + term +
                                      "\": expected a parenthesized list of values");
  }
  for (absl::string_view v : absl::StrSplit(rest.substr(1, rest.size() - 2), ',')) {
    r.values.push_back(Trim(v));
  }
  return r;
}

std::string ScalarText(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  return v.dump();
}

bool MatchOne(const Requirement& r, bool present, const std::string& value) {
  switch (r.op) {
    case Requirement::Op::kEquals:
      return present && value == r.values[0];
    case Requirement::Op::kNotEquals:
      return !present || value != r.values[0];
    case Requirement::Op::kIn:
      return present && std::find(r.values.begin(), r.values.end(), value) != r.values.end();
    case Requirement::Op::kNotIn:
      return !present || std::find(r.values.begin(), r.values.end(), value) == r.values.end();
    case Requirement::Op::kExists:
      return present;
    case Requirement::Op::kDoesNotExist:
      return !present;
  }
  return false;
}

}  // namespace

absl::StatusOr<LabelSelector> ParseLabelSelector(const std::string& text) {
  LabelSelector sel;
  if (Trim(text).empty()) return sel;
  for (const std::string& raw : SplitTopLevel(text)) {
    std::string term = Trim(raw);
    if (term.empty()) return absl::InvalidArgumentError("found ',', expected: identifier");
    Requirement r;
    size_t pos;
    if (term[0] == '!') {
      r.key = Trim(term.substr(1));
      r.op = Requirement::Op::kDoesNotExist;
    } else if ((pos = term.find(" notin ")) != std::string::npos ||
               (pos = term.find(" notin(")) != std::string::npos) {
      auto parsed = ParseSetRequirement(term, pos, 6, Requirement::Op::kNotIn);
      if (!parsed.ok()) return parsed.status();
      r = *parsed;
    } else if ((pos = term.find(" in ")) != std::string::npos ||
               (pos = term.find(" in(")) != std::string::npos) {
      auto parsed = ParseSetRequirement(term, pos, 3, Requirement::Op::kIn);
      if (!parsed.ok()) return parsed.status();
      r = *parsed;
    } else if ((pos = term.find("!=")) != std::string::npos) {
      r.key = Trim(term.substr(0, pos));
      r.op = Requirement::Op::kNotEquals;
      r.values.push_back(Trim(term.substr(pos + 2)));
    } else if ((pos = term.find("==")) != std::string::npos) {
      r.key = Trim(term.substr(0, pos));
      r.values.push_back(Trim(term.substr(pos + 2)));
    } else if ((pos = term.find('=')) != std::string::npos) {
      r.key = Trim(term.substr(0, pos));
      r.values.push_back(Trim(term.substr(pos + 1)));
    } else {
      r.key = term;
      r.op = Requirement::Op::kExists;
    }
    if (!ValidKey(r.key)) {
      return absl::InvalidArgumentError("unable to parse requirement: invalid label key \"" +
                                        r.key + "\"");
    }
    sel.requirements.push_back(std::move(r));
  }
  return sel;
}

bool LabelSelector::Matches(const json& labels) const {
  for (const Requirement& r : requirements) {
    bool present = labels.is_object() && labels.contains(r.key);
    std::string value = present ? ScalarText(labels[r.key]) : "";
    if (!MatchOne(r, present, value)) return false;
  }
  return true;
}

absl::StatusOr<FieldSelector> ParseFieldSelector(const std::string& text) {
  FieldSelector sel;
  if (Trim(text).empty()) return sel;
  for (absl::string_view raw : absl::StrSplit(text, ',')) {
    std::string term = Trim(raw);
    Requirement r;
    size_t pos;
    if ((pos = term.find("!=")) != std::string::npos) {
      r.op = Requirement::Op::kNotEquals;
      r.key = Trim(term.substr(0, pos));
      r.values.push_back(Trim(term.substr(pos + 2)));
    } else if ((pos = term.find("==")) != std::string::npos) {
      r.key = Trim(term.substr(0, pos));
      r.values.push_back(Trim(term.substr(pos + 2)));
    } else if ((pos = term.find('=')) != std::string::npos) {
      r.key = Trim(term.substr(0, pos));
      r.values.push_back(Trim(term.substr(pos + 1)));
    } else {
      return absl::InvalidArgumentError("invalid selector: '" + term + "'; can't understand '" +
                                        term + "'");
    }
    if (r.key.empty()) return absl::InvalidArgumentError("invalid field selector: " + term);
    sel.requirements.push_back(std::move(r));
  }
  return sel;
}

std::string FieldValue(const json& object, const std::string& path) {
  const json* cur = &object;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    if (!cur->is_object()) return "";
    auto it = cur->find(std::string(part));
    if (it == cur->end()) return "";
    cur = &*it;
  }
  return ScalarText(*cur);
}

bool FieldSelector::Matches(const json& object) const {
  for (const Requirement& r : requirements) {
    std::string value = FieldValue(object, r.key);
    bool eq = value == r.values[0];
    if (r.op == Requirement::Op::kEquals ? !eq : eq) return false;
  }
  return true;
}

}  // namespace antdt::kube
