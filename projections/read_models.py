"""Read-model tables (filled in by the projections work)."""
