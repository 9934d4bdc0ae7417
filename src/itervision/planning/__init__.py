"""Planning: what a scale costs (describe) and the paper campaign's GPU-hours and makespan (plan)."""
