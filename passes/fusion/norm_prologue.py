"""--fusion-fold-norm-prologue: a row-wise normalisation in front of a matmul, folded into
the matmul's weight and epilogue (LayerNorm + Linear, RMSNorm + Linear).

A GEMM kernel reads its A operand from memory, so a LayerNorm before a Linear is a kernel of
its own that writes the normalised [M, K] tensor for the GEMM to read back. When A is a
per-row affine function of a stored matrix X, written with row vectors r (per row m: a mean,
a 1/std) and column constants c (per k: LayerNorm's weight and bias),

    A[m, k] = X[m, k] * a_r[m] * a_c[k] + sum_t t_r[m] * t_c[k]

and B is a constant weight W [K, N], the product is

    A @ W = a_r[m] * (X @ W')[m, n] + sum_t t_r[m] * u_t[n]
            with W' = a_c * W (row k scaled, rounded to W's type) and u_t = t_c @ W (f32)

so the GEMM reads X itself, and the rest is an epilogue on its accumulator that reads two
vectors per row and per column. LayerNorm: a_r = rstd, a_c = gamma, terms -(mean * rstd) x
gamma and 1 x beta; RMSNorm: a_r = rstd, a_c = gamma, no terms. The statistics stay where
they are (a reduction kernel over X that writes [M] values); the normalised tensor is never
written. Numerics: the GEMM's products are exact in its f32 accumulator either way; W' is
rounded once, where the unfused form rounds the normalised A once; a LayerNorm's mean
subtraction happens after the product (x @ W' - mean * (gamma @ W)), in f32.

Recognised: A (through one collapse of leading dims, as a 3-D Linear's input) is computed
from X by elementwise linalg.generics, each reading one full operand and, besides it, row
operands (an [.., 1] tensor read at (d0, .., 0) or an [..] one at (d0, ..)) and column
constants; their payloads add, subtract, multiply, divide, negate and cast (a cast's
rounding is dropped). X has A's 16-bit type (the tensor-core kernels' operand type), B is a
constant or the transpose of one, the matmul accumulates from zero in f32.

Not folded (left as they are):
- A read by anything but matmuls that fold (a normalised tensor written anyway gains nothing);
- X * X or any payload not affine in X; a column factor that is not a constant;
- an X of another type than A (an f32 residual normalised to bf16);
- a weight that is not a constant (B computed, or a model input);
- a problem the target's GEMM kernel does not build (`targets.gemm_kernel_refusal`), or
  where the cost model says the epilogue costs more than the tensor saved
  (`gemm_cost.norm_prologue_fold_pays`).

Before (LayerNorm then Linear, bf16):
    %c = extf %x; %d = %c - %mean; %n = %d * %rstd; %g = %n * gamma; %b = %g + beta
    %a = truncf %b
    %y = linalg.matmul ins(%a, %wt) outs(%zero)
After:
    %y0 = linalg.matmul ins(%x, %wt') outs(%zero)        (%wt': gamma * W, bf16)
    %y = linalg.generic ins(%y0, %rstd, %mean, %u0, %u1)  y0 * rstd - mean * rstd * u0 + u1
    (the statistics' reductions stay; the elementwise ops that made %a are erased)

Options: device (the target asked whether its GEMM kernel builds the matmul).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import mlir.ir as ir
from mlir.dialects import linalg, tensor

from fusec.passes import attributes, cost_model, gemm_cost, targets
from fusec.passes.constants import dense_attr, dense_floats, stored_values
from fusec.passes.grouping import defining_op, model_functions, projection, use_owner, value_key
from fusec.passes.registry import Pass, register

HALF_TYPES = ("bf16", "f16")


@dataclass(frozen=True)
class Factor:
    """scale x the product of row values and column constants, each to the power 1 or -1."""

    scale: float = 1.0
    rows: tuple = ()  # ((ir.Value, power), ...): read per row
    cols: tuple = ()  # ((numpy array [K], power), ...)

    def times(self, other: "Factor") -> "Factor":
        return Factor(self.scale * other.scale, self.rows + other.rows, self.cols + other.cols)

    def inverse(self) -> "Factor | None":
        if self.scale == 0:
            return None
        return Factor(1.0 / self.scale, tuple((v, -p) for v, p in self.rows),
                      tuple((c, -p) for c, p in self.cols))


@dataclass(frozen=True)
class Affine:
    """x * coef + the sum of terms (x: the value the walk has reached)."""

    coef: Factor = Factor()
    terms: tuple = ()

    def times(self, f: Factor) -> "Affine":
        return Affine(self.coef.times(f), tuple(t.times(f) for t in self.terms))

    def plus(self, f: Factor) -> "Affine":
        return Affine(self.coef, self.terms + (f,))

    def of(self, inner: "Affine") -> "Affine":
        """self with x = inner."""
        return Affine(inner.coef.times(self.coef),
                      tuple(t.times(self.coef) for t in inner.terms) + self.terms)


def _tensor(v: ir.Value) -> ir.RankedTensorType | None:
    return ir.RankedTensorType(v.type) if isinstance(v.type, ir.RankedTensorType) else None


def _element(v: ir.Value) -> str:
    t = _tensor(v)
    return str(t.element_type) if t is not None else str(v.type)


def _scalar(value: ir.Value) -> float | None:
    op = defining_op(value)
    if op is not None and op.name == "arith.constant" and \
            isinstance(op.attributes["value"], ir.FloatAttr):
        return float(ir.FloatAttr(op.attributes["value"]).value)
    return None


def _column_constant(value: ir.Value, k: int):
    """The [K] values of a constant read per column (shape [K] or [1, .., 1, K]), or None."""
    op = defining_op(value)
    if op is None or op.name != "arith.constant":
        return None
    values = dense_floats(op.attributes["value"])
    if values is None or values.size != k:
        return None
    return values.reshape(k)


def _payload(op: ir.Operation, main: int, kinds: dict[int, object]) -> Affine | None:
    """The generic's payload as an Affine of its input `main`; `kinds`: the other inputs'
    Factors (a row value or a column constant)."""
    block = op.regions[0].blocks[0]
    env: dict = {}
    args = list(block.arguments)
    n_in = len(op.operands) - 1
    for i, arg in enumerate(args[:n_in]):
        env[value_key(arg)] = Affine() if i == main else kinds[i]

    def get(v: ir.Value):
        key = value_key(v)
        if key in env:
            return env[key]
        s = _scalar(v)
        return Factor(scale=s) if s is not None and math.isfinite(s) else None

    for inner in block.operations:
        inner = inner.operation
        name = inner.name
        if name == "linalg.yield":
            out = get(inner.operands[0])
            return out if isinstance(out, Affine) else None
        if name == "arith.constant":
            s = _scalar(inner.results[0])
            if s is None or not math.isfinite(s):
                return None
            env[value_key(inner.results[0])] = Factor(scale=s)
            continue
        xs = [get(v) for v in inner.operands]
        if any(x is None for x in xs):
            return None
        if name in ("arith.extf", "arith.truncf"):
            y = xs[0]
        elif name == "arith.negf":
            y = xs[0].times(Factor(-1.0))
        elif name == "arith.mulf":
            a, b = xs
            if isinstance(a, Affine) and isinstance(b, Affine):
                return None
            y = a.times(b) if isinstance(a, Affine) else b.times(a) if isinstance(b, Affine) \
                else a.times(b)
        elif name == "arith.divf":
            a, b = xs
            inv = b.inverse() if isinstance(b, Factor) else None
            if inv is None:
                return None
            y = a.times(inv)
        elif name in ("arith.addf", "arith.subf"):
            a, b = xs
            if name == "arith.subf":
                if isinstance(b, Affine):
                    return None  # c - x: the sign would go onto x's factor; rare, left
                b = b.times(Factor(-1.0))
            if isinstance(a, Affine) == isinstance(b, Affine):
                return None  # x + x, or a sum of factors (not one product)
            y = a.plus(b) if isinstance(a, Affine) else b.plus(a)
        else:
            return None
        env[value_key(inner.results[0])] = y
    return None


def _step(op: ir.Operation) -> tuple[ir.Value, Affine] | None:
    """For an elementwise generic with one full input: that input and the payload as an
    Affine of it; None where it is not such a step."""
    if op.name != "linalg.generic" or len(op.results) != 1:
        return None
    if any("parallel" not in str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])):
        return None
    out_t = _tensor(op.results[0])
    rank = out_t.rank
    maps = [projection(ir.AffineMapAttr(a).value)
            for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    if any(m is None for m in maps) or maps[-1] != list(range(rank)):
        return None
    ins = list(op.operands)[:-1]
    # The output's own value is not read (block argument unused).
    if any(True for _ in list(op.regions[0].blocks[0].arguments)[-1].uses):
        return None
    main, kinds = None, {}
    k = out_t.shape[-1]
    lead = list(range(rank - 1))
    for i, (v, dims) in enumerate(zip(ins, maps)):
        t = _tensor(v)
        if t is None:
            return None
        shape = list(t.shape)
        if dims == list(range(rank)) and shape == list(out_t.shape):
            if main is not None:
                return None
            main = i
        elif dims in (lead + [None], lead) and shape[:rank - 1] == list(out_t.shape)[:-1] \
                and (dims == lead or shape[-1] == 1):
            kinds[i] = Factor(rows=((v, 1),))
        elif dims and dims[-1] == rank - 1 and all(d is None for d in dims[:-1]) and \
                all(s == 1 for s in shape[:-1]):
            col = _column_constant(v, k)
            if col is None:
                return None
            kinds[i] = Factor(cols=((col, 1),))
        else:
            return None
    if main is None:
        return None
    affine = _payload(op, main, kinds)
    return (ins[main], affine) if affine is not None else None


@dataclass
class Fold:
    """What one matmul's fold needs."""

    mm: ir.Operation
    source: ir.Value  # X, as stored
    form: Affine  # A as an Affine of X
    path: list[ir.Operation]  # the steps (and collapse) from A back to X
    collapse: ir.Operation | None
    weight: ir.Operation  # the arith.constant B reads
    transpose: ir.Operation | None  # B = transpose(weight)
    m: int = 0
    n: int = 0
    k: int = 0


