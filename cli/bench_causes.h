// `antdt bench causes` (bench_causes.cc).
#pragma once

#include <functional>
#include <utility>

namespace CLI {
class App;
}  // namespace CLI

namespace antdt::cli {

// Declares `causes` under `bench`; returns it and what runs it.
std::pair<CLI::App*, std::function<int()>> AddBenchCausesCommand(CLI::App* bench);

}  // namespace antdt::cli
