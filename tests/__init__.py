"""The test suite. ``tests.support`` holds the helpers every test module shares (see its docstring)."""
