// A job's identity where jobs of many namespaces meet (the Monitor, the
// agents' directive tables): "namespace/name", or the bare name when the
// namespace is not known (an SDK that does not report one, a local job of
// an older runner). Names are DNS-1123 labels, so '/' cannot occur in either.
#pragma once

#include <string>
#include <utility>

namespace antdt {

inline std::string JobKey(const std::string& ns, const std::string& name) {
  return ns.empty() ? name : ns + "/" + name;
}

// The namespace and name of a JobKey ("" namespace for a bare name).
inline std::pair<std::string, std::string> SplitJobKey(const std::string& key) {
  const size_t slash = key.find('/');
  if (slash == std::string::npos) return {"", key};
  return {key.substr(0, slash), key.substr(slash + 1)};
}

}  // namespace antdt
