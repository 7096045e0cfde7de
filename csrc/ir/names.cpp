// Spellings of IR enums, shared by the printer, the parser and code generation.
#include "ir/ir.h"

namespace trident::ir {

const char* field_name(Field::Kind k) {
  switch (k) {
#define TRD_GUARD_FIELD(kind, spelling, shape, member, type) \
  case Field::Kind::kind:                                     \
    return spelling;
#include "ir/guard_fields.def"
#undef TRD_GUARD_FIELD
  }
  return "?";
}

Field::Shape field_shape(Field::Kind k) {
  switch (k) {
#define TRD_GUARD_FIELD(kind, spelling, shape, member, type) \
  case Field::Kind::kind:                                     \
    return Field::Shape::shape;
#include "ir/guard_fields.def"
#undef TRD_GUARD_FIELD
  }
  return Field::Shape::LEAF;
}

const char* guard_op_name(Guard::Op op) {
  switch (op) {
    case Guard::Op::Eq: return "==";
    case Guard::Op::Ne: return "!=";
    case Guard::Op::Ge: return ">=";
    case Guard::Op::Le: return "<=";
    case Guard::Op::Gt: return ">";
    case Guard::Op::Lt: return "<";
    case Guard::Op::DivisibleBy: return "divby";
    case Guard::Op::NotDivisibleBy: return "notdivby";
  }
  return "?";
}

const char* binop_name(Instr::BinOp op) {
  switch (op) {
    case Instr::BinOp::Add: return "add";
    case Instr::BinOp::Sub: return "sub";
    case Instr::BinOp::Mul: return "mul";
    case Instr::BinOp::FloorDiv: return "floordiv";
    case Instr::BinOp::Mod: return "mod";
    case Instr::BinOp::Min: return "min";
    case Instr::BinOp::Max: return "max";
    case Instr::BinOp::CeilDiv: return "ceildiv";
    case Instr::BinOp::Eq: return "eq";
    case Instr::BinOp::Ne: return "ne";
    case Instr::BinOp::Lt: return "lt";
    case Instr::BinOp::Le: return "le";
    case Instr::BinOp::Gt: return "gt";
    case Instr::BinOp::Ge: return "ge";
  }
  return "?";
}

const char* float_op_name(Instr::FloatOp op) {
  switch (op) {
    case Instr::FloatOp::Add: return "fadd";
    case Instr::FloatOp::Sub: return "fsub";
    case Instr::FloatOp::Mul: return "fmul";
    case Instr::FloatOp::Div: return "fdiv";
    case Instr::FloatOp::Pow: return "fpow";
    case Instr::FloatOp::Neg: return "fneg";
    case Instr::FloatOp::Sqrt: return "fsqrt";
    case Instr::FloatOp::FromInt: return "itof";
  }
  return "?";
}

int float_op_arity(Instr::FloatOp op) {
  return op == Instr::FloatOp::Neg || op == Instr::FloatOp::Sqrt || op == Instr::FloatOp::FromInt ? 1 : 2;
}

}  // namespace trident::ir
