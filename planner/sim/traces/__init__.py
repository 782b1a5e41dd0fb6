"""Request traces: loaders for public trace formats, synthetic generators, and per-step series."""
