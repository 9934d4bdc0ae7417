"""Study of seed document 003: the recurrent SparseFormer with memory and early exit (schema, analysis, tables,
figures)."""
