// Python string formatting for templates: `fmt % args` (and the `format` filter, which is the
// same) and str.format(). Declared in ops.h (percent_format) and methods.h (str_format).
#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "tokenizer/jinja/methods.h"
#include "tokenizer/jinja/ops.h"

namespace lt::jinja {

namespace {

struct Spec {
  std::string flags;
  int width = -1, precision = -1;
  char type = 's';
};

std::string pad(std::string s, const Spec& sp, bool numeric) {
  const int n = int(s.size());  // ASCII for numbers; strings pad by bytes, close enough for templates
  if (sp.width <= n) return s;
  const size_t fill = size_t(sp.width - n);
  if (sp.flags.find('-') != std::string::npos) return s + std::string(fill, ' ');
  if (numeric && sp.flags.find('0') != std::string::npos) {
    size_t sign = (!s.empty() && (s[0] == '-' || s[0] == '+' || s[0] == ' ')) ? 1 : 0;
    return s.substr(0, sign) + std::string(fill, '0') + s.substr(sign);
  }
  return std::string(fill, ' ') + s;
}

std::string sign_prefix(bool negative, const Spec& sp) {
  if (negative) return "-";
  if (sp.flags.find('+') != std::string::npos) return "+";
  if (sp.flags.find(' ') != std::string::npos) return " ";
  return "";
}

std::string format_one(const Value& v, const Spec& sp) {
  switch (sp.type) {
    case 's': case 'r': case 'a': {
      std::string s = sp.type == 's' ? v.str() : v.repr();
      if (sp.precision >= 0 && int(s.size()) > sp.precision) s.resize(size_t(sp.precision));
      return pad(s, sp, false);
    }
    case 'c':
      if (v.is_string()) return pad(v.as_string(), sp, false);
      return pad(std::string(1, char(v.as_int())), sp, false);
    case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': {
      if (!v.is_number()) raise(fmt::format("%{} format: a real number is required, not {}", sp.type, v.type_name()));
      int64_t i = v.is_float() ? float_to_int(v.as_double(), fmt::format("%{} format", sp.type)) : v.as_int();
      uint64_t mag = i < 0 ? uint64_t(-(i + 1)) + 1 : uint64_t(i);
      std::string digits = sp.type == 'x' ? fmt::format("{:x}", mag) : sp.type == 'X' ? fmt::format("{:X}", mag)
                         : sp.type == 'o' ? fmt::format("{:o}", mag) : std::to_string(mag);
      return pad(sign_prefix(i < 0, sp) + digits, sp, true);
    }
    case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': {
      if (!v.is_number()) raise(fmt::format("%{} format: a real number is required, not {}", sp.type, v.type_name()));
      double d = v.as_double();
      int prec = sp.precision >= 0 ? sp.precision : 6;
      std::string body = fmt::format(fmt::runtime(fmt::format("{{:.{}{}}}", prec, sp.type)), std::fabs(d));  // a valid spec
      return pad(sign_prefix(std::signbit(d), sp) + body, sp, true);
    }
    default: raise(fmt::format("unsupported format character '{}'", sp.type));
  }
}

}  // namespace

