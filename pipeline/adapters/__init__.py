"""Where the package reaches into a library's private API, one module per API, so that an upgrade that moves it
breaks here and in `tests/test_adapters.py`, not somewhere in the middle of a job. Each wraps only what has no public
equivalent."""
