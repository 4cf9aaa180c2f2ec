// The scenarios `antdt sim` reads: a scenario file as `antdt run` reads it
// (nodes and slowdowns, manifest::ParseScenario), or one that draws its
// stragglers for many nodes:
//
//   name: scale-10k
//   generate:
//     workers: 10000         # worker nodes, node-0 ... (and as many workers)
//     spares: 100            # spare-0 ...
//     seed: 7
//     deterministic: {fraction: 0.02, factor: 1.5}
//     transient: {fraction: 0.05, factor: [2, 4], start: [0s, 60s], duration: [5s, 20s]}
//     persistent: {fraction: 0.01, factor: [2, 5], start: [0s, 30s]}
//     leader: {fraction: 0.01, speed: 1.5}
//
// Fractions are of the worker nodes, each node drawing one kind at most;
// [a, b] draws uniformly between a and b. Errors name the field.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "api/manifest/manifest.h"

namespace antdt::sim {

absl::StatusOr<manifest::Scenario> ParseSimScenario(const std::string& yaml);

}  // namespace antdt::sim
