"""Study of seed document 000: the recursive DSA-MoE classifier (schema, analysis, tables, figures)."""
