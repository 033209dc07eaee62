// Operations on template values with jinja2's (sandboxed) Python semantics: attribute and item
// access (obj.x tries a method first, obj['x'] the key first), slices, arithmetic, `in`,
// iteration, and printf-style `%` formatting. Errors are jinja::Failure.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace lt::jinja {

// What one render may build and run; past each bound a template error names it. The defaults: a
// chat template repeats a separator (a 20 MB string took the ASan fuzzer past its 10 s timeout, and
// is memory a template has no use for), a rendered chat is at most a context's worth of text, and a
// template walks the messages and tools in thousands of steps (4 Mi stops nested loops over huge
// ranges with an error, not hours). The fuzzers lower them for the process: an input well inside the
// defaults but handled character by character would pass the timeout of their instrumented build.
struct Limits {
  int64_t made = int64_t(1) << 22;   // characters or items one operation makes: a repeat, a width, an indent, a list
  int64_t text = int64_t(1) << 26;   // bytes of a rendering, a concatenation, or a text built line by line
  int64_t steps = int64_t(1) << 22;  // statements plus loop iterations of one render
};
const Limits& limits();
void set_limits(const Limits& l);  // before any render (a test's or a fuzzer's setup): not thread-safe
// Python's ints are unbounded, ours are 64-bit: a result outside int64 is a template error naming the
// operation (never a wrapped value; the fuzzer's 'ab' * 1697 ** 97 overflowed).
[[noreturn]] void int_overflow(std::string_view op, int64_t a, int64_t b);
[[noreturn]] void int_overflow(std::string_view expression);  // e.g. "abs(-9223372036854775808)"
// trunc(d) as an int64, or a template error naming `what` where it is not finite or out of range
int64_t float_to_int(double d, std::string_view what);

Value get_attr(const Value& obj, std::string_view name);
Value get_item(const Value& obj, const Value& key);
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// + - * / // % ** ~ on two values.
Value binary_op(std::string_view op, const Value& a, const Value& b);
Value unary_minus(const Value& v, bool minus);  // -v, or +v when !minus
bool contains(const Value& container, const Value& item);  // item in container
std::vector<Value> iterate(const Value& v);  // list items, dict keys, str characters; undefined: none
// Python's `fmt % args` for strings (%s %r %d %i %f %e %g %x %o %c %%, flags, width, precision).
std::string percent_format(std::string_view fmt, const Value& args);
// An attribute of an item as jinja2's make_attrgetter reads it ("a.b" and "0" path parts).
Value attr_path(const Value& item, std::string_view path);

}  // namespace lt::jinja