def _weight(b: ir.Value) -> tuple[ir.Operation, ir.Operation | None] | None:
    op = defining_op(b)
    if op is None:
        return None
    if op.name == "arith.constant":
        return op, None
    if op.name == "linalg.transpose" and \
            list(ir.DenseI64ArrayAttr(op.attributes["permutation"])) == [1, 0]:
        src = defining_op(op.operands[0])
        if src is not None and src.name == "arith.constant":
            return src, op
    return None


def _zero_filled(init: ir.Value) -> bool:
    fill = defining_op(init)
    if fill is None or fill.name != "linalg.fill":
        return False
    return _scalar(fill.operands[0]) == 0.0


def plan_fold(mm: ir.Operation) -> Fold | str:
    """The fold of `mm`'s A operand, or why there is none."""
    a, b, init = mm.operands[0], mm.operands[1], mm.operands[2]
    if _element(mm.results[0]) != "f32" or not _zero_filled(init):
        return "the matmul does not accumulate from zero in f32"
    if _element(a) not in HALF_TYPES or _element(b) != _element(a):
        return f"operands of type {_element(a)} x {_element(b)}"
    found = _weight(b)
    if found is None:
        return "B is not a constant weight"
    weight, transpose = found
    form, path, collapse, v = Affine(), [], None, a
    while True:
        op = defining_op(v)
        if op is None:
            break
        if op.name == "tensor.collapse_shape" and collapse is None:
            groups = [list(ir.ArrayAttr(g)) for g in ir.ArrayAttr(op.attributes["reassociation"])]
            if len(groups) == 2 and len(groups[1]) == 1:
                collapse = op
                path.append(op)
                v = op.operands[0]
                continue
            break
        step = _step(op)
        if step is None:
            break
        v, inner = step
        form = form.of(inner)
        path.append(op)
    if not any(p.name == "linalg.generic" for p in path):
        return "A is not computed by elementwise ops from a stored matrix"
    if _element(v) != _element(a):
        return f"A's source is {_element(v)}, not {_element(a)}"
    if not form.coef.rows and not form.coef.cols and not form.terms and form.coef.scale == 1:
        return "A is X itself (casts only): nothing to fold"
    if not isinstance(weight.attributes["value"], ir.DenseElementsAttr):
        return "the weight is not a dense constant"
    m, k = list(_tensor(a).shape)
    n = list(_tensor(mm.results[0]).shape)[1]
    return Fold(mm, v, form, path, collapse, weight, transpose, m, n, k)


