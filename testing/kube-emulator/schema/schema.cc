#include "testing/kube-emulator/schema/schema.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "testing/kube-emulator/schema/cel.h"

namespace antdt::kubeemu {

using json = nlohmann::json;

bool operator==(const Cause& a, const Cause& b) {
  return a.type == b.type && a.field == b.field && a.message == b.message;
}

namespace {

// ---- How Go prints values in field errors ----

// strconv.Quote: double quotes, backslash escapes for control characters.
std::string GoQuote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\a':
        out += "\\a";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\v':
        out += "\\v";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// fmt's %v for a float64: the shortest representation that round-trips, in
// %e form when the decimal exponent is < -4 or >= 6 ("1e+06", "100000",
// "2.147483647e+09", "0.0001", "1e-05").
std::string GoFloat(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "+Inf" : "-Inf";
  if (d == 0) return std::signbit(d) ? "-0" : "0";
  char buf[64];
  int prec = 1;
  for (; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*e", prec - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  // buf: [-]d.ddde[+-]XX
  std::string s = buf;
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s = s.substr(1);
  }
  const size_t e = s.find('e');
  std::string digits = s.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int exp = std::atoi(s.c_str() + e + 1);
  if (exp < -4 || exp >= 6) {
    std::string mant = digits.substr(0, 1);
    if (digits.size() > 1) mant += "." + digits.substr(1);
    std::snprintf(buf, sizeof(buf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return sign + mant + buf;
  }
  const int dp = exp + 1;  // digits before the decimal point
  const int nd = static_cast<int>(digits.size());
  if (dp <= 0) return sign + "0." + std::string(-dp, '0') + digits;
  if (dp >= nd) return sign + digits + std::string(dp - nd, '0');
  return sign + digits.substr(0, dp) + "." + digits.substr(dp);
}

// How field.Error prints a bad value: strings quoted, numbers and booleans
// plain, null as "null".
std::string Repr(const json& v) {
  if (v.is_string()) return GoQuote(v.get<std::string>());
  if (v.is_null()) return "\"null\"";
  if (v.is_number_float()) return GoFloat(v.get<double>());
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  return v.dump();
}

std::string Child(const std::string& path, const std::string& name) {
  return path.empty() ? name : path + "." + name;
}
std::string Index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

Cause Invalid(const std::string& field, const json& value, const std::string& detail) {
  std::string m = "Invalid value: " + Repr(value);
  if (!detail.empty()) m += ": " + detail;
  return {"FieldValueInvalid", field, m};
}
Cause TypeInvalid(const std::string& field, const json& value, const std::string& detail) {
  return {"FieldValueTypeInvalid", field, "Invalid value: " + Repr(value) + ": " + detail};
}
Cause Required(const std::string& field, const std::string& detail) {
  return {"FieldValueRequired", field,
          detail.empty() ? "Required value" : "Required value: " + detail};
}
Cause Forbidden(const std::string& field, const std::string& detail) {
  return {"FieldValueForbidden", field, detail.empty() ? "Forbidden" : "Forbidden: " + detail};
}
Cause Duplicate(const std::string& field, const std::string& repr) {
  return {"FieldValueDuplicate", field, "Duplicate value: " + repr};
}
Cause NotSupported(const std::string& field, const json& value,
                   const std::vector<std::string>& allowed) {
  std::string m = "Unsupported value: " + Repr(value);
  if (!allowed.empty()) {
    m += ": supported values: ";
    for (size_t i = 0; i < allowed.size(); ++i) m += (i ? ", " : "") + GoQuote(allowed[i]);
  }
  return {"FieldValueNotSupported", field, m};
}
Cause TooLong(const std::string& field, int64_t max) {
  return {
      "FieldValueTooLong", field,
      "Too long: may not be more than " + std::to_string(max) + (max == 1 ? " byte" : " bytes")};
}
Cause TooMany(const std::string& field, int64_t actual, int64_t max) {
  return {"FieldValueTooMany", field,
          "Too many: " + std::to_string(actual) + ": must have at most " + std::to_string(max) +
              (max == 1 ? " item" : " items")};
}

// ---- Small helpers ----

const json& EmptyObject() {
  static const json kEmpty = json::object();
  return kEmpty;
}

bool Flag(const json& s, const char* key) {
  auto it = s.find(key);
  return it != s.end() && it->is_boolean() && it->get<bool>();
}

std::string Str(const json& s, const char* key) {
  auto it = s.find(key);
  return it != s.end() && it->is_string() ? it->get<std::string>() : "";
}

const json* Sub(const json& s, const char* key) {
  auto it = s.find(key);
  return it != s.end() && it->is_object() ? &*it : nullptr;
}

bool IsWhole(const json& v) {
  if (!v.is_number_float()) return v.is_number_integer();
  const double d = v.get<double>();
  return std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1.8446744073709552e19;
}

double AsDouble(const json& v) {
  if (v.is_number_float()) return v.get<double>();
  if (v.is_number_unsigned()) return static_cast<double>(v.get<uint64_t>());
  return static_cast<double>(v.get<int64_t>());
}

// JSON-schema type name of a value, as kube-openapi names it.
std::string TypeOf(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::string:
      return "string";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer";
    case json::value_t::number_float:
      return "number";
    case json::value_t::array:
      return "array";
    default:
      return "object";
  }
}

int64_t CodePoints(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool IsLeap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }
int DaysIn(int64_t y, int m) {
  static const int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && IsLeap(y) ? 29 : kDays[m - 1];
}
int64_t DaysFromCivil(int64_t y, int m, int d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

// RFC 3339 date-time (as strfmt's IsDateTime: 't' and 'z' in either case,
// optional fraction). Sets *unix_seconds when not null.
bool ParseDateTime(const std::string& s, int64_t* unix_seconds) {
  static const std::regex kRe(
      R"(^([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?([Zz]|([+-])([0-9]{2}):([0-9]{2}))$)");
  std::smatch m;
  if (!std::regex_match(s, m, kRe)) return false;
  const int64_t y = std::stoll(m[1]);
  const int mo = std::stoi(m[2]), d = std::stoi(m[3]);
  const int h = std::stoi(m[4]), mi = std::stoi(m[5]), sec = std::stoi(m[6]);
  if (mo < 1 || mo > 12 || d < 1 || d > DaysIn(y, mo) || h > 23 || mi > 59 || sec > 59) {
    return false;
  }
  int64_t offset = 0;
  if (m[9].matched) {
    const int oh = std::stoi(m[10]), om = std::stoi(m[11]);
    if (oh > 23 || om > 59) return false;
    offset = (oh * 3600 + om * 60) * (m[9] == "-" ? -1 : 1);
  }
  if (unix_seconds != nullptr) {
    *unix_seconds = DaysFromCivil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - offset;
  }
  return true;
}

bool CompileRegex(const std::string& pattern, std::regex* out, std::string* error) {
  try {
    *out = std::regex(pattern, std::regex::ECMAScript);
    return true;
  } catch (const std::regex_error& e) {
    if (error != nullptr) *error = e.what();
    return false;
  }
}

// Whether `value` matches the schema pattern; patterns are compiled once
// (the cache is shared by all callers, hence the mutex). A pattern that does
// not compile matches everything (ValidateCrdSchema reports it).
bool MatchesPattern(const std::string& pattern, const std::string& value) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const std::regex>> cache;
  std::shared_ptr<const std::regex> re;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(pattern);
    if (it != cache.end()) {
      re = it->second;
    } else {
      std::regex compiled;
      if (CompileRegex(pattern, &compiled, nullptr)) {
        re = std::make_shared<const std::regex>(std::move(compiled));
      }
      cache.emplace(pattern, re);
    }
  }
  return re == nullptr || std::regex_search(value, *re);
}

// ---- Defaulting and pruning ----

void DefaultAndPrune(const json& s, json& v, bool root) {
  if (!s.is_object()) return;
  if (v.is_object()) {
    const json* props = Sub(s, "properties");
    const json* addl = Sub(s, "additionalProperties");
    const bool addl_any = Flag(s, "additionalProperties");
    const bool preserve = Flag(s, "x-kubernetes-preserve-unknown-fields");
    const bool embedded = Flag(s, "x-kubernetes-embedded-resource");
    if (props != nullptr) {
      for (auto p = props->begin(); p != props->end(); ++p) {
        auto it = v.find(p.key());
        const bool has_default = p->is_object() && p->contains("default");
        if (it != v.end() && it->is_null() && !Flag(*p, "nullable")) {
          if (has_default) {
            *it = (*p)["default"];
          } else {
            v.erase(it);
          }
        } else if (it == v.end() && has_default) {
          v[p.key()] = (*p)["default"];
        }
      }
    }
    std::vector<std::string> drop;
    for (auto it = v.begin(); it != v.end(); ++it) {
      const std::string& k = it.key();
      const bool meta = k == "apiVersion" || k == "kind" || k == "metadata";
      if ((root || embedded) && meta) continue;
      if (props != nullptr && props->contains(k)) continue;
      if (addl != nullptr || addl_any || preserve) continue;
      drop.push_back(k);
    }
    for (const std::string& k : drop) v.erase(k);
    for (auto it = v.begin(); it != v.end(); ++it) {
      if ((root || embedded) && it.key() == "metadata") continue;
      if (props != nullptr && props->contains(it.key())) {
        DefaultAndPrune((*props)[it.key()], *it, false);
      } else if (addl != nullptr) {
        DefaultAndPrune(*addl, *it, false);
      }
    }
  } else if (v.is_array()) {
    if (const json* items = Sub(s, "items")) {
      for (json& x : v) DefaultAndPrune(*items, x, false);
    }
  }
}

// ---- Unknown fields (fieldValidation) ----

bool IsObjectMetaField(const std::string& key) {
  static const std::set<std::string> kFields = {"name",
                                                "generateName",
                                                "namespace",
                                                "selfLink",
                                                "uid",
                                                "resourceVersion",
                                                "generation",
                                                "creationTimestamp",
                                                "deletionTimestamp",
                                                "deletionGracePeriodSeconds",
                                                "labels",
                                                "annotations",
                                                "ownerReferences",
                                                "finalizers",
                                                "managedFields"};
  return kFields.count(key) > 0;
}

// Mirrors DefaultAndPrune's decisions without changing `v`.
void CollectUnknown(const json& s, const json& v, bool root, const std::string& path,
                    std::vector<std::string>* out) {
  if (!s.is_object()) return;
  auto child = [&path](const std::string& key) { return path.empty() ? key : path + "." + key; };
  if (v.is_object()) {
    const json* props = Sub(s, "properties");
    const json* addl = Sub(s, "additionalProperties");
    const bool open = addl != nullptr || Flag(s, "additionalProperties") ||
                      Flag(s, "x-kubernetes-preserve-unknown-fields");
    const bool resource = root || Flag(s, "x-kubernetes-embedded-resource");
    for (auto it = v.begin(); it != v.end(); ++it) {
      const std::string& k = it.key();
      if (resource && k == "metadata") {
        if (!it->is_object()) continue;
        for (auto m = it->begin(); m != it->end(); ++m) {
          if (!IsObjectMetaField(m.key())) out->push_back(child("metadata." + m.key()));
        }
        continue;
      }
      if (resource && (k == "apiVersion" || k == "kind")) continue;
      if (props != nullptr && props->contains(k)) {
        CollectUnknown((*props)[k], *it, false, child(k), out);
      } else if (addl != nullptr) {
        CollectUnknown(*addl, *it, false, child(k), out);
      } else if (!open) {
        out->push_back(child(k));
      }
    }
  } else if (v.is_array()) {
    if (const json* items = Sub(s, "items")) {
      for (size_t i = 0; i < v.size(); ++i) {
        CollectUnknown(*items, v[i], false, absl::StrCat(path, "[", i, "]"), out);
      }
    }
  }
}

// ---- OpenAPI validation ----

class Validator {
 public:
  std::vector<Cause> causes;
  bool blocking = false;  // a type or enum error: CEL rules are not evaluated

