#include "bigbatch/common/rank_placement.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bigbatch/common/error.h"

namespace bigbatch {
namespace {

nlohmann::ordered_json toJson(const RankPlace& p) {
  nlohmann::ordered_json j;
  j["rank"] = p.rank;
  j["host"] = p.host.name;
  j["addresses"] = p.host.addresses;
  j["local_rank"] = p.localRank;
  j["slot"] = p.slot;
  return j;
}

RankPlace fromJson(const nlohmann::json& j) {
  RankPlace p;
  p.rank = j.at("rank").get<int>();
  p.host.name = j.at("host").get<std::string>();
  p.host.addresses = j.at("addresses").get<std::vector<std::string>>();
  p.localRank = j.at("local_rank").get<int>();
  p.slot = j.at("slot").get<int>();
  return p;
}

}  // namespace

std::string rankPlaceJson(const RankPlace& place) { return toJson(place).dump(); }

RankPlace parseRankPlace(const std::string& json) {
  try {
    return fromJson(nlohmann::json::parse(json));
  } catch (const nlohmann::json::exception& e) {
    BIGBATCH_THROW(InvalidArgument, "a rank's placement record '{}' does not parse: {}", json,
                   e.what());
  }
}

void writeRankPlacement(const std::string& path, const std::vector<RankPlace>& places) {
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  for (const RankPlace& p : places) all.push_back(toJson(p));
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << all.dump(1) << "\n";
    if (!out.flush()) BIGBATCH_THROW(IoError, "cannot write '{}'", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) BIGBATCH_THROW(IoError, "cannot rename '{}' to '{}': {}", tmp, path, ec.message());
}

std::vector<RankPlace> readRankPlacement(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  const nlohmann::json all = nlohmann::json::parse(in, nullptr, false);
  if (all.is_discarded() || !all.is_array()) return {};
  std::vector<RankPlace> out;
  try {
    for (const auto& j : all) out.push_back(fromJson(j));
  } catch (const nlohmann::json::exception&) {
    return {};
  }
  return out;
}

}  // namespace bigbatch
