// A typed, schema-checked key/value configuration read from TOML.
//
// The schema (one ConfigField per dotted key, with type, default, range and
// help) is the single place where tunables live; files and `--set key=value`
// overrides are checked against it, and an unknown key, a wrong type or an
// out-of-range value is an InvalidArgument naming the key and what is allowed.
// Not thread-safe for writes; concurrent reads of a const Config are fine.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace bigbatch {

enum class ConfigType { kInt, kFloat, kBool, kString, kIntList, kFloatList };

using ConfigValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>,
                                 std::vector<double>>;

struct ConfigField {
  std::string key;  // dotted: "section.name"
  ConfigType type;
  ConfigValue defaultValue;
  std::string help;
  std::optional<double> min;         // inclusive bound for numbers and list elements
  std::optional<double> max;         // inclusive bound
  // Allowed values of a string field (empty: any). An integer field may list
  // "auto": the word is then accepted and stored as 0 (its range includes 0).
  std::vector<std::string> choices;
};

const char* configTypeName(ConfigType type);
std::string formatConfigValue(const ConfigValue& value);
// A range bound as the field's type prints it ("1", "0.5"); `unbounded` if none.
std::string formatConfigBound(const ConfigField& field, const std::optional<double>& bound,
                              const char* unbounded);

class Config {
 public:
  explicit Config(std::vector<ConfigField> schema);

  // Overlays a TOML document on the current values; `origin` names it in errors.
  void mergeToml(const std::string& tomlText, const std::string& origin);
  void mergeFile(const std::string& path);
  // A top-level table that another reader of the same files owns (the
  // `[tune]` table of `bigbatch tune`): merging skips it instead of calling
  // its keys unknown.
  void ignoreTable(const std::string& name) { ignoredTables_.push_back(name); }
  // Applies one `key=value` override; the value is read as a TOML value, and
  // a bare word is accepted for string fields.
  void set(const std::string& assignment);

  int64_t getInt(const std::string& key) const;
  double getFloat(const std::string& key) const;
  bool getBool(const std::string& key) const;
  const std::string& getString(const std::string& key) const;
  std::vector<int64_t> getIntList(const std::string& key) const;
  std::vector<double> getFloatList(const std::string& key) const;

  // Any key's value as formatConfigValue prints it (for comparisons and messages).
  std::string valueText(const std::string& key) const;

  // True when the value was given by a file or override rather than defaulted.
  bool isSet(const std::string& key) const;

  // Sets a value programmatically (checked like any other).
  void setValue(const std::string& key, ConfigValue value, const std::string& origin = "code");

  // The full resolved configuration as TOML, sections in schema order.
  std::string toToml() const;
  const std::vector<ConfigField>& schema() const { return schema_; }

 private:
  const ConfigField& field(const std::string& key, const std::string& origin) const;
  const ConfigValue& value(const std::string& key, ConfigType type) const;

  std::vector<ConfigField> schema_;
  std::map<std::string, size_t> index_;
  std::map<std::string, ConfigValue> values_;
  std::map<std::string, bool> explicit_;
  std::vector<std::string> ignoredTables_;
};

}  // namespace bigbatch