  void Validate(const json& s, const json& v, const std::string& path) {
    if (!s.is_object()) return;
    const bool int_or_string = Flag(s, "x-kubernetes-int-or-string");
    const std::string type = int_or_string ? "integer,string" : Str(s, "type");
    if (v.is_null()) {
      if (Flag(s, "nullable") || type.empty()) return;
      AddBlocking(
          TypeInvalid(path, "null", path + " in body must be of type " + type + ": \"null\""));
      return;
    }
    const std::string actual = TypeOf(v);
    bool type_ok = true;
    if (int_or_string) {
      type_ok = actual == "string" || actual == "integer" || (actual == "number" && IsWhole(v));
    } else if (!type.empty()) {
      type_ok = actual == type || (type == "number" && actual == "integer") ||
                (type == "integer" && actual == "number" && IsWhole(v));
    }
    if (!type_ok) {
      AddBlocking(TypeInvalid(path, actual,
                              path + " in body must be of type " + type + ": \"" + actual + "\""));
    }
    if (const auto it = s.find("enum"); it != s.end() && it->is_array()) {
      bool found = false;
      std::vector<std::string> allowed;
      for (const json& e : *it) {
        found = found || cel::ValuesEqual(e, v);
        allowed.push_back(e.is_string() ? e.get<std::string>() : e.dump());
      }
      if (!found) AddBlocking(NotSupported(path, v, allowed));
    }
    if (!type_ok) return;
    Junctors(s, v, path);
    if (v.is_string()) {
      String(s, v.get<std::string>(), path);
    } else if (v.is_number()) {
      Number(s, v, path);
    } else if (v.is_array()) {
      Array(s, v, path);
    } else if (v.is_object()) {
      Object(s, v, path);
    }
  }

 private:
  void AddBlocking(Cause c) {
    blocking = true;
    causes.push_back(std::move(c));
  }

  void Junctors(const json& s, const json& v, const std::string& path) {
    auto passes = [&](const json& sub) {
      Validator inner;
      inner.Validate(sub, v, path);
      return inner.causes.empty();
    };
    if (const auto it = s.find("allOf"); it != s.end() && it->is_array()) {
      for (const json& sub : *it) Validate(sub, v, path);
    }
    if (const auto it = s.find("anyOf"); it != s.end() && it->is_array()) {
      bool any = false;
      for (const json& sub : *it) any = any || passes(sub);
      if (!any)
        causes.push_back(
            Invalid(path, "", path + " in body must validate at least one schema (anyOf)"));
    }
    if (const auto it = s.find("oneOf"); it != s.end() && it->is_array()) {
      int n = 0;
      for (const json& sub : *it) n += passes(sub) ? 1 : 0;
      if (n != 1)
        causes.push_back(
            Invalid(path, "", path + " in body must validate one and only one schema (oneOf)"));
    }
    if (const json* sub = Sub(s, "not"); sub != nullptr && passes(*sub)) {
      causes.push_back(Invalid(path, "", path + " in body must not validate the schema (not)"));
    }
  }

