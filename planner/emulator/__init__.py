"""Engine emulator: an OpenAI-compatible server whose token timing comes from a profile (EngineModel)."""
