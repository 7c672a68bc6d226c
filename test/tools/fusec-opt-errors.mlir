// fusec-opt's own errors: one line, located where possible, exit code 1, no traceback.
// RUN: not fusec-opt %s --no-such-pass 2>&1 | filecheck %s --check-prefix=PASS
// PASS: error: unknown pass '--no-such-pass'
// PASS-NOT: Traceback
// RUN: not fusec-opt %s '--canonicalize{bogus=1}' 2>&1 | filecheck %s --check-prefix=OPT
// OPT: error: bad pass options in '--canonicalize{bogus=1}': no such option bogus
// RUN: not fusec-opt %s.missing 2>&1 | filecheck %s --check-prefix=MISSING
// MISSING: fusec-opt-errors.mlir.missing: error: cannot read input file: No such file or directory
// RUN: not fusec-opt %s '--fusion-form-singletons{depth=2}' 2>&1 | filecheck %s --check-prefix=OURS
// OURS: error: --fusion-form-singletons has no option 'depth'
// stdin works, and a parse error in it is located in <stdin>:
// RUN: echo 'func.func @f() { %%x = foo.bar : i32 }' | not fusec-opt - 2>&1 | filecheck %s --check-prefix=STDIN
// STDIN: <stdin>:1:23: error: Dialect `foo' not found for custom op 'foo.bar'
// RUN: fusec-opt %s --list-passes | filecheck %s --check-prefix=LIST
// LIST: --fusion-form-singletons
// LIST: --fusion-inline-groups

func.func @f() {
  return
}
