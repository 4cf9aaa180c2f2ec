#include "backends/local/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace antdt::local {
namespace {

constexpr double kWidth = 900, kLeft = 70, kRight = 170, kPlotHeight = 295, kBottom = 45;
constexpr double kTitle = 24;  // above the plot: the y axis' label
// Mark badges: their height, the distance between their rows, the most a
// badge moves right of its line to stay in a row, the gap between two.
constexpr double kBadgeHeight = 14, kBadgeRow = 17, kMaxShift = 24, kGap = 2;
constexpr double kListRow = 16;
constexpr double kCharWidth = 7.5;  // at least a character's width at 11 px sans-serif
constexpr const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

struct Range {
  double lo = 0, hi = 1;
};

struct Box {
  double x = 0, y = 0, w = 0, h = 0;
};

// The data's x and y ranges, widened to the ticks' and never empty.
std::pair<Range, Range> Ranges(const LineChart& c) {
  Range x{0, c.x_max};
  double ylo = std::numeric_limits<double>::infinity(), yhi = -ylo;
  for (const ChartSeries& s : c.series) {
    for (const auto& [px, py] : s.points) {
      if (c.x_max <= 0) x.hi = std::max(x.hi, px);
      ylo = std::min(ylo, py);
      yhi = std::max(yhi, py);
    }
  }
  if (!(yhi >= ylo)) ylo = 0, yhi = 1;  // no points
  Range y{c.y_from_zero ? std::min(0.0, ylo) : ylo, yhi};
  if (x.hi <= x.lo) x.hi = x.lo + 1;
  if (y.hi <= y.lo) y.hi = y.lo + (y.lo == 0 ? 1 : std::fabs(y.lo) * 0.1);
  const std::vector<double> yt = NiceTicks(y.lo, y.hi, 5);
  y = {std::min(y.lo, yt.front()), std::max(y.hi, yt.back())};
  if (c.x_max <= 0) x.hi = std::max(x.hi, NiceTicks(x.lo, x.hi, 8).back());
  return {x, y};
}

std::string Num(double v) { return absl::StrFormat("%g", v); }

// Each badge (width `widths[i]`, centred on `centers[i]` if it can) in the
// first row where it overlaps none placed before it, moved at most kMaxShift
// right; y is the row's offset from the band's top.
std::vector<Box> PlaceBadges(const std::vector<double>& centers, const std::vector<double>& widths,
                             double lo, double hi) {
  std::vector<size_t> order(centers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return centers[a] < centers[b]; });
  std::vector<double> row_end;  // the right edge of each row's last badge
  std::vector<Box> boxes(centers.size());
  for (size_t i : order) {
    const double w = widths[i];
    const double ideal = std::clamp(centers[i] - w / 2, lo, std::max(lo, hi - w));
    size_t row = 0;
    double left = ideal;
    for (; row < row_end.size(); ++row) {
      left = std::max(ideal, row_end[row] + kGap);
      if (left - ideal <= kMaxShift && left + w <= hi) break;
    }
    if (row == row_end.size()) {
      row_end.push_back(lo);
      left = ideal;
    }
    row_end[row] = left + w;
    boxes[i] = {left, kBadgeRow * static_cast<double>(row), w, kBadgeHeight};
  }
  return boxes;
}

struct Layout {
  Range xr, yr;
  double top = kTitle;  // the plot's top edge
  std::vector<Box> badges;
  double list_top = 0, column_width = 0;
  size_t list_rows = 0;
  double height = 0;
  double X(double v) const {
    return kLeft + (kWidth - kLeft - kRight) * (v - xr.lo) / (xr.hi - xr.lo);
  }
  double Y(double v) const { return top + kPlotHeight * (yr.hi - v) / (yr.hi - yr.lo); }
};

Layout MakeLayout(const LineChart& c) {
  Layout l;
  std::tie(l.xr, l.yr) = Ranges(c);
  std::vector<double> centers, widths;
  size_t longest = 0;
  for (size_t i = 0; i < c.marks.size(); ++i) {
    centers.push_back(l.X(c.marks[i].x));
    widths.push_back(6 + kCharWidth * static_cast<double>(std::to_string(i + 1).size()));
    longest = std::max(longest, c.marks[i].label.size());
  }
  l.badges = PlaceBadges(centers, widths, kLeft, kWidth - kRight);
  double band = 0;
  for (Box& b : l.badges) {
    b.y += kTitle;
    band = std::max(band, b.y + b.h + 6 - kTitle);
  }
  l.top = kTitle + band;
  l.list_top = l.top + kPlotHeight + kBottom;
  l.column_width = kCharWidth * static_cast<double>(longest + 3) + 26;  // the number too
  const size_t columns =
      std::max<size_t>(1, static_cast<size_t>((kWidth - 10) / std::max(1.0, l.column_width)));
  l.list_rows = (c.marks.size() + columns - 1) / columns;
  l.height = l.list_top + kListRow * static_cast<double>(l.list_rows) + (l.list_rows ? 6 : 0);
  return l;
}

