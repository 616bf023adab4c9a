#include "bigbatch/common/config.h"

#include <fmt/ranges.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "bigbatch/common/error.h"

namespace bigbatch {
namespace {

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string rangeText(const ConfigField& f) {
  return fmt::format("[{}, {}]", formatConfigBound(f, f.min, "-inf"),
                     formatConfigBound(f, f.max, "inf"));
}

void checkNumber(const ConfigField& f, double v, const std::string& origin) {
  if (!std::isfinite(v) || (f.min && v < *f.min) || (f.max && v > *f.max)) {
    BIGBATCH_THROW(InvalidArgument, "{}: config key '{}' = {} is out of range; allowed {}",
                   origin, f.key, formatConfigBound(f, v, "inf"), rangeText(f));
  }
}

// Converts a TOML node to the field's type, or throws naming key and type.
ConfigValue fromNode(const ConfigField& f, const toml::node& node, const std::string& origin) {
  auto wrongType = [&](const char* got) {
    BIGBATCH_THROW(InvalidArgument, "{}: config key '{}' must be {} (got {}); {}", origin, f.key,
                   configTypeName(f.type), got, f.help);
  };
  const char* got = node.is_integer()  ? "an integer"
                    : node.is_floating_point() ? "a float"
                    : node.is_boolean() ? "a boolean"
                    : node.is_string()  ? "a string"
                    : node.is_array()   ? "an array"
                    : node.is_table()   ? "a table"
                                        : "another TOML type";
  switch (f.type) {
    case ConfigType::kInt:
      if (node.is_string() && *node.value<std::string>() == "auto" &&
          std::find(f.choices.begin(), f.choices.end(), "auto") != f.choices.end()) {
        return int64_t{0};
      }
      if (!node.is_integer()) wrongType(got);
      checkNumber(f, static_cast<double>(*node.value<int64_t>()), origin);
      return *node.value<int64_t>();
    case ConfigType::kFloat:
      if (!node.is_number()) wrongType(got);
      checkNumber(f, *node.value<double>(), origin);
      return *node.value<double>();
    case ConfigType::kBool:
      if (!node.is_boolean()) wrongType(got);
      return *node.value<bool>();
    case ConfigType::kString: {
      if (!node.is_string()) wrongType(got);
      std::string s = *node.value<std::string>();
      if (!f.choices.empty() &&
          std::find(f.choices.begin(), f.choices.end(), s) == f.choices.end()) {
        BIGBATCH_THROW(InvalidArgument, "{}: config key '{}' = \"{}\" is not allowed; choose one of: {}",
                       origin, f.key, s, fmt::join(f.choices, ", "));
      }
      return s;
    }
    case ConfigType::kIntList:
    case ConfigType::kFloatList: {
      if (!node.is_array()) wrongType(got);
      std::vector<int64_t> ints;
      std::vector<double> floats;
      for (const auto& el : *node.as_array()) {
        bool ok = f.type == ConfigType::kIntList ? el.is_integer() : el.is_number();
        if (!ok) wrongType("an array with an element of another type");
        double v = *el.value<double>();
        checkNumber(f, v, origin);
        if (f.type == ConfigType::kIntList) ints.push_back(*el.value<int64_t>());
        floats.push_back(v);
      }
      if (f.type == ConfigType::kIntList) return ints;
      return floats;
    }
  }
  return {};
}

void flatten(const toml::table& table, const std::string& prefix,
             std::vector<std::pair<std::string, const toml::node*>>& out) {
  for (const auto& [k, node] : table) {
    std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (node.is_table()) {
      flatten(*node.as_table(), key, out);
    } else {
      out.emplace_back(key, &node);
    }
  }
}

}  // namespace

const char* configTypeName(ConfigType type) {
  switch (type) {
    case ConfigType::kInt: return "an integer";
    case ConfigType::kFloat: return "a number";
    case ConfigType::kBool: return "a boolean (true or false)";
    case ConfigType::kString: return "a string";
    case ConfigType::kIntList: return "an array of integers";
    case ConfigType::kFloatList: return "an array of numbers";
  }
  return "?";
}

std::string formatConfigBound(const ConfigField& field, const std::optional<double>& bound,
                              const char* unbounded) {
  if (!bound || std::isinf(*bound)) return unbounded;
  if (field.type == ConfigType::kInt || field.type == ConfigType::kIntList) {
    return std::to_string(static_cast<int64_t>(*bound));
  }
  return formatConfigValue(ConfigValue(*bound));
}

std::string formatConfigValue(const ConfigValue& value) {
  struct Visitor {
    std::string operator()(int64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const {
      if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
      std::string s = fmt::format("{}", v);
      if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
      return s;
    }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::string& v) const {
      std::ostringstream os;
      os << toml::value<std::string>(v);
      return os.str();
    }
    std::string operator()(const std::vector<int64_t>& v) const {
      return fmt::format("[{}]", fmt::join(v, ", "));
    }
    std::string operator()(const std::vector<double>& v) const {
      std::vector<std::string> parts;
      for (double d : v) parts.push_back((*this)(d));
      return fmt::format("[{}]", fmt::join(parts, ", "));
    }
  };
  return std::visit(Visitor{}, value);
}

Config::Config(std::vector<ConfigField> schema) : schema_(std::move(schema)) {
  for (size_t i = 0; i < schema_.size(); ++i) {
    index_[schema_[i].key] = i;
    values_[schema_[i].key] = schema_[i].defaultValue;
  }
}

const ConfigField& Config::field(const std::string& key, const std::string& origin) const {
  auto it = index_.find(key);
  if (it != index_.end()) return schema_[it->second];
  std::string best;
  size_t bestDistance = 4;  // suggest only near misses
  for (const auto& f : schema_) {
    // The distance is at least the length difference: skip hopeless keys
    // (a long garbage key would otherwise cost O(length) per schema entry).
    const size_t gap = key.size() > f.key.size() ? key.size() - f.key.size() : f.key.size() - key.size();
    if (gap >= bestDistance) continue;
    size_t d = editDistance(key, f.key);
    if (d < bestDistance) bestDistance = d, best = f.key;
  }
  std::string hint = best.empty() ? "" : fmt::format("did you mean '{}'? ", best);
  BIGBATCH_THROW(InvalidArgument, "{}: unknown config key '{}'; {}(`bigbatch keys` lists every key)",
                 origin, key.size() > 100 ? key.substr(0, 100) + "..." : key, hint);
}

void Config::mergeToml(const std::string& tomlText, const std::string& origin) {
  toml::table table;
  try {
    table = toml::parse(tomlText, origin);
  } catch (const toml::parse_error& e) {
    const auto& src = e.source();
    BIGBATCH_THROW(InvalidArgument, "{}:{}:{}: TOML syntax error: {}", origin, src.begin.line,
                   src.begin.column, e.description());
  }
  for (const auto& name : ignoredTables_) table.erase(name);
  std::vector<std::pair<std::string, const toml::node*>> entries;
  flatten(table, "", entries);
  for (const auto& [key, node] : entries) {
    const ConfigField& f = field(key, origin);
    values_[key] = fromNode(f, *node, origin);
    explicit_[key] = true;
  }
}

void Config::mergeFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    BIGBATCH_THROW(IoError, "cannot open config file '{}': {}; pass an existing TOML file "
                   "(recipes live in configs/)", path, std::strerror(errno));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  mergeToml(ss.str(), path);
}