  void String(const json& s, const std::string& v, const std::string& path) {
    if (Str(s, "format") == "date-time" && !ParseDateTime(v, nullptr)) {
      AddBlocking(TypeInvalid(path, v, path + " in body must be of type date-time: " + GoQuote(v)));
    }
    const int64_t len = CodePoints(v);
    if (const auto it = s.find("maxLength");
        it != s.end() && it->is_number() && len > it->get<int64_t>()) {
      causes.push_back(TooLong(path, it->get<int64_t>()));
    }
    if (const auto it = s.find("minLength");
        it != s.end() && it->is_number() && len < it->get<int64_t>()) {
      causes.push_back(Invalid(path, v,
                               path + " in body should be at least " +
                                   std::to_string(it->get<int64_t>()) + " chars long"));
    }
    if (const std::string pattern = Str(s, "pattern"); !pattern.empty()) {
      if (!MatchesPattern(pattern, v)) {
        causes.push_back(Invalid(path, v, path + " in body should match '" + pattern + "'"));
      }
    }
  }

  void Number(const json& s, const json& v, const std::string& path) {
    const std::string format = Str(s, "format");
    if (format == "int32" || format == "int64") {
      const double lo = format == "int32" ? -2147483648.0 : -9223372036854775808.0;
      const double hi = format == "int32" ? 2147483647.0 : 9223372036854775807.0;
      const bool fits = v.is_number_unsigned()
                            ? (format == "int64" ? v.get<uint64_t>() <= 9223372036854775807ULL
                                                 : v.get<uint64_t>() <= 2147483647ULL)
                            : (AsDouble(v) >= lo && AsDouble(v) <= hi);
      if (!fits) {
        AddBlocking(TypeInvalid(
            path, v, path + " in body must be of type " + format + ": " + GoQuote(v.dump())));
      }
    }
    const double x = AsDouble(v);
    if (const auto it = s.find("multipleOf"); it != s.end() && it->is_number()) {
      const double m = AsDouble(*it);
      const double q = x / m;
      if (m != 0 && q != std::floor(q)) {
        causes.push_back(Invalid(path, v, path + " in body should be a multiple of " + GoFloat(m)));
      }
    }
    if (const auto it = s.find("maximum"); it != s.end() && it->is_number()) {
      const double max = AsDouble(*it);
      const bool exclusive = Flag(s, "exclusiveMaximum");
      if (exclusive ? x >= max : x > max) {
        causes.push_back(Invalid(path, v,
                                 path + " in body should be less than " +
                                     (exclusive ? "" : "or equal to ") + GoFloat(max)));
      }
    }
    if (const auto it = s.find("minimum"); it != s.end() && it->is_number()) {
      const double min = AsDouble(*it);
      const bool exclusive = Flag(s, "exclusiveMinimum");
      if (exclusive ? x <= min : x < min) {
        causes.push_back(Invalid(path, v,
                                 path + " in body should be greater than " +
                                     (exclusive ? "" : "or equal to ") + GoFloat(min)));
      }
    }
  }

  void Array(const json& s, const json& v, const std::string& path) {
    const json* items = Sub(s, "items");
    if (items != nullptr) {
      for (size_t i = 0; i < v.size(); ++i) Validate(*items, v[i], Index(path, i));
    }
    const int64_t n = static_cast<int64_t>(v.size());
    if (const auto it = s.find("minItems");
        it != s.end() && it->is_number() && n < it->get<int64_t>()) {
      causes.push_back(Invalid(
          path, n,
          path + " in body should have at least " + std::to_string(it->get<int64_t>()) + " items"));
    }
    if (const auto it = s.find("maxItems");
        it != s.end() && it->is_number() && n > it->get<int64_t>()) {
      causes.push_back(TooMany(path, n, it->get<int64_t>()));
    }
    const std::string list_type = Str(s, "x-kubernetes-list-type");
    if (list_type == "map") {
      std::vector<json> seen;
      const json keys = s.value("x-kubernetes-list-map-keys", json::array());
      for (size_t i = 0; i < v.size(); ++i) {
        if (!v[i].is_object()) continue;
        json key = json::object();
        for (const json& k : keys) {
          if (k.is_string() && v[i].contains(k.get<std::string>())) {
            key[k.get<std::string>()] = v[i][k.get<std::string>()];
          }
        }
        bool dup = false;
        for (const json& other : seen) dup = dup || cel::ValuesEqual(other, key);
        if (dup) {
          causes.push_back(Duplicate(Index(path, i), "map[string]interface {}" + key.dump()));
        }
        seen.push_back(std::move(key));
      }
    } else if (list_type == "set") {
      for (size_t i = 0; i < v.size(); ++i) {
        for (size_t j = 0; j < i; ++j) {
          if (cel::ValuesEqual(v[i], v[j])) {
            causes.push_back(Duplicate(Index(path, i), Repr(v[i])));
            break;
          }
        }
      }
    }
  }

  void Object(const json& s, const json& v, const std::string& path) {
    const json* props = Sub(s, "properties");
    const json* addl = Sub(s, "additionalProperties");
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (path.empty() && it.key() == "metadata" && props != nullptr &&
          props->contains("metadata")) {
        // ObjectMeta is validated by the apiserver itself; only name and
        // generateName restrictions of the schema apply.
        const json& ms = (*props)["metadata"];
        if (const json* mp = Sub(ms, "properties"); mp != nullptr && it->is_object()) {
          for (const char* f : {"name", "generateName"}) {
            if (mp->contains(f) && it->contains(f))
              Validate((*mp)[f], (*it)[f], Child("metadata", f));
          }
        }
        continue;
      }
      if (props != nullptr && props->contains(it.key())) {
        Validate((*props)[it.key()], *it, Child(path, it.key()));
      } else if (addl != nullptr) {
        Validate(*addl, *it, Child(path, it.key()));
      }
    }
    if (const auto it = s.find("required"); it != s.end() && it->is_array()) {
      for (const json& k : *it) {
        if (k.is_string() && !v.contains(k.get<std::string>())) {
          causes.push_back(Required(Child(path, k.get<std::string>()), ""));
        }
      }
    }
  }
};

// ---- CEL rules ----

bool HasRules(const json& s) {
  if (s.is_object()) {
    if (s.contains("x-kubernetes-validations")) return true;
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() == "default" || it.key() == "enum" || it.key() == "example") continue;
      if (HasRules(*it)) return true;
    }
  } else if (s.is_array()) {
    for (const json& x : s) {
      if (HasRules(x)) return true;
    }
  }
  return false;
}

