"""The `bufferized` stage's passes: one buffer per output, groups outlined to kernel functions."""
