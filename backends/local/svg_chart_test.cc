#include "backends/local/svg_chart.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

namespace antdt::local {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(NiceTicks, RoundStepsCoveringTheRange) {
  EXPECT_THAT(NiceTicks(0, 100, 5), ElementsAre(0, 20, 40, 60, 80, 100));
  EXPECT_THAT(NiceTicks(0, 7.3, 8), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8));
  EXPECT_THAT(NiceTicks(0.42, 1.37, 5),
              ::testing::Pointwise(::testing::DoubleNear(1e-9),
                                   std::vector<double>{0.4, 0.6, 0.8, 1.0, 1.2, 1.4}));
  EXPECT_THAT(NiceTicks(3, 3, 5), ElementsAre(3));
}

TEST(LineChartSvg, AxesTicksLegendAndOnePolylinePerSeries) {
  LineChart c;
  c.x_label = "time (s)";
  c.y_label = "loss";
  c.y_from_zero = false;
  c.series = {{"antdt-nd", {{0, 1.4}, {10, 0.8}}}, {"plain <baseline>", {{0, 1.4}, {20, 0.6}}}};
  c.marks = {{5, "KILL_RESTART worker-1"}};
  const std::string svg = LineChartSvg(c);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  size_t polylines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos;
       at = svg.find("<polyline", at + 1)) {
    ++polylines;
  }
  EXPECT_EQ(polylines, 2u);
  EXPECT_THAT(svg, HasSubstr(">antdt-nd</text>"));
  EXPECT_THAT(svg, HasSubstr(">plain &lt;baseline&gt;</text>"));
  EXPECT_THAT(svg, HasSubstr(">time (s)</text>"));
  EXPECT_THAT(svg, HasSubstr(">20</text>"));   // an x tick at the end
  EXPECT_THAT(svg, HasSubstr(">0.6</text>"));  // a y tick at the lowest loss
  EXPECT_THAT(svg, HasSubstr("<g class=\"mark-label\">"));
  EXPECT_THAT(svg, HasSubstr("font-weight=\"bold\" fill=\"#000\">1</text>"));
  EXPECT_THAT(svg, HasSubstr(">KILL_RESTART worker-1</text></g>"));
  EXPECT_THAT(svg, HasSubstr("</svg>"));
  EXPECT_THAT(LineChartSvg({}), HasSubstr("</svg>"));  // no data: still a chart
}

struct Rect {
  double x, y, w, h;
};

// The badges' rectangles, in the order of the marks.
std::vector<Rect> Badges(const std::string& svg) {
  static const std::regex kBadge(
      "<g class=\"mark-label\"><rect x=\"([0-9.]+)\" y=\"([0-9.]+)\" width=\"([0-9.]+)\" "
      "height=\"([0-9.]+)\"");
  std::vector<Rect> out;
  for (std::sregex_iterator it(svg.begin(), svg.end(), kBadge), end; it != end; ++it) {
    out.push_back(
        {std::stod((*it)[1]), std::stod((*it)[2]), std::stod((*it)[3]), std::stod((*it)[4])});
  }
  return out;
}

int Overlaps(const std::vector<Rect>& boxes) {
  int n = 0;
  for (size_t i = 0; i < boxes.size(); ++i) {
    for (size_t j = i + 1; j < boxes.size(); ++j) {
      const Rect& a = boxes[i];
      const Rect& b = boxes[j];
      n += a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
    }
  }
  return n;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(LineChartSvg, FortyMarksWithinTenSecondsNeverOverlap) {
  for (double x_max : {10.0, 60.0, 600.0, 3600.0}) {
    SCOPED_TRACE(x_max);
    LineChart c;
    c.x_max = x_max;
    c.series = {{"worker-0", {{0, 100}, {x_max, 120}}}};
    for (int i = 0; i < 40; ++i) {
      c.marks.push_back({x_max / 2 + 0.25 * i, "ADJUST_BS worker-" + std::to_string(i % 8)});
    }
    const std::string svg = LineChartSvg(c);
    const std::vector<Rect> badges = Badges(svg);
    ASSERT_EQ(badges.size(), 40u);
    EXPECT_EQ(Overlaps(badges), 0);
    // Above the plot (whose y axis starts at the badges' band's end) and
    // inside the chart's width.
    std::smatch axis;
    ASSERT_TRUE(
        std::regex_search(svg, axis, std::regex("<line x1=\"70\" y1=\"([0-9.]+)\" x2=\"70\"")));
    for (const Rect& b : badges) {
      EXPECT_LE(b.y + b.h, std::stod(axis[1]));
      EXPECT_GE(b.x, 70);
      EXPECT_LE(b.x + b.w, 730);
    }
    // Every mark listed below with its number.
    EXPECT_EQ(Count(svg, "<g class=\"mark-entry\">"), 40u);
    EXPECT_TRUE(std::regex_search(
        svg,
        std::regex(">40</text><text x=\"[0-9.]+\" y=\"[0-9.]+\">ADJUST_BS worker-7</text></g>")));
  }
  // Marks at one instant: stacked, not drawn over each other.
  LineChart same;
  same.marks.assign(12, {5, "KILL_RESTART worker-1"});
  EXPECT_EQ(Overlaps(Badges(LineChartSvg(same))), 0);
}

TEST(LineChartSvg, TicksAndTheirLabelsOnBothAxes) {
  LineChart c;
  c.series = {{"worker-0", {{0, 0}, {63.5, 1450}}}};
  const std::string svg = LineChartSvg(c);
  EXPECT_GE(Count(svg, "class=\"x-tick\""), 5u);
  EXPECT_GE(Count(svg, "class=\"y-tick\""), 3u);
  EXPECT_TRUE(std::regex_search(svg, std::regex("class=\"x-tick\"[^>]*>60</text>"))) << svg;
  EXPECT_TRUE(std::regex_search(svg, std::regex("class=\"y-tick\"[^>]*>1500</text>"))) << svg;
  EXPECT_THAT(svg, Not(HasSubstr("mark-label")));
}

}  // namespace
}  // namespace antdt::local