// fieldPath (".a.b", ".a['b.c']", ".a[0]") appended to `base`; false when it
// does not parse.
bool AppendFieldPath(const std::string& base, const std::string& fp, std::string* out) {
  std::string path = base;
  size_t i = 0;
  if (fp.empty()) return false;
  while (i < fp.size()) {
    if (fp[i] == '.') {
      size_t j = i + 1;
      while (j < fp.size() && fp[j] != '.' && fp[j] != '[') ++j;
      if (j == i + 1) return false;
      path = Child(path, fp.substr(i + 1, j - i - 1));
      i = j;
    } else if (fp[i] == '[') {
      const size_t close = fp.find(']', i);
      if (close == std::string::npos) return false;
      std::string inner = fp.substr(i + 1, close - i - 1);
      if (inner.size() >= 2 && (inner[0] == '\'' || inner[0] == '"') && inner.back() == inner[0]) {
        path = Child(path, inner.substr(1, inner.size() - 2));
      } else if (!inner.empty() && inner.find_first_not_of("0123456789") == std::string::npos) {
        path += "[" + inner + "]";
      } else {
        return false;
      }
      i = close + 1;
    } else {
      return false;
    }
  }
  *out = path;
  return true;
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// Only apiVersion, kind, metadata.name and metadata.generateName of the
// metadata are visible to rules at the root.
json RootView(const json& v) {
  json out = v;
  if (out.is_object() && out.contains("metadata")) {
    json meta = json::object();
    const json& m = v["metadata"];
    if (m.is_object()) {
      for (const char* f : {"name", "generateName"}) {
        if (m.contains(f)) meta[f] = m[f];
      }
    }
    out["metadata"] = meta;
  }
  return out;
}

void EvaluateRules(const json& s, const json& v, const json* old, const std::string& path,
                   bool root, std::vector<Cause>* out) {
  const json& rules = s["x-kubernetes-validations"];
  if (!rules.is_array()) return;
  const json type = Str(s, "type");
  const json self = cel::BindValue(s, root ? RootView(v) : v);
  json old_self;
  if (old != nullptr) old_self = cel::BindValue(s, root ? RootView(*old) : *old);
  for (const json& r : rules) {
    if (!r.is_object()) continue;
    const std::string rule = Str(r, "rule");
    const cel::ParseResult parsed = cel::Parse(rule);
    if (!parsed.error.empty()) {
      out->push_back(Invalid(path, type, "rule compile error: " + parsed.error));
      continue;
    }
    if (parsed.program.uses_old_self && old == nullptr) continue;  // transition rule on create
    const cel::EvalResult res =
        cel::Evaluate(parsed.program, self, old != nullptr ? &old_self : nullptr);
    if (!res.ok) {
      if (res.error.rfind("no such overload", 0) == 0) {
        out->push_back(Invalid(path, type,
                               "'" + res.error +
                                   "': call arguments did not match a supported operator, function "
                                   "or macro signature for rule: " +
                                   Trim(rule)));
      } else {
        out->push_back(Invalid(path, type, res.error + " evaluating rule: " + Trim(rule)));
      }
      continue;
    }
    if (res.value.is_boolean() && res.value.get<bool>()) continue;
    std::string message = Str(r, "message");
    if (const std::string me = Str(r, "messageExpression"); !me.empty()) {
      const cel::ParseResult mp = cel::Parse(me);
      if (mp.error.empty()) {
        const cel::EvalResult mr =
            cel::Evaluate(mp.program, self, old != nullptr ? &old_self : nullptr);
        if (mr.ok && mr.value.is_string() && !Trim(mr.value.get<std::string>()).empty()) {
          message = mr.value.get<std::string>();
        }
      }
    }
    if (message.empty()) message = "failed rule: " + Trim(rule);
    std::string field = path;
    if (const std::string fp = Str(r, "fieldPath"); !fp.empty()) AppendFieldPath(path, fp, &field);
    const std::string reason = Str(r, "reason");
    if (reason == "FieldValueForbidden") {
      out->push_back(Forbidden(field, message));
    } else if (reason == "FieldValueRequired") {
      out->push_back(Required(field, message));
    } else if (reason == "FieldValueDuplicate") {
      out->push_back(Duplicate(field, Repr(type)));
    } else {
      out->push_back(Invalid(field, type, message));
    }
  }
}

// The old list item that corresponds to `item` (list-type map: same keys;
// set: equal), or nullptr.
const json* CorrelateItem(const json& s, const json& item, const json* old_list) {
  if (old_list == nullptr || !old_list->is_array()) return nullptr;
  const std::string list_type = Str(s, "x-kubernetes-list-type");
  if (list_type == "set") {
    for (const json& o : *old_list) {
      if (cel::ValuesEqual(o, item)) return &o;
    }
    return nullptr;
  }
  if (list_type != "map" || !item.is_object()) return nullptr;
  const json keys = s.value("x-kubernetes-list-map-keys", json::array());
  for (const json& o : *old_list) {
    if (!o.is_object()) continue;
    bool same = true;
    for (const json& k : keys) {
      if (!k.is_string()) continue;
      const std::string key = k.get<std::string>();
      const bool a = item.contains(key), b = o.contains(key);
      same = same && a == b && (!a || cel::ValuesEqual(item[key], o[key]));
    }
    if (same) return &o;
  }
  return nullptr;
}

void RunRules(const json& s, const json& v, const json* old, const std::string& path, bool root,
              std::vector<Cause>* out) {
  if (!s.is_object()) return;
  if (s.contains("x-kubernetes-validations")) EvaluateRules(s, v, old, path, root, out);
  if (v.is_object()) {
    const json* props = Sub(s, "properties");
    const json* addl = Sub(s, "additionalProperties");
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (root && it.key() == "metadata") continue;
      const json* child = nullptr;
      if (props != nullptr && props->contains(it.key())) {
        child = &(*props)[it.key()];
      } else if (addl != nullptr) {
        child = addl;
      }
      if (child == nullptr) continue;
      const json* old_child = nullptr;
      if (old != nullptr && old->is_object()) {
        auto jt = old->find(it.key());
        if (jt != old->end()) old_child = &*jt;
      }
      RunRules(*child, *it, old_child, Child(path, it.key()), false, out);
    }
  } else if (v.is_array()) {
    if (const json* items = Sub(s, "items")) {
      for (size_t i = 0; i < v.size(); ++i) {
        RunRules(*items, v[i], CorrelateItem(s, v[i], old), Index(path, i), false, out);
      }
    }
  }
}

// ---- CRD schema checks ----

class CrdChecker {
 public:
  std::vector<Cause> causes;

  void Check(const json& s, const std::string& path, const std::string& where, bool correlatable,
             bool is_metadata) {
    if (!s.is_object()) {
      causes.push_back(Invalid(path, s, "must be a schema object"));
      return;
    }
    static const char* const kForbidden[] = {
        "definitions", "dependencies", "deprecated", "discriminator", "id",     "patternProperties",
        "readOnly",    "writeOnly",    "xml",        "$ref",          "$schema"};
    for (const char* k : kForbidden) {
      if (s.contains(k))
        causes.push_back(Forbidden(path + "." + k, std::string(k) + " is not supported"));
    }
    if (Flag(s, "uniqueItems")) {
      causes.push_back(Forbidden(path + ".uniqueItems",
                                 "uniqueItems cannot be set to true since the runtime complexity "
                                 "becomes quadratic"));
    }
    if (s.contains("additionalProperties") && s["additionalProperties"].is_boolean() &&
        !s["additionalProperties"].get<bool>()) {
      causes.push_back(
          Forbidden(path + ".additionalProperties", "additionalProperties cannot be set to false"));
    }
    if (s.contains("additionalProperties") && s.contains("properties")) {
      causes.push_back(Forbidden(path + ".additionalProperties",
                                 "additionalProperties and properties are mutual exclusive"));
    }
    if (s.contains("x-kubernetes-preserve-unknown-fields") &&
        !Flag(s, "x-kubernetes-preserve-unknown-fields")) {
      causes.push_back(Invalid(path + ".x-kubernetes-preserve-unknown-fields", false,
                               "must be true or undefined"));
    }
    const std::string type = Str(s, "type");
    const bool int_or_string = Flag(s, "x-kubernetes-int-or-string");
    const bool preserve = Flag(s, "x-kubernetes-preserve-unknown-fields");
    static const std::vector<std::string> kTypes = {"array",  "boolean", "integer",
                                                    "number", "object",  "string"};
    if (s.contains("type") && !s["type"].is_string()) {
      causes.push_back(Invalid(path + ".type", s["type"], "must be a string"));
    } else if (!type.empty() && std::find(kTypes.begin(), kTypes.end(), type) == kTypes.end()) {
      causes.push_back(NotSupported(path + ".type", type, kTypes));
    }
    if (where == "root" && type != "object") {
      if (type.empty()) {
        causes.push_back(Required(path + ".type", "must not be empty at the root"));
      } else {
        causes.push_back(Invalid(path + ".type", type, "must be object at the root"));
      }
    } else if (type.empty() && !int_or_string && !preserve) {
      causes.push_back(Required(path + ".type", "must not be empty for specified " + where));
    }
    if (int_or_string && !type.empty()) {
      causes.push_back(Invalid(path + ".type", type, "must be empty to be structural"));
    }
    if (type == "array" && !s.contains("items")) {
      causes.push_back(Required(path + ".items", "must be specified"));
    }
    if (const std::string pattern = Str(s, "pattern"); !pattern.empty()) {
      std::regex re;
      std::string err;
      if (!CompileRegex(pattern, &re, &err)) {
        causes.push_back(Invalid(path + ".pattern", pattern,
                                 "must be a valid regular expression, but isn't: " + err));
      }
    }
    if (s.contains("default")) CheckDefault(s, path);
    CheckListType(s, path);
    if (is_metadata) CheckMetadata(s, path);
    for (const char* j : {"allOf", "anyOf", "oneOf"}) {
      if (const auto it = s.find(j); it != s.end() && it->is_array()) {
        for (size_t i = 0; i < it->size(); ++i) CheckJunctor(s, (*it)[i], Index(path + "." + j, i));
      }
    }
    if (const json* n = Sub(s, "not")) CheckJunctor(s, *n, path + ".not");
    if (s.contains("x-kubernetes-validations")) CheckRules(s, path, correlatable);

    if (const json* props = Sub(s, "properties")) {
      for (auto it = props->begin(); it != props->end(); ++it) {
        Check(*it, path + ".properties[" + it.key() + "]", "object fields", correlatable,
              where == "root" && it.key() == "metadata");
      }
    }
    if (const json* items = Sub(s, "items")) {
      const std::string lt = Str(s, "x-kubernetes-list-type");
      Check(*items, path + ".items", "array items", correlatable && (lt == "map" || lt == "set"),
            false);
    }
    if (const json* addl = Sub(s, "additionalProperties")) {
      Check(*addl, path + ".additionalProperties", "object fields", correlatable, false);
    }
  }