def _columns(cols: tuple, k: int):
    import numpy as np

    out = np.ones(k)
    for c, p in cols:
        out = out * (c if p > 0 else 1.0 / c)
    return out


def _proportion(cols, coef_cols) -> float | None:
    """The number c with cols == c * coef_cols (to f32's precision), or None."""
    import numpy as np

    nonzero = coef_cols != 0
    if not nonzero.any() or np.any(cols[~nonzero] != 0):
        return None
    ratios = cols[nonzero] / coef_cols[nonzero]
    c = float(ratios[0])
    return c if np.allclose(ratios, c, rtol=1e-6, atol=0.0) else None


def _row_groups(terms: tuple) -> list[tuple[tuple, object]]:
    """Terms grouped by their row factors (by identity and power): (rows, column values)."""
    groups: dict = {}
    for t in terms:
        key = tuple(sorted((value_key(v), p) for v, p in t.rows))
        groups.setdefault(key, [t.rows, []])[1].append(t)
    return [(rows, ts) for rows, ts in groups.values()]


def _constant(values, t: ir.RankedTensorType) -> ir.Value:
    return ir.Operation.create("arith.constant", results=[t],
                               attributes={"value": dense_attr(values, t)}).results[0]


def _affine_map(text: str) -> ir.AffineMapAttr:
    return ir.AffineMapAttr(ir.Attribute.parse(f"affine_map<{text}>"))


