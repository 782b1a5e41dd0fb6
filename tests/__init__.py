"""The test suite, a package so that its helpers import as ``tests.support.*`` from the repository root."""