 private:
  void CheckDefault(const json& s, const std::string& path) {
    const json value = s["default"];
    json pruned = value;
    DefaultAndPrune(s, pruned, false);  // also applies nested defaults
    if (!ContainsAll(value, pruned)) {
      causes.push_back(Invalid(path + ".default", value.is_object() ? json("object") : value,
                               "must not have unknown fields"));
    }
    Validator v;
    v.Validate(s, pruned, "");
    for (const Cause& c : v.causes) {
      causes.push_back(
          {c.type, c.field.empty() ? path + ".default" : path + ".default." + c.field, c.message});
    }
  }

  // Every field of `a` is still in `b` (pruning removed nothing).
  static bool ContainsAll(const json& a, const json& b) {
    if (a.is_object()) {
      if (!b.is_object()) return false;
      for (auto it = a.begin(); it != a.end(); ++it) {
        if (it->is_null()) continue;
        auto jt = b.find(it.key());
        if (jt == b.end() || !ContainsAll(*it, *jt)) return false;
      }
      return true;
    }
    if (a.is_array()) {
      if (!b.is_array() || a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!ContainsAll(a[i], b[i])) return false;
      }
    }
    return true;
  }

  void CheckListType(const json& s, const std::string& path) {
    const bool has_type = s.contains("x-kubernetes-list-type");
    const std::string lt = Str(s, "x-kubernetes-list-type");
    if (has_type) {
      if (lt != "atomic" && lt != "set" && lt != "map") {
        causes.push_back(NotSupported(path + ".x-kubernetes-list-type", s["x-kubernetes-list-type"],
                                      {"atomic", "set", "map"}));
      }
      if (Str(s, "type") != "array") {
        causes.push_back(
            Invalid(path + ".x-kubernetes-list-type", lt, "must only be used if type is array"));
      }
    }
    if (s.contains("x-kubernetes-list-map-keys") && lt != "map") {
      causes.push_back(Forbidden(path + ".x-kubernetes-list-map-keys",
                                 "must only be used if x-kubernetes-list-type is map"));
    }
    const json* items = Sub(s, "items");
    if (lt == "map") {
      const json keys = s.value("x-kubernetes-list-map-keys", json::array());
      if (!keys.is_array() || keys.empty()) {
        causes.push_back(Required(path + ".x-kubernetes-list-map-keys",
                                  "must not be empty if x-kubernetes-list-type is map"));
      }
      if (items == nullptr || Str(*items, "type") != "object") {
        causes.push_back(Invalid(path + ".items.type", items != nullptr ? Str(*items, "type") : "",
                                 "must be object if parent array's x-kubernetes-list-type is map"));
      } else if (keys.is_array()) {
        const json* props = Sub(*items, "properties");
        const json req = items->value("required", json::array());
        for (size_t i = 0; i < keys.size(); ++i) {
          const std::string k = keys[i].is_string() ? keys[i].get<std::string>() : "";
          const std::string f = Index(path + ".x-kubernetes-list-map-keys", i);
          if (props == nullptr || !props->contains(k)) {
            causes.push_back(Invalid(f, k, "entries must all be names of item properties"));
            continue;
          }
          const bool required = std::find(req.begin(), req.end(), json(k)) != req.end();
          if (!required && !(*props)[k].contains("default")) {
            causes.push_back(Invalid(
                f, k, "entries must all be names of required properties or have a default"));
          }
        }
      }
    }
    if (lt == "set" && items != nullptr) {
      const std::string it = Str(*items, "type");
      if (it == "object" || it == "array") {
        causes.push_back(
            Invalid(path + ".items.type", it,
                    "must be a scalar type if parent array's x-kubernetes-list-type is set"));
      }
    }
  }

  void CheckMetadata(const json& s, const std::string& path) {
    bool ok = true;
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() != "type" && it.key() != "properties" && it.key() != "description") ok = false;
    }
    if (const json* props = Sub(s, "properties")) {
      for (auto it = props->begin(); it != props->end(); ++it) {
        if (it.key() != "name" && it.key() != "generateName") ok = false;
      }
    }
    if (!ok) {
      causes.push_back(Forbidden(path,
                                 "must not specify anything other than name and generateName, "
                                 "but metadata is implicitly specified"));
    }
  }

  void CheckJunctor(const json& parent, const json& j, const std::string& path) {
    if (!j.is_object()) return;
    for (const char* k : {"type", "description", "default", "additionalProperties", "nullable"}) {
      if (j.contains(k))
        causes.push_back(Forbidden(path + "." + k, "must be empty to be structural"));
    }
    if (const json* props = Sub(j, "properties")) {
      const json* outer = Sub(parent, "properties");
      for (auto it = props->begin(); it != props->end(); ++it) {
        if (outer == nullptr || !outer->contains(it.key())) {
          causes.push_back(Required(path + ".properties[" + it.key() + "]",
                                    "must have a counterpart outside of the value validation"));
        }
      }
    }
  }

  void CheckRules(const json& s, const std::string& path, bool correlatable) {
    const json& rules = s["x-kubernetes-validations"];
    const std::string base = path + ".x-kubernetes-validations";
    if (!rules.is_array()) {
      causes.push_back(Invalid(base, "", "must be a list of rules"));
      return;
    }
    static const std::set<std::string> kKeys = {"rule",   "message",   "messageExpression",
                                                "reason", "fieldPath", "optionalOldSelf"};
    static const std::vector<std::string> kReasons = {"FieldValueInvalid", "FieldValueForbidden",
                                                      "FieldValueRequired", "FieldValueDuplicate"};
    for (size_t i = 0; i < rules.size(); ++i) {
      const std::string at = Index(base, i);
      const json& r = rules[i];
      if (!r.is_object()) {
        causes.push_back(Invalid(at, "", "must be a rule object"));
        continue;
      }
      for (auto it = r.begin(); it != r.end(); ++it) {
        if (kKeys.count(it.key()) == 0)
          causes.push_back(Forbidden(at + "." + it.key(), "unknown rule field"));
      }
      const std::string rule = Str(r, "rule");
      if (Trim(rule).empty()) {
        causes.push_back(Required(at + ".rule", ""));
        continue;
      }
      const cel::ParseResult parsed = cel::Parse(rule);
      std::string err = parsed.error;
      if (err.empty()) err = cel::Check(parsed.program, s);
      if (!err.empty()) {
        causes.push_back(Invalid(at + ".rule", rule, "compilation failed: " + err));
        continue;
      }
      if (parsed.program.uses_old_self && !correlatable) {
        causes.push_back(
            Invalid(at + ".rule", rule,
                    "oldSelf cannot be used on the uncorrelatable portion of the schema "
                    "within " +
                        path));
      }
      if (r.contains("optionalOldSelf")) {
        causes.push_back(
            Forbidden(at + ".optionalOldSelf", "optionalOldSelf is not supported by the emulator"));
      }
      if (r.contains("reason")) {
        const std::string reason = Str(r, "reason");
        if (std::find(kReasons.begin(), kReasons.end(), reason) == kReasons.end()) {
          causes.push_back(NotSupported(at + ".reason", r["reason"], kReasons));
        }
      }
      const std::string message = Str(r, "message");
      if (message.find('\n') != std::string::npos) {
        causes.push_back(Invalid(at + ".message", message, "message must not contain line breaks"));
      }
      if (r.contains("message") && Trim(message).empty()) {
        causes.push_back(
            Invalid(at + ".message", message, "message must be non-empty if specified"));
      }
      if (const std::string me = Str(r, "messageExpression"); !me.empty()) {
        const cel::ParseResult mp = cel::Parse(me);
        std::string merr = mp.error;
        if (merr.empty()) merr = cel::Check(mp.program, s);
        if (!merr.empty()) {
          causes.push_back(Invalid(at + ".messageExpression", me,
                                   "messageExpression compilation failed: " + merr));
        }
      }
      if (r.contains("fieldPath")) {
        const std::string fp = Str(r, "fieldPath");
        if (!FieldPathExists(s, fp)) {
          causes.push_back(Invalid(at + ".fieldPath", fp, "fieldPath must be a valid path"));
        }
      }
    }
  }

  // Whether the fieldPath names a property declared under `s`.
  static bool FieldPathExists(const json& s, const std::string& fp) {
    std::string joined;
    if (!AppendFieldPath("", fp, &joined)) return false;
    const json* node = &s;
    size_t i = 0;
    while (i < fp.size()) {
      std::string name;
      if (fp[i] == '.') {
        size_t j = i + 1;
        while (j < fp.size() && fp[j] != '.' && fp[j] != '[') ++j;
        name = fp.substr(i + 1, j - i - 1);
        i = j;
      } else {  // '[...]'
        const size_t close = fp.find(']', i);
        std::string inner = fp.substr(i + 1, close - i - 1);
        i = close + 1;
        if (inner[0] != '\'' && inner[0] != '"') {
          const json* items = Sub(*node, "items");
          if (items == nullptr) return false;
          node = items;
          continue;
        }
        name = inner.substr(1, inner.size() - 2);
      }
      const json* props = Sub(*node, "properties");
      if (props != nullptr && props->contains(name)) {
        node = &(*props)[name];
      } else if (const json* addl = Sub(*node, "additionalProperties")) {
        node = addl;
      } else {
        return false;
      }
    }
    return true;
  }
};