def _as_rows(v: ir.Value, m: int) -> ir.Value:
    """A row value [.., 1] or [..] as an [M, 1] tensor (leading dims collapsed: the way the
    normalisation's own ops read it, so the planner sees the same row operand)."""
    t = _tensor(v)
    if list(t.shape) == [m, 1]:
        return v
    i64 = ir.IntegerType.get_signless(64)
    if list(t.shape) == [m]:
        return tensor.ExpandShapeOp(ir.RankedTensorType.get([m, 1], t.element_type), v,
                                    ir.ArrayAttr.get([ir.ArrayAttr.get(
                                        [ir.IntegerAttr.get(i64, 0), ir.IntegerAttr.get(i64, 1)])]),
                                    [], [m, 1]).result
    lead = t.rank - 1 if t.shape[-1] == 1 else t.rank
    groups = [list(range(lead))] + ([[lead]] if lead < t.rank else [])
    reassociation = ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, i) for i in g])
                                      for g in groups])
    out = tensor.CollapseShapeOp(ir.RankedTensorType.get([m, 1] if lead < t.rank else [m],
                                                         t.element_type), v, reassociation).result
    return out if lead < t.rank else _as_rows(out, m)


def _multiply_rows(value, rows: tuple, row_args: dict):
    from mlir.dialects import arith

    for v, p in rows:
        r = row_args[value_key(v)]
        value = arith.MulFOp(value, r).result if p > 0 else arith.DivFOp(value, r).result
    return value


