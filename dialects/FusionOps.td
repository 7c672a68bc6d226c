//===- FusionOps.td - fusion dialect operations ------------*- tablegen -*-===//

#ifndef FUSION_OPS
#define FUSION_OPS

include "FusionDialect.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

class Fusion_Op<string mnemonic, list<Trait> traits = []>
    : Op<Fusion_Dialect, mnemonic, traits>;

def Fusion_GroupOp : Fusion_Op<"group", [
    IsolatedFromAbove, Pure, SingleBlock]> {
  let summary = "One kernel: a region of ops fused together";
  let description = [{
    The body computes the kernel's outputs from its inputs; it may not use
    any value defined outside (the op is isolated from above), so a group
    can be outlined as it stands. Each block argument is bound to the
    operand of the same position.

    ```mlir
    %r = fusion.group vertical (%x = %a : tensor<8xf32>, %y = %b : tensor<8xf32>)
        -> tensor<8xf32> attributes {fusion.bytes = 96 : i64} {
      %s = linalg.add ins(%x, %y : ...) outs(...) -> tensor<8xf32>
      fusion.yield %s : tensor<8xf32>
    }
    ```

    `kind` is one of: single, vertical, horizontal, input, reduction,
    epilogue, attention. Further attributes carry the cost model's numbers
    (`fusion.*`).
  }];
  let arguments = (ins Variadic<AnyType>:$inputs, StrAttr:$kind);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [
    OpBuilder<(ins "::mlir::TypeRange":$resultTypes, "::mlir::ValueRange":$inputs,
                   "::llvm::StringRef":$kind)>
  ];
}

def Fusion_YieldOp : Fusion_Op<"yield", [
    Pure, Terminator, HasParent<"GroupOp">]> {
  let summary = "Returns a group's outputs";
  let arguments = (ins Variadic<AnyType>:$values);
  let assemblyFormat = "attr-dict ($values^ `:` type($values))?";
}

#endif // FUSION_OPS
