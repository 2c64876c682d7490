"""memopt FX passes (installed as memopt.passes). See docs/architecture.md."""
