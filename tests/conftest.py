"""Shared test setup: the library and the stack controller are importable (see pytest.ini)."""
