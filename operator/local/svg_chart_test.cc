#include "operator/local/svg_chart.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace antdt::local {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

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
  EXPECT_THAT(svg, HasSubstr(">KILL_RESTART worker-1</text>"));
  EXPECT_THAT(svg, HasSubstr("</svg>"));
  EXPECT_THAT(LineChartSvg({}), HasSubstr("</svg>"));  // no data: still a chart
}

}  // namespace
}  // namespace antdt::local
