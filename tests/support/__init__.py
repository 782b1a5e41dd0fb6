"""Helpers shared by test modules (no tests here): fixtures, fakes and builders, imported as
``from tests.support.<module> import ...``; pytest fixtures defined here are imported by the modules that use
them."""
