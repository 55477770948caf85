"""Helpers shared by tests: real processes and real file systems in the states the tests need."""
