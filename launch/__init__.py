"""absl-flag launch scripts, data loading and benchmarks."""
