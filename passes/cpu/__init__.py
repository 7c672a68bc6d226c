"""The `cpu` stage's passes: the launch plan, tile loops, the matmul microkernel, fast math, the kernel ABI."""
