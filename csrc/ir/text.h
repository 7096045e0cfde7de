// Text form of the host IR: print and parse. parse(print(m)) == m for every valid module, and
// print(parse(t)) is the canonical spelling of t. Errors carry the line and what was expected.
#pragma once

#include <stdexcept>
#include <string>

#include "ir/ir.h"

namespace trident::ir {

// The caller's mistake in IR text (bad syntax, unknown name). Becomes a Python ValueError.
struct ParseError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string print(const Module& m);
std::string print(const Spec& s);
std::string print_operand(const Operand& o);
// Shared spellings: a double-quoted, escaped string (valid in IR and in C), and the shortest
// decimal that reads back to the same double (always with '.', an exponent, inf or nan).
std::string quote(const std::string& s);
std::string print_float(double v);
// A double's bit pattern: float guards against a literal compare these (-0.0 is not 0.0).
int64_t float_bits(double v);
std::string print_guard(const Guard& g);
std::string print_instr(const Instr& in);
std::string print_kernel(const Kernel& k);
Kernel parse_kernel(const std::string& text);

Module parse_module(const std::string& text);
// One instruction in the syntax print_instr produces (used for call sites embedded in modules).
Instr parse_instr(const std::string& text);
// One output tree, as after `return`.
Operand parse_operand(const std::string& text);

}  // namespace trident::ir
