"""The `fusion` stage's passes: kernels formed before planning (loop kernels, outputs), the planner (`--fusion-plan`) and the graph-level fusions it drives, the analyses they share."""