// ---- JSONPath subset for printer columns ----

struct PathStep {
  enum Kind { kField, kIndex, kWildcard, kFilter } kind = kField;
  std::string name;
  int64_t index = 0;
  std::vector<std::string> filter_path;  // @.a.b
  std::string op;                        // "==", "!=", or "" (exists)
  json literal;
};

bool ParseJsonPath(std::string p, std::vector<PathStep>* steps) {
  p = Trim(p);
  if (p.size() >= 2 && p.front() == '{' && p.back() == '}') p = Trim(p.substr(1, p.size() - 2));
  size_t i = 0;
  if (!p.empty() && p[0] == '$') ++i;
  auto read_name = [&](size_t from, size_t* end) {
    size_t j = from;
    while (j < p.size() && p[j] != '.' && p[j] != '[') ++j;
    *end = j;
    return p.substr(from, j - from);
  };
  while (i < p.size()) {
    PathStep step;
    if (p[i] == '.') {
      if (i + 1 < p.size() && p[i + 1] == '.') return false;  // recursive descent: unsupported
      if (i + 1 < p.size() && p[i + 1] == '*') {
        step.kind = PathStep::kWildcard;
        i += 2;
      } else {
        size_t end = 0;
        step.name = read_name(i + 1, &end);
        if (step.name.empty()) return false;
        i = end;
      }
    } else if (p[i] == '[') {
      if (p.compare(i, 3, "[?(") == 0) {
        const size_t close = p.find(")]", i);
        if (close == std::string::npos) return false;
        std::string expr = Trim(p.substr(i + 3, close - i - 3));
        i = close + 2;
        step.kind = PathStep::kFilter;
        if (expr.empty() || expr[0] != '@') return false;
        size_t k = 1;
        while (k < expr.size() && expr[k] == '.') {
          size_t j = k + 1;
          while (j < expr.size() && (std::isalnum(static_cast<unsigned char>(expr[j])) ||
                                     expr[j] == '_' || expr[j] == '-' || expr[j] == '/')) {
            ++j;
          }
          step.filter_path.push_back(expr.substr(k + 1, j - k - 1));
          k = j;
        }
        std::string rest = Trim(expr.substr(k));
        if (rest.empty()) {
          step.op = "";
        } else {
          if (rest.compare(0, 2, "==") != 0 && rest.compare(0, 2, "!=") != 0) return false;
          step.op = rest.substr(0, 2);
          std::string lit = Trim(rest.substr(2));
          if (lit.size() >= 2 && (lit[0] == '"' || lit[0] == '\'') && lit.back() == lit[0]) {
            step.literal = lit.substr(1, lit.size() - 2);
          } else if (lit == "true" || lit == "false") {
            step.literal = lit == "true";
          } else {
            char* end = nullptr;
            const double d = std::strtod(lit.c_str(), &end);
            if (lit.empty() || *end != '\0') return false;
            step.literal = d;
          }
        }
      } else {
        const size_t close = p.find(']', i);
        if (close == std::string::npos) return false;
        std::string inner = Trim(p.substr(i + 1, close - i - 1));
        i = close + 1;
        if (inner == "*") {
          step.kind = PathStep::kWildcard;
        } else if (inner.size() >= 2 && (inner[0] == '\'' || inner[0] == '"') &&
                   inner.back() == inner[0]) {
          step.name = inner.substr(1, inner.size() - 2);
        } else {
          char* end = nullptr;
          step.index = std::strtoll(inner.c_str(), &end, 10);
          if (inner.empty() || *end != '\0') return false;
          step.kind = PathStep::kIndex;
        }
      }
    } else {
      size_t end = 0;  // a leading bare name ("metadata.name")
      step.name = read_name(i, &end);
      i = end;
    }
    steps->push_back(std::move(step));
  }
  return true;
}

