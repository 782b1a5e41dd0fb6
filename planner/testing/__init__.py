"""Fakes and harnesses shipped with the package: FakeClock, FakeMetricSource, RecordingActuator, and a
real local Prometheus (``local_prometheus``) for tests and benchmarks."""