std::string percent_format(std::string_view f, const Value& args) {
  std::vector<Value> pos;
  const DictObj* mapping = nullptr;
  if (args.is_list() && args.as_list()->tuple) pos = args.as_list()->items;
  else if (args.is_dict()) mapping = args.as_dict().get();
  else pos.push_back(args);
  size_t next_arg = 0;
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out += f[i];
      continue;
    }
    if (++i >= f.size()) raise("incomplete format");
    if (f[i] == '%') {
      out += '%';
      continue;
    }
    const Value* arg = nullptr;
    if (f[i] == '(') {
      size_t close = f.find(')', i);
      if (close == std::string_view::npos || !mapping) raise("format requires a mapping");
      arg = mapping->find(f.substr(i + 1, close - i - 1));
      if (!arg) raise(fmt::format("KeyError: '{}'", f.substr(i + 1, close - i - 1)));
      i = close + 1;
    }
    Spec sp;
    while (i < f.size() && std::string_view("-+ 0#").find(f[i]) != std::string_view::npos) sp.flags += f[i++];
    auto number = [&](const char* what) {  // at most limits().made (Python: "width too big")
      int n = 0;
      while (i < f.size() && f[i] >= '0' && f[i] <= '9') {
        n = n * 10 + (f[i++] - '0');
        if (n > limits().made) raise(fmt::format("{} too big (over {})", what, limits().made));
      }
      return n;
    };
    if (i < f.size() && f[i] >= '0' && f[i] <= '9') sp.width = number("width");
    if (i < f.size() && f[i] == '.') {
      ++i;
      sp.precision = number("precision");
    }
    if (i >= f.size()) raise("incomplete format");
    sp.type = f[i];
    if (!arg) {
      if (next_arg >= pos.size()) raise("not enough arguments for format string");
      arg = &pos[next_arg++];
    }
    out += format_one(*arg, sp);
  }
  if (!mapping && next_arg < pos.size()) raise("not all arguments converted during string formatting");
  return out;
}

namespace {

// '{12}' names the 13th positional argument; an index past size_t is simply one with no argument
size_t field_index(std::string_view digits) {
  size_t i = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), i);
  return ec == std::errc() && end == digits.data() + digits.size() ? i : size_t(-1);
}

// fmt takes widths and precisions up to INT_MAX: a spec's numbers are capped at limits().made,
// as '%' widths are
void check_spec_numbers(std::string_view spec) {
  for (size_t i = 0; i < spec.size();) {
    if (spec[i] < '0' || spec[i] > '9') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < spec.size() && spec[j] >= '0' && spec[j] <= '9') ++j;
    int64_t n = 0;
    auto [end, ec] = std::from_chars(spec.data() + i, spec.data() + j, n);
    if (ec != std::errc() || n > limits().made)
      raise(fmt::format("format: the width or precision {} in '{}' is over {}",
                        spec.substr(i, std::min<size_t>(j - i, 24)), spec.substr(0, 40), limits().made));
    i = j;
  }
}

}  // namespace

std::string str_format(std::string_view f, const Args& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if ((c == '{' || c == '}') && i + 1 < f.size() && f[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c == '}') raise("Single '}' encountered in format string");
    if (c != '{') {
      out += c;
      continue;
    }
    size_t close = f.find('}', i);
    if (close == std::string_view::npos) raise("Single '{' encountered in format string");
    std::string_view field = f.substr(i + 1, close - i - 1), spec, conv;
    if (size_t colon = field.find(':'); colon != std::string_view::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    if (size_t bang = field.find('!'); bang != std::string_view::npos) {
      conv = field.substr(bang + 1);
      field = field.substr(0, bang);
    }
    const Value* v = nullptr;
    if (field.empty()) v = auto_index < args.pos.size() ? &args.pos[auto_index++] : nullptr;
    else if (field.find_first_not_of("0123456789") == std::string_view::npos) v = args.get(field_index(field), "");
    else v = args.get(size_t(-1), field);
    if (!v) raise(fmt::format("format: no argument for the field '{{{}}}'", field));
    Value x = conv == "r" ? Value(v->repr()) : *v;
    check_spec_numbers(spec);
    const std::string pattern = fmt::format("{{:{}}}", spec);
    try {
      if (spec.empty()) out += x.str();
      else if (x.is_int() || x.is_bool()) out += fmt::format(fmt::runtime(pattern), x.as_int());
      else if (x.is_float()) out += fmt::format(fmt::runtime(pattern), x.as_double());
      else out += fmt::format(fmt::runtime(pattern), x.str());
    } catch (const fmt::format_error&) {
      raise(fmt::format("format: unsupported format spec '{}' for a {}", spec, x.type_name()));
    }
    i = close;
  }
  return out;
}

}  // namespace lt::jinja
