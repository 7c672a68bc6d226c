//===- FusionDialect.td - the fusion dialect ---------------*- tablegen -*-===//
//
// fusec's own dialect: a `fusion.group` is one kernel. Graph-level fusion
// passes form groups; loop-level passes tile them and place intermediates
// (`#fusion.mem<...>`); the back ends lower one group to one kernel.
//
//===----------------------------------------------------------------------===//

#ifndef FUSION_DIALECT
#define FUSION_DIALECT

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Fusion_Dialect : Dialect {
  let name = "fusion";
  let summary = "Kernel-fusion groups and memory placement for fusec";
  let description = [{
    A `fusion.group` region is one kernel: its operands are the kernel's
    inputs, its results are the kernel's outputs, and everything computed
    inside stays on chip. Decisions (the kind of fusion, the cost model's
    numbers, tile sizes, memory placement) are attributes on the IR so that
    FileCheck can see them and saving and reloading the IR loses nothing.
  }];
  let cppNamespace = "::mlir::fusion";
  let useDefaultAttributePrinterParser = 1;
}

class Fusion_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Fusion_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Fusion_MemAttr : Fusion_Attr<"Mem", "mem"> {
  let summary = "Memory level of a value or buffer";
  let description = [{
    `#fusion.mem<register>`, `#fusion.mem<shared>`, `#fusion.mem<l2>` or
    `#fusion.mem<global>`: where loop-level fusion decided an intermediate
    lives.
  }];
  let parameters = (ins StringRefParameter<"memory level">:$level);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

#endif // FUSION_DIALECT