// The axes, their ticks and labels, and the grid.
std::string Frame(const LineChart& c, const Layout& l) {
  const double bottom = l.top + kPlotHeight;
  std::string svg = absl::StrFormat(
      "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#333\"/>\n"
      "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#333\"/>\n"
      "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n"
      "<text x=\"4\" y=\"%.0f\">%s</text>\n",
      kLeft, bottom, kWidth - kRight, bottom, kLeft, l.top, kLeft, bottom,
      (kLeft + kWidth - kRight) / 2, bottom + 36, HtmlEscape(c.x_label), kTitle - 10,
      HtmlEscape(c.y_label));
  for (double t : NiceTicks(l.xr.lo, l.xr.hi, 8)) {
    if (t > l.xr.hi) continue;
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                          "stroke=\"#333\"/><text class=\"x-tick\" x=\"%.1f\" y=\"%.1f\" "
                          "text-anchor=\"middle\">%s</text>\n",
                          l.X(t), bottom, l.X(t), bottom + 5, l.X(t), bottom + 17, Num(t));
  }
  for (double t : NiceTicks(l.yr.lo, l.yr.hi, 5)) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" "
                          "stroke=\"#ddd\"/><line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" "
                          "y2=\"%.1f\" stroke=\"#333\"/><text class=\"y-tick\" x=\"%.0f\" "
                          "y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                          kLeft, l.Y(t), kWidth - kRight, l.Y(t), kLeft - 5, l.Y(t), kLeft, l.Y(t),
                          kLeft - 7, l.Y(t) + 4, Num(t));
  }
  return svg;
}

// One polyline per series, and the legend.
std::string Series(const LineChart& c, const Layout& l) {
  std::string svg;
  for (size_t i = 0; i < c.series.size(); ++i) {
    std::string points;
    for (const auto& [x, y] : c.series[i].points) {
      absl::StrAppendFormat(&points, "%.1f,%.1f ", l.X(x), l.Y(y));
    }
    const char* color = kColors[i % 10];
    const std::string name = HtmlEscape(c.series[i].name);
    const double y = l.top + 16.0 * static_cast<double>(i);
    absl::StrAppendFormat(&svg,
                          "<polyline class=\"series\" data-name=\"%s\" fill=\"none\" "
                          "stroke=\"%s\" stroke-width=\"1.5\" points=\"%s\"/>\n"
                          "<rect x=\"%.0f\" y=\"%.1f\" width=\"12\" height=\"3\" "
                          "fill=\"%s\"/><text x=\"%.0f\" y=\"%.1f\" fill=\"%s\">%s</text>\n",
                          name, color, points, kWidth - kRight + 10, y + 4, color,
                          kWidth - kRight + 26, y + 10, color, name);
  }
  return svg;
}

// Each mark: its line through the plot, its numbered badge above, its label
// in the list below.
std::string Marks(const LineChart& c, const Layout& l) {
  std::string svg;
  for (size_t i = 0; i < c.marks.size(); ++i) {
    const ChartMark& m = c.marks[i];
    const Box& b = l.badges[i];
    const std::string color = HtmlEscape(m.color);
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
        "stroke-width=\"0.7\"/><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
        "stroke=\"%s\" stroke-dasharray=\"4 3\"/>\n<g class=\"mark-label\"><rect x=\"%.1f\" "
        "y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" rx=\"3\" fill=\"#fff\" stroke=\"%s\"/>"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"%s\">%d</text></g>\n",
        b.x + b.w / 2, b.y + b.h, l.X(m.x), l.top, color, l.X(m.x), l.top, l.X(m.x),
        l.top + kPlotHeight, color, b.x, b.y, b.w, b.h, color, b.x + b.w / 2, b.y + 11, color,
        static_cast<int>(i + 1));
    const double column = static_cast<double>(i / l.list_rows);
    const double row = static_cast<double>(i % l.list_rows);
    const double x = 10 + column * l.column_width, y = l.list_top + kListRow * row + 12;
    absl::StrAppendFormat(&svg,
                          "<g class=\"mark-entry\"><text x=\"%.1f\" y=\"%.1f\" "
                          "text-anchor=\"end\" font-weight=\"bold\" fill=\"%s\">%d</text>"
                          "<text x=\"%.1f\" y=\"%.1f\">%s</text></g>\n",
                          x + kCharWidth * 3, y, color, static_cast<int>(i + 1),
                          x + kCharWidth * 3 + 6, y, HtmlEscape(m.label));
  }
  return svg;
}

}  // namespace

std::vector<double> NiceTicks(double lo, double hi, int count) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / std::max(1, count);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power * 10;
  for (double m : {1.0, 2.0, 5.0}) {
    if (power * m >= raw) {
      step = power * m;
      break;
    }
  }
  std::vector<double> ticks;
  for (double t = std::floor(lo / step) * step; t <= hi + step * 0.999; t += step) {
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0 : t);
  }
  return ticks;
}

std::string LineChartSvg(const LineChart& c) {
  const Layout l = MakeLayout(c);
  return absl::StrCat(absl::StrFormat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
                                      "height=\"%.0f\" font-family=\"sans-serif\" "
                                      "font-size=\"11\">\n",
                                      kWidth, l.height),
                      Frame(c, l), Series(c, l), Marks(c, l), "</svg>\n");
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

}  // namespace antdt::local
