// Hand-written SVG line charts for the run report (each worker's throughput)
// and the benchmark (each run's loss): axes with ticks, one polyline per
// series, a legend, vertical marks. Pure: data in, SVG text out.
//
// Marks are numbered: the number sits in a badge above the plot, in the first
// row where it overlaps no other badge (so any number of marks at one time
// stay readable), and the numbered labels are listed in columns below the
// chart. Classes for scripts reading the rendered chart: "series" (a
// polyline, with data-name), "mark-label" (a badge), "mark-entry" (a label
// in the list).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace antdt::local {

struct ChartSeries {
  std::string name;                               // in the legend
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in order
};

struct ChartMark {  // a dashed vertical line at x, numbered, its label listed below
  double x = 0;
  std::string label;
  std::string color = "#000";
};

struct LineChart {
  std::string x_label;
  std::string y_label;
  std::vector<ChartSeries> series;
  std::vector<ChartMark> marks;
  double x_max = 0;         // the x axis' end; 0: the largest x, up to a round tick
  bool y_from_zero = true;  // false: the y axis spans the data (a loss curve)
};

// The chart as one <svg> element, 900 wide with the legend on the right; 360
// high plus the rows of badges above and of the list below.
std::string LineChartSvg(const LineChart& chart);

// `s` with < > & " escaped, for SVG and HTML text.
std::string HtmlEscape(const std::string& s);

// About `count` round tick values (1, 2 or 5 times a power of ten) covering [lo, hi].
std::vector<double> NiceTicks(double lo, double hi, int count);

}  // namespace antdt::local
