"""The CUDA target's group rewrites, each a pass with its flag (the spec is the rewrite's
docstring, in rewrites.py, folding.py), in the order `--fusion-gpu-kernels` runs them.

`--fusion-gpu-kernels` (the tiled stage's first pass) runs the whole list on every model
function (`REWRITES`, through program.gpu_rewrites); each flag runs one rewrite alone, for a
lit test of what it does and what it must not do (test/passes/fusion-gpu-*.mlir), or to
bisect the list with `fusec-opt`. The target registers them when it is imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from mlir import ir

from fusec.compiler.targets.cuda.attention_layouts import absorb_attention_layouts
from fusec.compiler.targets.cuda.convs import convs_to_gemm
from fusec.compiler.targets.cuda.folding import fold_constant_groups
from fusec.compiler.targets.cuda.gemm_pair import pair_gemm_groups
from fusec.compiler.targets.cuda.gemm_siblings import merge_sibling_gemms
from fusec.compiler.targets.cuda.options import CudaOptions
from fusec.compiler.targets.cuda.rewrites import (absorb_operand_layouts, absorb_result_layouts,
                                                  erase_dead_groups,
                                                  matmuls_to_tf32, peel_trailing_reshapes,
                                                  split_long_reductions,
                                                  extract_slices_to_generics, mark_view_groups,
                                                  merge_epilogue_consumers, split_at_reshapes,
                                                  split_matmul_groups,
                                                  split_multi_output_groups,
                                                  unit_transposes_to_reshapes,
                                                  widen_16bit_payloads)
from fusec.passes import attributes
from fusec.passes.grouping import model_functions
from fusec.passes.registry import REGISTRY, Pass, register


@dataclass(frozen=True)
class Rewrite:
    flag: str
    run: Callable[[ir.Operation, CudaOptions], object]
    summary: str
    alone: tuple[tuple[str, object], ...] = ()  # the options its own flag runs it under


# In order: each one's docstring says why it runs where it does.
REWRITES = (
    Rewrite("fusion-gpu-peel-reshapes", lambda f, o: peel_trailing_reshapes(f),
            "A row-reduction group's trailing reshape that keeps the last dim becomes a "
            "group of its own (a view): the rows tile through no reshape."),
    Rewrite("fusion-gpu-unit-transposes", lambda f, o: unit_transposes_to_reshapes(f),
            "Transposes that move only size-1 dims become reshapes (no kernel)."),
    Rewrite("fusion-gpu-slices-to-gathers", lambda f, o: extract_slices_to_generics(f),
            "Static slices become gathers (one element per GPU thread)."),
    Rewrite("fusion-gpu-matmul-tf32", matmuls_to_tf32,
            "fp32 matmuls marked to run on the GEMM library with TF32 operands (when the "
            "options ask: torch's matmul allow_tf32); before convolutions become matmuls.",
            alone=(("matmul_tf32", True),)),
    Rewrite("fusion-gpu-convs-to-gemm", convs_to_gemm,
            "2-D convolutions become im2col + one matmul (the GEMM library's, the data-movement "
            "kernels around it)."),
    Rewrite("fusion-gpu-split-long-reductions", split_long_reductions,
            "A long reduction over few outputs becomes parts in a kernel of their own, then "
            "their (short) fold."),
    Rewrite("fusion-gpu-merge-epilogues", merge_epilogue_consumers,
            "A matmul group absorbs the consumer group that starts with a cuBLASLt epilogue."),
    Rewrite("fusion-gpu-pair-gemms", pair_gemm_groups,
            "A matmul group joins the matmul group reading its result where both read one A "
            "and our tensor-core GEMM computes them as one pair kernel, predicted faster "
            "(SwiGLU's gate and up projections)."),
    Rewrite("fusion-gpu-split-matmuls", split_matmul_groups,
            "Matmul-rooted groups split into [prologue] + a cuBLASLt call or our tensor-core "
            "GEMM + [epilogue]."),
    Rewrite("fusion-gpu-sibling-gemms", merge_sibling_gemms,
            "Our tensor-core GEMM groups that read one A and not each other (q, k and v "
            "projections) become one kernel over their concatenated columns, where predicted "
            "faster."),
    Rewrite("fusion-gpu-absorb-attention-layouts", lambda f, o: absorb_attention_layouts(f),
            "Attention groups read Q, K, V through the layout groups before them (head split, "
            "GQA's broadcast; after the matmul splits: a QKV epilogue's head split) and "
            "write O through the one after (head merge)."),
    Rewrite("fusion-gpu-split-at-reshapes", split_at_reshapes,
            "Groups the emitter refuses are cut at reshapes of values they compute and "
            "after reductions they read back."),
    Rewrite("fusion-gpu-split-outputs", split_multi_output_groups,
            "Multi-output groups the emitter refuses split into one group per output."),
    Rewrite("fusion-gpu-fold-constants", lambda f, o: fold_constant_groups(f),
            "Groups that read nothing are computed at compile time (constants)."),
    Rewrite("fusion-gpu-absorb-operand-layouts", lambda f, o: absorb_operand_layouts(f),
            "Layout groups before a cuBLASLt call become its strided operand layouts."),
    Rewrite("fusion-gpu-erase-dead-groups", lambda f, o: erase_dead_groups(f),
            "Groups none of whose results is used are erased."),
    Rewrite("fusion-gpu-absorb-result-layouts", lambda f, o: absorb_result_layouts(f),
            "A layout group after a cuBLASLt call becomes its strided result layout."),
    Rewrite("fusion-gpu-mark-views", lambda f, o: mark_view_groups(f),
            "Layout groups whose result is a dense view of their input become buffer views."),
    Rewrite("fusion-gpu-widen-16bit-payloads", lambda f, o: widen_16bit_payloads(f),
            "Each payload's bf16/f16 arithmetic runs in f32, rounded once where it yields."),
)


def _make_pass(rewrite: Rewrite) -> type[Pass]:
    def run(self, module: ir.Operation) -> None:
        for func in model_functions(module):
            with func.location:
                result = rewrite.run(func, CudaOptions(**dict(rewrite.alone)))
            if isinstance(result, list):  # split_matmul_groups' notes, as the composite keeps
                func.attributes[attributes.GEMM_NOTES] = ir.ArrayAttr.get(
                    [ir.StringAttr.get(n) for n in result])

    name = "".join(w.capitalize() for w in rewrite.flag.split("-")[1:]) + "Pass"
    cls = type(name, (Pass,), {"ARGUMENT": rewrite.flag, "__doc__": rewrite.summary,
                               "run": run, "__module__": __name__})
    return register(dataclass(cls))


for _rewrite in REWRITES:
    if _rewrite.flag not in REGISTRY:  # a reload (tests) must not register twice
        _make_pass(_rewrite)
