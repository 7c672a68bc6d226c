"""The fusion dialect from Python: generated op classes build valid IR; verifiers reject."""

import mlir.ir as ir
import pytest

from fusec.dialects import GROUP_KINDS, make_context, ops


def _module_with_group(kind: str, yield_type: str = "f32") -> str:
    return f"""
    func.func @f(%a: f32) -> f32 {{
      %r = fusion.group {kind} (%x = %a : f32) -> f32 {{
        %y = arith.addf %x, %x : f32
        fusion.yield %y : f32
      }}
      return %r : f32
    }}"""


@pytest.mark.parametrize("kind", GROUP_KINDS)
def test_every_kind_parses_and_verifies(kind):
    module = ir.Module.parse(_module_with_group(kind), make_context())
    assert module.operation.verify()
    assert f"fusion.group {kind} (" in str(module)


def test_unknown_kind_is_rejected():
    with pytest.raises(ir.MLIRError, match="unknown kind 'diagonal'"):
        ir.Module.parse(_module_with_group("diagonal"), make_context())


def test_generated_op_classes_build_a_group():
    context = make_context()
    with context, ir.Location.unknown():
        module = ir.Module.create()
        f32 = ir.F32Type.get()
        from mlir.dialects import arith, func

        with ir.InsertionPoint(module.body):
            fn = func.FuncOp("f", ir.FunctionType.get([f32], [f32]))
            entry = fn.add_entry_block()
            with ir.InsertionPoint(entry):
                group = ops().GroupOp([f32], [entry.arguments[0]], "vertical")
                body = group.body.blocks.append(f32)
                with ir.InsertionPoint(body):
                    doubled = arith.AddFOp(body.arguments[0], body.arguments[0])
                    ops().YieldOp([doubled.result])
                func.ReturnOp([group.results[0]])
    assert module.operation.verify()
    text = str(module)
    assert "fusion.group vertical (%arg1 = %arg0 : f32) -> f32" in text
    # And it re-parses to the same text.
    assert str(ir.Module.parse(text, make_context())) == text


def test_yield_type_mismatch_message_names_both_types():
    text = """
    func.func @f(%a: f32) -> f16 {
      %r = fusion.group single (%x = %a : f32) -> f16 {
        fusion.yield %x : f32
      }
      return %r : f16
    }"""
    with pytest.raises(ir.MLIRError) as info:
        ir.Module.parse(text, make_context())
    message = str(info.value)
    assert "yields ('f32') but its results are ('f16')" in message
