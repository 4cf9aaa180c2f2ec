#include "operator/local/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace antdt::local {
namespace {

constexpr double kWidth = 900, kHeight = 360, kLeft = 70, kRight = 170, kTop = 20, kBottom = 45;
constexpr const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

struct Range {
  double lo = 0, hi = 1;
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
  const auto [xr, yr] = Ranges(c);
  auto X = [&, xr = xr](double v) {
    return kLeft + (kWidth - kLeft - kRight) * (v - xr.lo) / (xr.hi - xr.lo);
  };
  auto Y = [&, yr = yr](double v) {
    return kHeight - kBottom - (kHeight - kBottom - kTop) * (v - yr.lo) / (yr.hi - yr.lo);
  };
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n"
      "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#333\"/>\n"
      "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#333\"/>\n"
      "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">%s</text>\n"
      "<text x=\"4\" y=\"%.0f\">%s</text>\n",
      kWidth, kHeight, kLeft, kHeight - kBottom, kWidth - kRight, kHeight - kBottom, kLeft, kTop,
      kLeft, kHeight - kBottom, (kLeft + kWidth - kRight) / 2, kHeight - 6, HtmlEscape(c.x_label),
      kTop - 8, HtmlEscape(c.y_label));
  for (double t : NiceTicks(xr.lo, xr.hi, 8)) {
    if (t > xr.hi) continue;
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#333\"/>"
                          "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%s</text>\n",
                          X(t), kHeight - kBottom, X(t), kHeight - kBottom + 4, X(t),
                          kHeight - kBottom + 16, Num(t));
  }
  for (double t : NiceTicks(yr.lo, yr.hi, 5)) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                          "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                          kLeft, Y(t), kWidth - kRight, Y(t), kLeft - 4, Y(t) + 4, Num(t));
  }
  for (size_t i = 0; i < c.series.size(); ++i) {
    std::string points;
    for (const auto& [x, y] : c.series[i].points) {
      absl::StrAppendFormat(&points, "%.1f,%.1f ", X(x), Y(y));
    }
    const char* color = kColors[i % 10];
    absl::StrAppendFormat(&svg,
                          "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
                          "points=\"%s\"/>\n<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"3\" "
                          "fill=\"%s\"/><text x=\"%.0f\" y=\"%.0f\" fill=\"%s\">%s</text>\n",
                          color, points, kWidth - kRight + 10, kTop + 16.0 * i + 4, color,
                          kWidth - kRight + 26, kTop + 16.0 * i + 10, color,
                          HtmlEscape(c.series[i].name));
  }
  for (const ChartMark& m : c.marks) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#000\" "
                          "stroke-dasharray=\"4 3\"/><text x=\"%.1f\" y=\"%.0f\">%s</text>\n",
                          X(m.x), kTop, X(m.x), kHeight - kBottom, X(m.x) + 3, kTop + 10,
                          HtmlEscape(m.label));
  }
  svg += "</svg>\n";
  return svg;
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
