// One device's training rate as a function of its per-device batch B:
//
//   step(B) = fixed + B · perImage
//
// a fixed cost per step — what does not grow with the batch: the
// optimizer's pass over the weights, the kernels' launches and the step's
// synchronisations, the reduction's latency where the rate was measured on
// several devices — plus a cost per image (the convolutions' FLOPs). The
// same form as Hockney's α-β for a message (latency + size / bandwidth), and
// the reason a GPU loses its large-batch rate at 16 or 40 images: at
// MLPerf's 400 per H100 the fixed part is a few percent of a 56 ms step, at
// 16 it is most of a 6 ms one.
//
// Fitted by least squares on the points' step times, each weighted by
// 1/step² (relative errors, so a 6 ms step counts as much as a 60 ms one);
// a fixed cost the fit would make negative (noise on points of large
// batches) is taken as 0, the per-image cost refitted through the origin.
// With one point there is nothing to fit: the rate is taken as the same at
// every batch (no fixed cost), and describe() says so.
//
// Value type; thread-safe.
#pragma once

#include <string>
#include <vector>

namespace bigbatch::plan {

struct RatePoint {
  double imgS = 0;  // images per second of one device
  int batch = 0;    // at this per-device batch
};

// "7161@400,4908@50" (rate@batch, as `bigbatch bench step --batch A,B,...`
// prints), or a bare rate "1442.6", taken at `defaultBatch`. Throws
// InvalidArgument naming the item and the form it wants.
std::vector<RatePoint> parseRatePoints(const std::string& text, int defaultBatch);

class DeviceCurve {
 public:
  // Throws InvalidArgument for no point, a rate or batch that is not
  // positive, or several points all at one batch.
  static DeviceCurve fit(const std::vector<RatePoint>& points);

  double stepSeconds(double batch) const { return fixedS_ + batch * perImageS_; }
  double imgS(double batch) const { return batch / stepSeconds(batch); }
  double fixedS() const { return fixedS_; }
  double perImageS() const { return perImageS_; }
  const std::vector<RatePoint>& points() const { return points_; }
  // Per point: the curve's rate at its batch over the measured one, minus 1.
  std::vector<double> residuals() const;
  // "step = 3.66 ms + 0.1305 ms x B (2 points; residuals +0.0 %, -0.0 %)",
  // or what one point assumes.
  std::string describe() const;

 private:
  double fixedS_ = 0, perImageS_ = 0;
  bool fixedAssumed_ = false;  // one point, or a negative fit taken as 0
  std::vector<RatePoint> points_;
};

}  // namespace bigbatch::plan