void Config::set(const std::string& assignment) {
  const std::string origin = fmt::format("--set {}", assignment);
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    BIGBATCH_THROW(InvalidArgument, "{}: expected key=value, e.g. --set optim.lr=0.1", origin);
  }
  std::string key = assignment.substr(0, eq);
  std::string text = assignment.substr(eq + 1);
  const ConfigField& f = field(key, origin);
  toml::table table;
  try {
    table = toml::parse("v = " + text);
  } catch (const toml::parse_error&) {
    const bool word = f.type == ConfigType::kInt &&
                      std::find(f.choices.begin(), f.choices.end(), text) != f.choices.end();
    if (f.type != ConfigType::kString && !word) {
      BIGBATCH_THROW(InvalidArgument, "{}: '{}' is not {}; {}", origin, text,
                     configTypeName(f.type), f.help);
    }
    table = toml::table{{"v", text}};  // a bare word for a string field
  }
  if (f.type == ConfigType::kString && !table.get("v")->is_string()) {
    table = toml::table{{"v", text}};  // e.g. --set run.name=123 names the run "123"
  }
  values_[key] = fromNode(f, *table.get("v"), origin);
  explicit_[key] = true;
}

void Config::setValue(const std::string& key, ConfigValue value, const std::string& origin) {
  const ConfigField& f = field(key, origin);
  toml::table table;
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                      std::is_same_v<T, std::vector<double>>) {
          toml::array arr;
          for (auto x : v) arr.push_back(x);
          table.insert("v", arr);
        } else {
          table.insert("v", v);
        }
      },
      value);
  values_[key] = fromNode(f, *table.get("v"), origin);
  explicit_[key] = true;
}

const ConfigValue& Config::value(const std::string& key, ConfigType type) const {
  const ConfigField& f = field(key, "internal");
  if (f.type != type) {
    BIGBATCH_THROW(InvalidArgument, "internal: config key '{}' is {}, read as {}", key,
                   configTypeName(f.type), configTypeName(type));
  }
  return values_.at(key);
}

std::string Config::valueText(const std::string& key) const {
  field(key, "internal");
  return formatConfigValue(values_.at(key));
}

int64_t Config::getInt(const std::string& key) const {
  return std::get<int64_t>(value(key, ConfigType::kInt));
}
double Config::getFloat(const std::string& key) const {
  const ConfigValue& v = value(key, ConfigType::kFloat);
  if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  return std::get<double>(v);
}
bool Config::getBool(const std::string& key) const {
  return std::get<bool>(value(key, ConfigType::kBool));
}
const std::string& Config::getString(const std::string& key) const {
  return std::get<std::string>(value(key, ConfigType::kString));
}
std::vector<int64_t> Config::getIntList(const std::string& key) const {
  return std::get<std::vector<int64_t>>(value(key, ConfigType::kIntList));
}
std::vector<double> Config::getFloatList(const std::string& key) const {
  return std::get<std::vector<double>>(value(key, ConfigType::kFloatList));
}
bool Config::isSet(const std::string& key) const {
  field(key, "internal");
  auto it = explicit_.find(key);
  return it != explicit_.end() && it->second;
}

std::string Config::toToml() const {
  std::ostringstream os;
  std::string section;
  for (const auto& f : schema_) {
    auto dot = f.key.rfind('.');
    std::string s = dot == std::string::npos ? "" : f.key.substr(0, dot);
    std::string name = dot == std::string::npos ? f.key : f.key.substr(dot + 1);
    if (s != section) {
      os << (section.empty() && os.tellp() == 0 ? "" : "\n") << "[" << s << "]\n";
      section = s;
    }
    os << name << " = " << formatConfigValue(values_.at(f.key)) << "\n";
  }
  return os.str();
}

}  // namespace bigbatch
