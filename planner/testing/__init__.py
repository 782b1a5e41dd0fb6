"""Hand-written fakes shipped with the package (FakeClock, FakeMetricSource, RecordingActuator)."""
