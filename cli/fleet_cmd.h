// `antdt sim --fleet FILE` (fleet_cmd.cc).
#pragma once

#include <string>

namespace antdt::cli {

// Runs the fleet file at `path` over seeds 1..`seeds` and writes its results
// into `out`; the exit code (2: bad input, nothing run).
int SimulateFleet(const std::string& path, int seeds, const std::string& out);

}  // namespace antdt::cli
