//===- fusion_dialect.cpp - the fusion dialect in C++ ---------------------===//
//
// Includes what mlir-tblgen generated from FusionDialect.td / FusionOps.td,
// adds the hand-written parts (group syntax, verifiers, #fusion.mem), and
// exports one C function that loads the dialect into a Python context.
//
//===----------------------------------------------------------------------===//

#include "mlir/CAPI/IR.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/TypeSwitch.h"

#include "FusionDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "FusionAttrs.h.inc"

#define GET_OP_CLASSES
#include "FusionOps.h.inc"

using namespace mlir;
using namespace mlir::fusion;

#include "FusionDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "FusionAttrs.cpp.inc"

#define GET_OP_CLASSES
#include "FusionOps.cpp.inc"

static constexpr llvm::StringLiteral kKinds[] = {
    "single", "vertical", "horizontal", "input",
    "reduction", "epilogue", "attention"};
static constexpr llvm::StringLiteral kLevels[] = {"register", "shared", "l2",
                                                  "global"};

template <size_t N>
static bool isOneOf(llvm::StringRef s, const llvm::StringLiteral (&set)[N]) {
  for (llvm::StringRef k : set)
    if (k == s)
      return true;
  return false;
}

template <size_t N>
static std::string joined(const llvm::StringLiteral (&set)[N]) {
  std::string out;
  for (size_t i = 0; i < N; ++i) {
    if (i)
      out += ", ";
    out += set[i].str();
  }
  return out;
}

void FusionDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "FusionAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "FusionOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// #fusion.mem<level>
//===----------------------------------------------------------------------===//

Attribute MemAttr::parse(AsmParser &parser, Type) {
  llvm::StringRef level;
  llvm::SMLoc loc = parser.getCurrentLocation();
  if (parser.parseLess() || parser.parseKeyword(&level) ||
      parser.parseGreater())
    return {};
  if (!isOneOf(level, kLevels)) {
    parser.emitError(loc) << "unknown memory level '" << level
                          << "'; expected one of: " << joined(kLevels);
    return {};
  }
  return MemAttr::get(parser.getContext(), level);
}

void MemAttr::print(AsmPrinter &printer) const {
  printer << "<" << getLevel() << ">";
}

LogicalResult MemAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                              llvm::StringRef level) {
  if (!isOneOf(level, kLevels))
    return emitError() << "unknown memory level '" << level
                       << "'; expected one of: " << joined(kLevels);
  return success();
}

//===----------------------------------------------------------------------===//
// fusion.group
//===----------------------------------------------------------------------===//

void GroupOp::build(OpBuilder &builder, OperationState &state,
                    TypeRange resultTypes, ValueRange inputs,
                    llvm::StringRef kind) {
  state.addOperands(inputs);
  state.addAttribute(getKindAttrName(state.name), builder.getStringAttr(kind));
  state.addTypes(resultTypes);
  Region *body = state.addRegion();
  Block *block = new Block();
  for (Value v : inputs)
    block->addArgument(v.getType(), v.getLoc());
  body->push_back(block);
}

// fusion.group KIND (%arg = %operand : type, ...) -> (types) attributes {..} {
ParseResult GroupOp::parse(OpAsmParser &parser, OperationState &result) {
  llvm::StringRef kind;
  if (parser.parseKeyword(&kind))
    return failure();
  result.addAttribute("kind", parser.getBuilder().getStringAttr(kind));

  SmallVector<OpAsmParser::Argument> args;
  SmallVector<OpAsmParser::UnresolvedOperand> operands;
  SmallVector<Type> operandTypes;
  if (parser.parseLParen())
    return failure();
  if (failed(parser.parseOptionalRParen())) {
    do {
      OpAsmParser::Argument arg;
      OpAsmParser::UnresolvedOperand operand;
      if (parser.parseArgument(arg) || parser.parseEqual() ||
          parser.parseOperand(operand) || parser.parseColonType(arg.type))
        return failure();
      args.push_back(arg);
      operands.push_back(operand);
      operandTypes.push_back(arg.type);
    } while (succeeded(parser.parseOptionalComma()));
    if (parser.parseRParen())
      return failure();
  }
  if (parser.resolveOperands(operands, operandTypes, parser.getNameLoc(),
                             result.operands))
    return failure();

  SmallVector<Type> resultTypes;
  if (parser.parseArrowTypeList(resultTypes))
    return failure();
  result.addTypes(resultTypes);
  if (parser.parseOptionalAttrDictWithKeyword(result.attributes))
    return failure();
  Region *body = result.addRegion();
  if (parser.parseRegion(*body, args))
    return failure();
  return success();
}

void GroupOp::print(OpAsmPrinter &p) {
  p << " " << getKind() << " (";
  Block &block = getBody().front();
  for (auto [i, operand] : llvm::enumerate(getInputs())) {
    if (i)
      p << ", ";
    p.printRegionArgument(block.getArgument(i), {}, /*omitType=*/true);
    p << " = " << operand << " : " << operand.getType();
  }
  p << ") -> ";
  if (getNumResults() == 1)
    p << getResult(0).getType();
  else {
    p << "(";
    llvm::interleaveComma(getResultTypes(), p);
    p << ")";
  }
  p.printOptionalAttrDictWithKeyword((*this)->getAttrs(), {"kind"});
  p << " ";
  p.printRegion(getBody(), /*printEntryBlockArgs=*/false);
}

LogicalResult GroupOp::verify() {
  if (!isOneOf(getKind(), kKinds))
    return emitOpError() << "has unknown kind '" << getKind()
                         << "'; expected one of: " << joined(kKinds);
  return success();
}

LogicalResult GroupOp::verifyRegions() {
  Block &block = getBody().front();
  if (block.getNumArguments() != getInputs().size())
    return emitOpError() << "has " << getInputs().size()
                         << " inputs but its body takes "
                         << block.getNumArguments() << " arguments";
  for (auto [i, pair] :
       llvm::enumerate(llvm::zip(getInputs(), block.getArguments())))
    if (std::get<0>(pair).getType() != std::get<1>(pair).getType())
      return emitOpError() << "input #" << i << " has type "
                           << std::get<0>(pair).getType()
                           << " but body argument #" << i << " has type "
                           << std::get<1>(pair).getType();
  auto yield = llvm::dyn_cast<YieldOp>(block.getTerminator());
  if (!yield)
    return emitOpError() << "body must end in 'fusion.yield'";
  if (yield.getValues().getTypes() != getResultTypes()) {
    auto diag = emitOpError() << "yields (";
    llvm::interleaveComma(yield.getValues().getTypes(), diag);
    diag << ") but its results are (";
    llvm::interleaveComma(getResultTypes(), diag);
    return diag << ")";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// C entry point for the Python side.
//===----------------------------------------------------------------------===//

extern "C" __attribute__((visibility("default"))) void
fusecLoadFusionDialect(MlirContext context) {
  unwrap(context)->getOrLoadDialect<FusionDialect>();
}
