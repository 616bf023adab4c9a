#include "bigbatch/plan/device_curve.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "bigbatch/common/error.h"
#include "bigbatch/common/parse_number.h"

namespace bigbatch::plan {
namespace {

double parseNumber(const std::string& text, const std::string& item) {
  const std::optional<double> v = parseWholeDouble(text);
  BIGBATCH_REQUIRE(v && *v > 0, InvalidArgument,
                   "--device-img-s '{}': give a positive rate, or rate@batch items separated by "
                   "commas (e.g. 7161@400,4908@50)",
                   item);
  return *v;
}

}  // namespace

std::vector<RatePoint> parseRatePoints(const std::string& text, int defaultBatch) {
  std::vector<RatePoint> points;
  std::istringstream items(text);
  for (std::string item; std::getline(items, item, ',');) {
    if (item.empty()) continue;
    const size_t at = item.find('@');
    RatePoint p;
    p.imgS = parseNumber(item.substr(0, at), item);
    if (at == std::string::npos) {
      BIGBATCH_REQUIRE(defaultBatch >= 1, InvalidArgument,
                       "--device-img-s '{}' gives no batch: give rate@batch, or "
                       "--batch-per-device for the rate's batch",
                       item);
      p.batch = defaultBatch;
    } else {
      const double b = parseNumber(item.substr(at + 1), item);
      BIGBATCH_REQUIRE(b == std::floor(b), InvalidArgument,
                       "--device-img-s '{}': the batch after @ is a whole number", item);
      p.batch = static_cast<int>(b);
    }
    points.push_back(p);
  }
  BIGBATCH_REQUIRE(!points.empty(), InvalidArgument,
                   "--device-img-s is empty: give a rate, or rate@batch items (e.g. "
                   "7161@400,4908@50)");
  return points;
}

DeviceCurve DeviceCurve::fit(const std::vector<RatePoint>& points) {
  BIGBATCH_REQUIRE(!points.empty(), InvalidArgument, "a device curve needs at least one point");
  DeviceCurve c;
  c.points_ = points;
  for (const RatePoint& p : points) {
    BIGBATCH_REQUIRE(p.imgS > 0 && p.batch >= 1, InvalidArgument,
                     "a device rate {} at batch {}: both must be positive", p.imgS, p.batch);
  }
  const bool oneBatch = std::all_of(points.begin(), points.end(),
                                    [&](const RatePoint& p) { return p.batch == points[0].batch; });
  if (points.size() == 1 || oneBatch) {
    BIGBATCH_REQUIRE(points.size() == 1, InvalidArgument,
                     "--device-img-s: {} points all at batch {} cannot separate a fixed cost per "
                     "step from a cost per image; give rates at two or more batches",
                     points.size(), points[0].batch);
    c.perImageS_ = 1.0 / points[0].imgS;
    c.fixedAssumed_ = true;
    return c;
  }
  // Weighted least squares of T = t0 + c·B, weights 1/T².
  double sw = 0, swb = 0, swbb = 0, swt = 0, swbt = 0;
  for (const RatePoint& p : points) {
    const double t = p.batch / p.imgS, w = 1.0 / (t * t);
    sw += w;
    swb += w * p.batch;
    swbb += w * p.batch * p.batch;
    swt += w * t;
    swbt += w * p.batch * t;
  }
  const double det = sw * swbb - swb * swb;
  c.fixedS_ = (swbb * swt - swb * swbt) / det;
  c.perImageS_ = (sw * swbt - swb * swt) / det;
  if (c.fixedS_ < 0) {  // through the origin: c = Σ w·B·T / Σ w·B²
    c.fixedS_ = 0;
    c.perImageS_ = swbt / swbb;
    c.fixedAssumed_ = true;
  }
  return c;
}

std::vector<double> DeviceCurve::residuals() const {
  std::vector<double> out;
  for (const RatePoint& p : points_) out.push_back(imgS(p.batch) / p.imgS - 1.0);
  return out;
}

std::string DeviceCurve::describe() const {
  if (points_.size() == 1) {
    return fmt::format(
        "{:.1f} img/s at every batch (one point, at {}: no fixed cost per step assumed; give "
        "rates at several batches, rate@batch, to fit one)",
        points_[0].imgS, points_[0].batch);
  }
  std::string residual;
  for (const double r : residuals())
    residual += fmt::format("{}{:+.1f} %", residual.empty() ? "" : ", ", 100 * r);
  return fmt::format(
      "step = {:.3f} ms + {:.4f} ms x B, {:.0f} img/s at large batches ({} points, "
      "residuals {}){}",
      fixedS_ * 1e3, perImageS_ * 1e3, 1.0 / perImageS_, points_.size(), residual,
      fixedAssumed_ ? "; the fit's fixed cost came out negative and is taken as 0" : "");
}

}  // namespace bigbatch::plan