std::vector<const json*> EvalJsonPath(const std::vector<PathStep>& steps, const json& root) {
  std::vector<const json*> cur = {&root};
  for (const PathStep& step : steps) {
    std::vector<const json*> next;
    for (const json* c : cur) {
      switch (step.kind) {
        case PathStep::kField:
          if (c->is_object() && c->contains(step.name)) next.push_back(&(*c)[step.name]);
          break;
        case PathStep::kIndex:
          if (c->is_array()) {
            int64_t k = step.index < 0 ? static_cast<int64_t>(c->size()) + step.index : step.index;
            if (k >= 0 && k < static_cast<int64_t>(c->size()))
              next.push_back(&(*c)[static_cast<size_t>(k)]);
          }
          break;
        case PathStep::kWildcard:
          if (c->is_array() || c->is_object()) {
            for (const json& x : *c) next.push_back(&x);
          }
          break;
        case PathStep::kFilter:
          if (c->is_array() || c->is_object()) {
            for (const json& x : *c) {
              const json* f = &x;
              for (const std::string& n : step.filter_path) {
                f = f != nullptr && f->is_object() && f->contains(n) ? &(*f)[n] : nullptr;
              }
              bool keep = false;
              if (step.op.empty()) {
                keep = f != nullptr;
              } else if (f != nullptr) {
                const bool eq = cel::ValuesEqual(*f, step.literal);
                keep = step.op == "==" ? eq : !eq;
              }
              if (keep) next.push_back(&x);
            }
          }
          break;
      }
    }
    cur = std::move(next);
  }
  return cur;
}

// kubectl's age (k8s.io/apimachinery/pkg/util/duration.HumanDuration).
std::string HumanDuration(int64_t seconds) {
  if (seconds < -1) return "<invalid>";
  if (seconds < 0) return "0s";
  if (seconds < 120) return std::to_string(seconds) + "s";
  const int64_t minutes = seconds / 60;
  if (minutes < 10) {
    const int64_t s = seconds % 60;
    return s == 0 ? std::to_string(minutes) + "m"
                  : std::to_string(minutes) + "m" + std::to_string(s) + "s";
  }
  if (minutes < 180) return std::to_string(minutes) + "m";
  const int64_t hours = seconds / 3600;
  if (hours < 8) {
    const int64_t m = minutes % 60;
    return m == 0 ? std::to_string(hours) + "h"
                  : std::to_string(hours) + "h" + std::to_string(m) + "m";
  }
  if (hours < 48) return std::to_string(hours) + "h";
  if (hours < 24 * 8) {
    const int64_t h = hours % 24;
    return h == 0 ? std::to_string(hours / 24) + "d"
                  : std::to_string(hours / 24) + "d" + std::to_string(h) + "h";
  }
  if (hours < 24 * 365 * 2) return std::to_string(hours / 24) + "d";
  if (hours < 24 * 365 * 8) {
    const int64_t dy = (hours / 24) % 365;
    return dy == 0 ? std::to_string(hours / 24 / 365) + "y"
                   : std::to_string(hours / 24 / 365) + "y" + std::to_string(dy) + "d";
  }
  return std::to_string(hours / 24 / 365) + "y";
}

json Cell(const std::string& type, const json& v, int64_t now) {
  if (v.is_null()) return nullptr;
  if (type == "string") {
    if (v.is_string()) return v;
    if (v.is_number_float()) return GoFloat(v.get<double>());
    if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
    return v.dump();
  }
  if (type == "integer") {
    if (v.is_number_float()) return static_cast<int64_t>(v.get<double>());
    if (v.is_number_integer()) return v;
    return nullptr;
  }
  if (type == "number") return v.is_number() ? json(AsDouble(v)) : json(nullptr);
  if (type == "boolean") return v.is_boolean() ? v : json(nullptr);
  if (type == "date") {
    if (!v.is_string()) return nullptr;
    int64_t t = 0;
    if (!ParseDateTime(v.get<std::string>(), &t)) return "<invalid>";
    return HumanDuration(now - t);
  }
  return nullptr;
}

constexpr char kNameDescription[] =
    "Name must be unique within a namespace. Is required when creating resources, although some "
    "resources may allow a client to request the generation of an appropriate name automatically. "
    "Name is primarily intended for creation idempotence and configuration definition. Cannot be "
    "updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

}  // namespace

std::vector<std::string> UnknownFields(const json& schema, const json& object) {
  std::vector<std::string> out;
  CollectUnknown(schema, object, true, "", &out);
  return out;
}

std::vector<Cause> ValidateCustomResource(const json& schema, json& object, const json* old) {
  DefaultAndPrune(schema, object, true);
  Validator v;
  v.Validate(schema, object, "");
  std::vector<Cause> causes = std::move(v.causes);
  if (HasRules(schema)) {
    if (v.blocking) {
      causes.push_back(Invalid("", nullptr,
                               "some validation rules were not checked because the object was "
                               "invalid; correct the existing errors to complete validation"));
    } else {
      RunRules(schema, object, old, "", true, &causes);
    }
  }
  return causes;
}

std::vector<Cause> ValidateCrdSchema(const json& schema) {
  CrdChecker c;
  c.Check(schema, "openAPIV3Schema", "root", true, false);
  return std::move(c.causes);
}

json RenderTable(const json& printer_columns, const std::vector<json>& objects,
                 const std::string& list_resource_version, int64_t now_unix_seconds) {
  json table = {{"kind", "Table"},
                {"apiVersion", "meta.k8s.io/v1"},
                {"metadata", {{"resourceVersion", list_resource_version}}}};
  json defs = json::array();
  defs.push_back({{"name", "Name"},
                  {"type", "string"},
                  {"format", "name"},
                  {"description", kNameDescription},
                  {"priority", 0}});
  struct Column {
    std::string type;
    std::vector<PathStep> steps;
    bool ok;
  };
  std::vector<Column> columns;
  if (printer_columns.is_array()) {
    for (const json& c : printer_columns) {
      const std::string path = Str(c, "jsonPath");
      std::string description = Str(c, "description");
      if (description.empty()) {
        description = "Custom resource definition column (in JSONPath format): " + path;
      }
      defs.push_back(
          {{"name", Str(c, "name")},
           {"type", Str(c, "type")},
           {"format", Str(c, "format")},
           {"description", description},
           {"priority", c.contains("priority") && c["priority"].is_number_integer() ? c["priority"]
                                                                                    : json(0)}});
      Column col;
      col.type = Str(c, "type");
      col.ok = ParseJsonPath(path, &col.steps);
      columns.push_back(std::move(col));
    }
  }
  table["columnDefinitions"] = std::move(defs);
  json rows = json::array();
  for (const json& o : objects) {
    const json& meta =
        o.contains("metadata") && o["metadata"].is_object() ? o["metadata"] : EmptyObject();
    json cells = json::array();
    cells.push_back(Str(meta, "name"));
    for (const Column& col : columns) {
      std::vector<const json*> found;
      if (col.ok) found = EvalJsonPath(col.steps, o);
      cells.push_back(found.empty() ? json(nullptr) : Cell(col.type, *found[0], now_unix_seconds));
    }
    rows.push_back({{"cells", std::move(cells)},
                    {"object",
                     {{"kind", "PartialObjectMetadata"},
                      {"apiVersion", "meta.k8s.io/v1"},
                      {"metadata", meta}}}});
  }
  table["rows"] = std::move(rows);
  return table;
}

