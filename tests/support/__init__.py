"""Helpers shared by the test modules: services, clocks, polling, the CLI runner."""