def rewrite(fold: Fold, shared: dict) -> bool:
    """Apply `fold` (plan_fold's): the matmul reads X and W', the epilogue after it
    (`shared`: the collapsed X and row values of the folds of one A, made once). False
    where the weight's values cannot be read (nothing changed)."""
    import numpy as np
    from mlir.dialects import arith

    mm, form, f32 = fold.mm, fold.form, ir.F32Type.get()
    w = dense_floats(fold.weight.attributes["value"])
    if w is None:
        return False
    w = w.T if fold.transpose is not None else w  # [K, N]
    coef_cols = form.coef.scale * _columns(form.coef.cols, fold.k)
    w_prime = coef_cols[:, None] * w
    wt = ir.RankedTensorType(fold.weight.results[0].type)
    stored = stored_values(w_prime, wt)
    # A term whose columns are the coefficient's times a number (a LayerNorm's mean term,
    # -mean * rstd * gamma) reads W' as the GEMM stores it: x @ W' - mean * (gamma @ W')
    # cancels exactly what the GEMM adds (with W' rounded on one side only, an input of
    # large mean and small spread lost its difference to the rounding). Any other term
    # (a LayerNorm's bias) reads W exactly: W' may have lost a row whose gamma underflowed.
    groups, vectors = [], []
    for rows, ts in _row_groups(form.terms):
        cols = sum(t.scale * _columns(t.cols, fold.k) for t in ts)
        factor = _proportion(cols, coef_cols)
        vector = factor * stored.sum(axis=0) if factor is not None else cols @ w
        if np.any(vector != 0):  # (a LayerNorm's bias at its zero init adds nothing)
            groups.append((rows, ts))
            vectors.append(vector)
    with ir.InsertionPoint(mm), mm.location:
        b = _constant(w_prime.T if fold.transpose is not None else w_prime, wt)
        if fold.transpose is not None:
            kt = ir.RankedTensorType(fold.transpose.results[0].type)
            empty = tensor.EmptyOp(list(kt.shape), kt.element_type).result
            b = linalg.transpose(b, outs=[empty], permutation=[1, 0])
            b = b if isinstance(b, ir.Value) else b.results[0]
        if "x" not in shared:
            x = fold.source
            if fold.collapse is not None:
                at = ir.RankedTensorType(fold.collapse.results[0].type)
                x = tensor.CollapseShapeOp(at, x,
                                           fold.collapse.attributes["reassociation"]).result
            shared["x"] = x
        x = shared["x"]
        row_values: dict = {}
        for v, _ in form.coef.rows + tuple(r for t in form.terms for r in t.rows):
            if value_key(v) not in shared:
                shared[value_key(v)] = _as_rows(v, fold.m)
            row_values[value_key(v)] = shared[value_key(v)]
        nt = ir.RankedTensorType.get([fold.n], f32)
        u = [_constant(vec, nt) for vec in vectors]
    mm.operands[0] = x
    mm.operands[1] = b
    old_uses = [(use_owner(use), use.operand_number) for use in mm.results[0].uses]
    with ir.InsertionPoint.after(mm), mm.location:
        keys = list(row_values)
        ins = [mm.results[0]] + [row_values[key] for key in keys] + u
        maps = [_affine_map("(d0, d1) -> (d0, d1)")] + \
            [_affine_map("(d0, d1) -> (d0, 0)")] * len(keys) + \
            [_affine_map("(d0, d1) -> (d1)")] * len(u) + [_affine_map("(d0, d1) -> (d0, d1)")]
        empty = tensor.EmptyOp([fold.m, fold.n], f32).result
        op = linalg.GenericOp([mm.results[0].type], ins, [empty], ir.ArrayAttr.get(maps),
                              ir.ArrayAttr.get([ir.Attribute.parse(
                                  "#linalg.iterator_type<parallel>")] * 2))
        types = [_tensor(v).element_type for v in ins] + [f32]
        block = op.regions[0].blocks.append(*types)
        with ir.InsertionPoint(block):
            args = list(block.arguments)
            row_args = {}
            for key, arg in zip(keys, args[1:1 + len(keys)]):
                row_args[key] = arg if str(arg.type) == "f32" else arith.ExtFOp(f32, arg).result
            y = _multiply_rows(args[0], form.coef.rows, row_args)
            for (rows, _), arg in zip(groups, args[1 + len(keys):-1]):
                y = arith.AddFOp(y, _multiply_rows(arg, rows, row_args)).result
            linalg.YieldOp([y])
    op.attributes[attributes.NORM_FOLD] = ir.StringAttr.get(
        f"{len(keys)} row value{'s' if len(keys) != 1 else ''}, {len(u)} term"
        f"{'s' if len(u) != 1 else ''}")
    for owner, number in old_uses:
        owner.operands[number] = op.results[0]
    return True