namespace {

const json& At(const json& o, std::initializer_list<const char*> path) {
  const json* at = &o;
  for (const char* key : path) {
    if (!at->is_object() || !at->contains(key)) return EmptyObject();
    at = &(*at)[key];
  }
  return *at;
}

std::string AtStr(const json& o, std::initializer_list<const char*> path,
                  const std::string& fallback = "") {
  const json& v = At(o, path);
  return v.is_string() && !v.get<std::string>().empty() ? v.get<std::string>() : fallback;
}

// What `kubectl get pods` shows as STATUS: Terminating, a container's waiting
// or terminated reason, the pod's reason (Evicted), else its phase.
std::string PodStatus(const json& pod) {
  if (!At(pod, {"metadata", "deletionTimestamp"}).empty()) return "Terminating";
  std::string status = AtStr(pod, {"status", "reason"}, AtStr(pod, {"status", "phase"}, "Pending"));
  const json& statuses = At(pod, {"status", "containerStatuses"});
  if (!statuses.is_array()) return status;
  for (const json& c : statuses) {
    const std::string waiting = AtStr(c, {"state", "waiting", "reason"});
    const std::string terminated = AtStr(c, {"state", "terminated", "reason"});
    if (!waiting.empty()) return waiting;
    if (!terminated.empty() && status != "Succeeded") status = terminated;
  }
  return status;
}

json PodRow(const json& pod, int64_t now) {
  const json& containers = At(pod, {"spec", "containers"});
  const json& statuses = At(pod, {"status", "containerStatuses"});
  int ready = 0;
  int64_t restarts = 0;
  if (statuses.is_array()) {
    for (const json& c : statuses) {
      ready += c.value("ready", false) ? 1 : 0;
      restarts += c.value("restartCount", int64_t{0});
    }
  }
  const size_t total = containers.is_array() ? containers.size() : 0;
  return json::array({absl::StrCat(ready, "/", total), PodStatus(pod), restarts,
                      Cell("date", At(pod, {"metadata", "creationTimestamp"}), now),
                      AtStr(pod, {"status", "podIP"}, "<none>"),
                      AtStr(pod, {"spec", "nodeName"}, "<none>")});
}

json NodeRow(const json& node, int64_t now) {
  std::string status = "Unknown";
  const json& conditions = At(node, {"status", "conditions"});
  if (conditions.is_array()) {
    for (const json& c : conditions) {
      if (Str(c, "type") == "Ready") status = Str(c, "status") == "True" ? "Ready" : "NotReady";
    }
  }
  if (At(node, {"spec", "unschedulable"}) == true) status += ",SchedulingDisabled";
  std::vector<std::string> roles;
  const json& labels = At(node, {"metadata", "labels"});
  if (labels.is_object()) {
    for (const auto& [key, value] : labels.items()) {
      if (absl::StartsWith(key, "node-role.kubernetes.io/")) {
        roles.push_back(key.substr(std::string("node-role.kubernetes.io/").size()));
      }
    }
  }
  return json::array({status, roles.empty() ? "<none>" : absl::StrJoin(roles, ","),
                      Cell("date", At(node, {"metadata", "creationTimestamp"}), now),
                      AtStr(node, {"status", "nodeInfo", "kubeletVersion"})});
}

json ServiceRow(const json& svc, int64_t now) {
  std::vector<std::string> ports;
  const json& spec_ports = At(svc, {"spec", "ports"});
  if (spec_ports.is_array()) {
    for (const json& p : spec_ports) {
      ports.push_back(absl::StrCat(p.value("port", 0), "/", p.value("protocol", "TCP")));
    }
  }
  return json::array({AtStr(svc, {"spec", "type"}, "ClusterIP"),
                      AtStr(svc, {"spec", "clusterIP"}, "<none>"), "<none>",
                      ports.empty() ? "<none>" : absl::StrJoin(ports, ","),
                      Cell("date", At(svc, {"metadata", "creationTimestamp"}), now)});
}

std::string AccessModes(const json& modes) {
  std::vector<std::string> out;
  if (modes.is_array()) {
    for (const json& m : modes) {
      const std::string mode = m.is_string() ? m.get<std::string>() : "";
      out.push_back(mode == "ReadWriteOnce"      ? "RWO"
                    : mode == "ReadOnlyMany"     ? "ROX"
                    : mode == "ReadWriteMany"    ? "RWX"
                    : mode == "ReadWriteOncePod" ? "RWOP"
                                                 : mode);
    }
  }
  return absl::StrJoin(out, ",");
}

json ClaimRow(const json& pvc, int64_t now) {
  return json::array(
      {AtStr(pvc, {"status", "phase"}, "Pending"), AtStr(pvc, {"spec", "volumeName"}),
       AtStr(pvc, {"status", "capacity", "storage"}),
       AccessModes(At(pvc, {"status", "accessModes"})), AtStr(pvc, {"spec", "storageClassName"}),
       Cell("date", At(pvc, {"metadata", "creationTimestamp"}), now)});
}

json Column(const std::string& name, const std::string& type, int priority,
            const std::string& description) {
  return {{"name", name},
          {"type", type},
          {"format", name == "Name" ? "name" : ""},
          {"description", description},
          {"priority", priority}};
}

}  // namespace

bool HasBuiltinTable(const std::string& resource) {
  return resource == "pods" || resource == "nodes" || resource == "services" ||
         resource == "persistentvolumeclaims";
}

json RenderBuiltinTable(const std::string& resource, const std::vector<json>& objects,
                        const std::string& list_resource_version, int64_t now_unix_seconds) {
  json defs = json::array({Column("Name", "string", 0, kNameDescription)});
  json (*row)(const json&, int64_t) = nullptr;
  if (resource == "pods") {
    row = &PodRow;
    for (const json& c :
         {Column("Ready", "string", 0,
                 "The aggregate readiness state of this pod for accepting traffic."),
          Column("Status", "string", 0, "The aggregate status of the containers in this pod."),
          Column("Restarts", "string", 0,
                 "The number of times the containers in this pod have been restarted."),
          Column("Age", "string", 0, "CreationTimestamp of the pod."),
          Column("IP", "string", 1, "IP address allocated to the pod."),
          Column("Node", "string", 1, "Name of the Node this pod runs on.")}) {
      defs.push_back(c);
    }
  } else if (resource == "nodes") {
    row = &NodeRow;
    for (const char* name : {"Status", "Roles", "Age", "Version"}) {
      defs.push_back(Column(name, "string", 0, ""));
    }
  } else if (resource == "services") {
    row = &ServiceRow;
    for (const char* name : {"Type", "Cluster-IP", "External-IP", "Port(s)", "Age"}) {
      defs.push_back(Column(name, "string", 0, ""));
    }
  } else if (resource == "persistentvolumeclaims") {
    row = &ClaimRow;
    for (const char* name :
         {"Status", "Volume", "Capacity", "Access Modes", "StorageClass", "Age"}) {
      defs.push_back(Column(name, "string", 0, ""));
    }
  } else {
    return nullptr;
  }
  json rows = json::array();
  for (const json& o : objects) {
    const json& meta =
        o.contains("metadata") && o["metadata"].is_object() ? o["metadata"] : EmptyObject();
    json cells = json::array({Str(meta, "name")});
    for (json& cell : row(o, now_unix_seconds)) cells.push_back(std::move(cell));
    rows.push_back({{"cells", std::move(cells)},
                    {"object",
                     {{"kind", "PartialObjectMetadata"},
                      {"apiVersion", "meta.k8s.io/v1"},
                      {"metadata", meta}}}});
  }
  return {{"kind", "Table"},
          {"apiVersion", "meta.k8s.io/v1"},
          {"metadata", {{"resourceVersion", list_resource_version}}},
          {"columnDefinitions", std::move(defs)},
          {"rows", std::move(rows)}};
}

}  // namespace antdt::kubeemu
