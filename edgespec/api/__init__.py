"""The public API: `Engine` and its per-generation handle `Generation`."""