def _erase_dead(ops: list[ir.Operation]) -> None:
    """Erase the ops of `ops` (in use order: users first) that nothing reads any more."""
    for op in ops:
        if all(not list(r.uses) for r in op.results):
            op.erase()


def pays(folds: list[Fold], device: cost_model.Device) -> bool:
    """The cost model's call for the GEMMs reading one normalised tensor."""
    rows = len({value_key(v) for f in folds for v, _ in f.form.coef.rows})
    f = folds[0]
    return gemm_cost.norm_prologue_fold_pays(
        f.m, [fo.n for fo in folds], f.k, 2, rows,
        [len(_row_groups(fo.form.terms)) for fo in folds], device)


@register
@dataclass
class FoldNormProloguePass(Pass):
    """Fold a per-row affine prologue (LayerNorm, RMSNorm) into its matmuls' weights and
    epilogues (see the module docstring)."""

    ARGUMENT = "fusion-fold-norm-prologue"
    device: str = "nvidia-h200"
    # What it did: the number of matmuls folded per normalised tensor (not an option).
    folded: list = field(default_factory=list, init=False)

    def run(self, module: ir.Operation) -> None:
        device = cost_model.device_named(self.device)
        for func in model_functions(module):
            self._run(func, device)

    def _run(self, func: ir.Operation, device: cost_model.Device) -> None:
        block = func.regions[0].blocks[0]
        mms = [o.operation for o in block.operations if o.operation.name == "linalg.matmul"]
        by_a: dict = {}
        for mm in mms:
            by_a.setdefault(value_key(mm.operands[0]), []).append(mm)
        for key, users in by_a.items():
            a = users[0].operands[0]
            if any(use_owner(u).name != "linalg.matmul" or u.operand_number != 0
                   for u in a.uses):
                continue
            folds = [plan_fold(mm) for mm in users]
            if any(isinstance(f, str) for f in folds):
                continue
            if any(targets.gemm_kernel_refusal(self.device, {
                    "m": f.m, "n": f.n, "k": f.k, "in_type": _element(a), "out_type": "f32",
                    "b_layout": "nk" if f.transpose is not None else "kn"}) for f in folds):
                continue
            first = folds[0]
            if first.collapse is not None and \
                    any(use_owner(u) != first.collapse for u in first.collapse.operands[0].uses):
                continue  # the normalised tensor has other readers: it is written anyway
            if not pays(folds, device):
                continue
            shared: dict = {}
            folds = [f for f in folds if rewrite(f, shared)]
            self.folded.append(len(folds))
            dead = []
            for f in folds:
                dead += f.path + ([f.transpose] if f.transpose is not None else []) + [f.weight]
            order: list[ir.Operation] = []
            for op in dead:
                if not any(op == o for o in order):
                    order.append(op)
            _erase_dead(order)
